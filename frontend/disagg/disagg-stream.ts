/**
 * One disaggregated request as a single delta stream (protocol: docs/disaggregation.md
 * "What happens to a request"):
 *
 *   prefill worker  ── PreprocessedRequest{prefillOnly} ──▶ one delta {first token, kvTransfer}
 *        │ yields the first token at once (TTFT = the prefill's first token)
 *   decode worker   ── prompt + [first], kvTransfer, max_tokens − 1, numPriorOutputTokens 1 ──▶
 *        the rest of the tokens, with the usual migration if the decode worker dies.
 *
 * Guarantees: a prefill that started is never cancelled (its call is not tied to the client),
 * and its pinned blocks are always released: by the decode worker after its pull, or here when
 * the decode call never got under way (client gone, stream closed early, first decode attempt
 * failed before its first token). kv_release is idempotent on the worker side.
 * A prefill worker that fails ('unavailable') is replaced by another one; with none left the
 * request runs aggregated on the chosen decode worker.
 *
 * Layer-wise streaming (`layerStreaming`, both chosen workers' cards say kvLayerStreaming):
 * the prefill worker may first send an early delta with no token and kvTransfer (with its
 * layer-progress slot); it goes to the chosen decode worker's `kv_prefetch` at once, and the
 * decode leg (same transferId) waits for that call's answer so it finds the prefetch there.
 */
import type { InstanceId, KvTransferParams, PreprocessedRequest, TokenDelta } from '../../proto/wire.js';
import { TandemError, UnavailableError } from '../../runtime/errors.js';
import type { ServedModel } from '../model-watcher.js';
import type { FallbackPool } from '../pipeline/attempt-target.js';
import { streamWithMigration, type MigrationPlan } from '../pipeline/migration.js';
import type { RouteRequest, WorkerSelector } from '../routing.js';
import type { WorkerHealth } from '../worker-health.js';
import type { DisaggRoute, PrefillRouter } from './prefill-router.js';

/** What actually happened, for the response's debugging fields and metrics. */
export interface DisaggTrace {
  prefillWorkerId?: InstanceId;
  decodeWorkerId?: InstanceId;
  /** 'disagg', or 'fallback' once no prefill worker could serve and the request ran aggregated. */
  path: 'disagg' | 'fallback';
  prefillSeconds?: number;
  /** KV handed to the decode worker (blocks × block bytes), set at the hand-off. */
  transferBytes?: number;
  /**
   * Hand-off → first decode token: the decode worker's KV pull plus its first step (the
   * frontend does not see the pull alone). Set when the decode leg's first token arrives.
   */
  transferSeconds?: number;
  prefillRetries: number;
  releasedByFrontend: boolean;
  /** The decode worker started copying the hand-off layer by layer before the first token. */
  layerStreamed?: boolean;
}

export interface DisaggStreamPlan {
  model: ServedModel;
  router: PrefillRouter;
  /** The frontend's selector: routes the decode leg and its migrations. */
  selector: WorkerSelector;
  request: PreprocessedRequest;
  route: DisaggRoute;
  pinned: boolean;
  migrationLimit: number;
  /** Decode retries: how long to wait for a decode worker, and the pool that runs them when none is up. */
  waitMs?: number;
  fallback?: FallbackPool;
  health?: WorkerHealth;
  trace: DisaggTrace;
  onMigrate?: (from: InstanceId, generated: number, cause: unknown) => void;
  onPrefillFailed?: (instanceId: InstanceId, cause: unknown) => void;
  onRelease?: (params: KvTransferParams) => void;
  /** Frontend --kv-layer-streaming. */
  layerStreaming?: boolean;
}

/** Where and how long the decode leg's retries look for a worker. */
function retryOptions(plan: DisaggStreamPlan): Pick<MigrationPlan, 'waitMs' | 'fallback' | 'health'> {
  return {
    ...(plan.waitMs !== undefined ? { waitMs: plan.waitMs } : {}),
    ...(plan.fallback ? { fallback: plan.fallback } : {}),
    ...(plan.health ? { health: plan.health } : {}),
  };
}

