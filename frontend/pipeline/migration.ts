/**
 * Routing plus migration for one request. The first instance is chosen up front (so "no
 * workers" is an HTTP 503, not a broken stream); if that worker dies mid-stream ('unavailable',
 * a stream that ends without a finish reason, or a cancel we did not ask for), the request is
 * re-sent to another instance with the tokens generated so far appended to the prompt and
 * max_tokens reduced. A retry never goes to an instance that already failed this request or
 * is in cooldown (dead, or draining); one that fails before its first token is tried elsewhere
 * without spending the migration limit. With no instance of the pool left (a lone decode
 * worker died) the retry runs on the fallback pool when there is one, or waits up to `waitMs`
 * for the pool to come back (attempt-target.ts). The consumer sees one uninterrupted stream of
 * deltas. The request id is kept, so a worker that derives its sampling seed from it continues
 * the same sequence.
 */
import type { InstanceId, PreprocessedRequest, TokenDelta } from '../../proto/wire.js';
import { TandemError, UnavailableError } from '../../runtime/errors.js';
import type { ServedModel } from '../model-watcher.js';
import type { RouteRequest, WorkerSelector } from '../routing.js';
import type { WorkerHealth } from '../worker-health.js';
import { chooseTarget, type AttemptTarget, type FallbackPool } from './attempt-target.js';

export { selectInstance } from './attempt-target.js';

export interface MigrationPlan {
  model: ServedModel;
  selector: WorkerSelector;
  request: PreprocessedRequest;
  firstInstance: InstanceId;
  /** The first instance belongs to the fallback pool (prepare found none of the model's own). */
  firstOnFallback?: boolean;
  /** Direct routing names one instance: there is nowhere to migrate to. */
  pinned: boolean;
  migrationLimit: number;
  /** How long a retry waits for an instance when the pool has none left (ms); default 0. */
  waitMs?: number;
  /** Runs a retry when the model's own pool has no instance left. */
  fallback?: FallbackPool;
  health?: WorkerHealth;
  onMigrate?: (from: InstanceId, generated: number, cause: unknown) => void;
  /** Any attempt that failed (not a client cancel), before deciding whether to migrate. */
  onAttemptFailed?: (instanceId: InstanceId, sawToken: boolean, cause: unknown) => void;
}

function isMigratable(err: unknown): boolean {
  return err instanceof TandemError ? err.code === 'unavailable' : (err as { code?: unknown } | null)?.code === 'unavailable';
}

export async function* streamWithMigration(plan: MigrationPlan, signal: AbortSignal): AsyncGenerator<TokenDelta> {
  const base = plan.request;
  const generated: number[] = [];
  const failed = new Set<InstanceId>();
  let target: AttemptTarget = { instanceId: plan.firstInstance, fallback: plan.firstOnFallback === true && plan.fallback !== undefined };
  /** Attempts so far after the first (the resend arithmetic keys off it). */
  let migrations = 0;
  /** Moves of a stream that had produced tokens on the failed attempt: what `migrationLimit` bounds. */
  let spent = 0;
  for (;;) {
    // A KV hand-off belongs to the first attempt only: the prefill worker frees the blocks once
    // that decode worker has pulled them, so a resend must compute the prompt itself.
    const { kvTransfer: _handedOff, ...resendBase } = base;
    const request: PreprocessedRequest =
      migrations === 0
        ? base
        : {
            ...resendBase,
            tokenIds: base.tokenIds.concat(generated),
            stop: { ...base.stop, maxTokens: base.stop.maxTokens - generated.length, ...(base.stop.minTokens !== undefined ? { minTokens: Math.max(0, base.stop.minTokens - generated.length) } : {}) },
            numPriorOutputTokens: (base.numPriorOutputTokens ?? 0) + generated.length,
          };
    const route: RouteRequest = { model: plan.model.name, request };
    const attempt = target.instanceId;
    const generatedBefore = generated.length;
    // An attempt on the fallback pool is booked with that pool's selector.
    const hooks = target.fallback ? plan.fallback!.selector : plan.selector;
    hooks.onRouted?.(route, attempt);
    let sawToken = false;
    let failure: unknown;
    try {
      const deltas = target.fallback ? plan.fallback!.generate(plan.model.name, request, attempt, signal) : plan.model.generate(request, attempt, signal);
      for await (const delta of deltas) {
        if (!sawToken && delta.tokenIds.length > 0) {
          sawToken = true;
          hooks.onFirstToken?.(route, attempt);
        }
        for (let i = 0; i < delta.tokenIds.length; i++) generated.push(delta.tokenIds[i]!);
        const failedHere = delta.finishReason === 'error' || (delta.finishReason === 'cancelled' && !signal.aborted);
        if (failedHere) {
          // Tokens that came with the failure are real output: pass them on before moving.
          if (delta.tokenIds.length > 0) yield { ...delta, finishReason: undefined } as TokenDelta;
          if (delta.finishReason === 'error') throw new TandemError('internal', `worker ${attempt} failed the request`);
          throw new UnavailableError(`worker ${attempt} cancelled the stream`);
        }
        yield delta;
        if (delta.finishReason) return;
      }
      if (signal.aborted) return;
      throw new UnavailableError(`worker ${attempt} ended the stream without finishing`);
    } catch (err) {
      if (!signal.aborted) plan.onAttemptFailed?.(attempt, sawToken, err);
      if (signal.aborted || !isMigratable(err)) throw err;
      plan.health?.markFailed(attempt, err, Date.now());
      // A worker that failed before its first token (dead, or draining) cost the client nothing:
      // that retry is routing, not migration, and is bounded by the candidates left. Only moving
      // a stream that already produced tokens spends the migration budget.
      if (plan.pinned || (sawToken && spent >= plan.migrationLimit)) throw err;
      failure = err;
    } finally {
      hooks.onFinished?.(route, attempt, generated.length - generatedBefore);
    }
    failed.add(attempt);
    migrations += 1;
    if (sawToken) spent += 1;
    plan.onMigrate?.(attempt, generated.length, failure);
    if (generated.length >= base.stop.maxTokens) {
      yield { tokenIds: [], finishReason: 'length' };
      return;
    }
    try {
      target = await chooseTarget(
        {
          model: plan.model,
          selector: plan.selector,
          route: { model: plan.model.name, request: base },
          excluded: failed,
          ...(plan.health ? { health: plan.health } : {}),
          ...(plan.fallback ? { fallback: plan.fallback } : {}),
          waitMs: plan.waitMs ?? 0,
          strict: true,
        },
        signal,
      );
    } catch {
      if (signal.aborted) return;
      // The cause matters more than "no other worker": keep it when there is nowhere to go.
      throw failure;
    }
  }
}