function isUnavailable(err: unknown): boolean {
  return err instanceof TandemError ? err.code === 'unavailable' : (err as { code?: unknown } | null)?.code === 'unavailable';
}

/** Run the prompt on one prefill worker and collect its answer (one delta by protocol). */
async function runPrefill(plan: DisaggStreamPlan, request: PreprocessedRequest, instanceId: InstanceId, onEarly?: (kv: KvTransferParams) => void): Promise<TokenDelta> {
  const selector = plan.router.prefillSelector;
  const route: RouteRequest = { model: plan.model.name, request };
  // Deliberately not the client's signal: a prefill that started runs to its answer, so the
  // blocks it pins are always handed off or released.
  const signal = new AbortController().signal;
  selector.onRouted?.(route, instanceId);
  let answer: TokenDelta | undefined;
  try {
    for await (const delta of plan.router.pool.generate(plan.model.name, request, instanceId, signal)) {
      if (delta.finishReason === 'error' || delta.finishReason === 'cancelled') throw new UnavailableError(`prefill worker ${instanceId} ended with '${delta.finishReason}'`);
      if (answer === undefined && delta.tokenIds.length === 0 && delta.kvTransfer !== undefined && delta.finishReason === undefined) {
        // Layer-wise streaming's early announcement; the answer follows.
        onEarly?.(delta.kvTransfer);
        continue;
      }
      if (answer === undefined) {
        if (delta.tokenIds.length > 0) selector.onFirstToken?.(route, instanceId);
        answer = { ...delta, tokenIds: delta.tokenIds.slice() };
        continue;
      }
      // More than one delta is off-protocol but harmless: fold it in.
      answer.tokenIds.push(...delta.tokenIds);
      if (delta.kvTransfer) answer.kvTransfer = delta.kvTransfer;
      if (delta.finishReason) answer.finishReason = delta.finishReason;
      if (delta.usage) answer.usage = delta.usage;
    }
  } finally {
    selector.onFinished?.(route, instanceId);
  }
  if (answer === undefined || answer.tokenIds.length === 0) throw new UnavailableError(`prefill worker ${instanceId} answered no token`);
  if (answer.kvTransfer === undefined && answer.finishReason === undefined) {
    throw new TandemError('internal', `prefill worker ${instanceId} answered neither a KV hand-off nor a finish reason`);
  }
  return answer;
}

export async function* streamDisaggregated(plan: DisaggStreamPlan, signal: AbortSignal): AsyncGenerator<TokenDelta> {
  const base = plan.request;
  const trace = plan.trace;
  const decodeCard = plan.layerStreaming === true && plan.router.pool.prefetch !== undefined ? plan.model.card(plan.route.decodeInstance) : undefined;
  const streaming = decodeCard?.kvLayerStreaming === true;
  const prefillRequest: PreprocessedRequest = { ...base, prefillOnly: true, ...(streaming ? { kvLayerStreaming: true } : {}) };
  let prefetch: { transferId: string; started: Promise<boolean> } | undefined;
  const onEarly = streaming
    ? (kv: KvTransferParams): void => {
        prefetch = { transferId: kv.transferId, started: plan.router.pool.prefetch!(decodeCard!, kv) };
      }
    : undefined;
  const failed = new Set<InstanceId>();
  let prefillId: InstanceId | undefined = plan.route.prefillInstance;
  let first: TokenDelta | undefined;
  const startedAt = performance.now();
  while (prefillId !== undefined) {
    try {
      trace.prefillWorkerId = prefillId;
      first = await runPrefill(plan, prefillRequest, prefillId, onEarly);
      break;
    } catch (err) {
      if (!isUnavailable(err)) throw err;
      plan.health?.markFailed(prefillId, err, Date.now());
      plan.onPrefillFailed?.(prefillId, err);
      failed.add(prefillId);
      trace.prefillRetries += 1;
      prefillId = trace.prefillRetries > plan.migrationLimit || signal.aborted ? undefined : await plan.router.pickPrefill(plan.model.name, base, failed);
    }
  }
  trace.prefillSeconds = (performance.now() - startedAt) / 1000;

  if (first === undefined) {
    if (signal.aborted) return;
    // No prefill worker could take it: the chosen decode worker computes the prompt itself.
    trace.path = 'fallback';
    delete trace.prefillWorkerId;
    trace.decodeWorkerId = plan.route.decodeInstance;
    yield* streamWithMigration(
      {
        model: plan.model,
        selector: plan.selector,
        request: base,
        firstInstance: plan.route.decodeInstance,
        pinned: plan.pinned,
        migrationLimit: plan.migrationLimit,
        ...retryOptions(plan),
        ...(plan.onMigrate ? { onMigrate: plan.onMigrate } : {}),
      },
      signal,
    );
    return;
  }

  const kv = first.kvTransfer;
  let released = false;
  let handedOff = false;
  const release = () => {
    if (released || kv === undefined) return;
    released = true;
    trace.releasedByFrontend = true;
    plan.onRelease?.(kv);
    void plan.router.pool.release(plan.model.name, kv);
  };
  const prefillCached = first.usage?.cachedTokens;
  try {
    // The prefill's answer is the first token; its finish reason is final only without a hand-off.
    const head: TokenDelta = { tokenIds: first.tokenIds, instanceId: trace.prefillWorkerId! };
    if (first.logprobs) head.logprobs = first.logprobs;
    if (first.usage) head.usage = first.usage;
    if (kv === undefined) {
      head.finishReason = first.finishReason!;
      yield head;
      return;
    }
    yield head;
    const n = first.tokenIds.length;
    if (signal.aborted || base.stop.maxTokens - n <= 0) return;
    const decodeRequest: PreprocessedRequest = {
      ...base,
      tokenIds: base.tokenIds.concat(first.tokenIds),
      kvTransfer: kv,
      stop: { ...base.stop, maxTokens: base.stop.maxTokens - n, ...(base.stop.minTokens !== undefined ? { minTokens: Math.max(0, base.stop.minTokens - n) } : {}) },
      numPriorOutputTokens: (base.numPriorOutputTokens ?? 0) + n,
    };
    // The decode worker must know the prefetch before the request that adopts it arrives.
    if (prefetch !== undefined && prefetch.transferId === kv.transferId) trace.layerStreamed = await prefetch.started;
    trace.decodeWorkerId = plan.route.decodeInstance;
    trace.transferBytes = kv.blockIds.length * kv.blockBytes;
    const handedOffAt = performance.now();
    handedOff = true;
    let attempts = 0;
    const decode = streamWithMigration(
      {
        model: plan.model,
        selector: plan.selector,
        request: decodeRequest,
        firstInstance: plan.route.decodeInstance,
        pinned: plan.pinned,
        migrationLimit: plan.migrationLimit,
        ...retryOptions(plan),
        onMigrate: (from, generated, cause) => plan.onMigrate?.(from, generated, cause),
        onAttemptFailed: (_id, sawToken) => {
          // Only the first attempt carried the hand-off. If it failed before its first token the
          // decode worker may never have pulled (or died before telling the prefill worker).
          if (attempts++ === 0 && !sawToken) release();
        },
      },
      signal,
    );
    for await (const delta of decode) {
      if (trace.transferSeconds === undefined) trace.transferSeconds = (performance.now() - handedOffAt) / 1000;
      if (delta.instanceId !== undefined) trace.decodeWorkerId = delta.instanceId;
      if (delta.usage && prefillCached !== undefined) {
        // The prompt's cache hit happened on the prefill worker; the decode side's is moot.
        yield { ...delta, usage: { ...delta.usage, cachedTokens: prefillCached } };
      } else yield delta;
    }
  } finally {
    // Closed early (stop string, client gone) before the decode call was made: nobody else
    // will tell the prefill worker.
    if (!handedOff) release();
  }
}
