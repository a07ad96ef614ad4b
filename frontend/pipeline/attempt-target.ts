/**
 * Where one attempt of a request runs. In order:
 *   1. an instance of the model's own pool (agg/decode workers) that is not in cooldown;
 *   2. an instance of the fallback pool, which can run a whole request itself (the prefill
 *      pool: a prefill worker runs a request without `prefillOnly` aggregated);
 *   3. a first pick only: an instance merely in cooldown (a guess beats a refusal), never one
 *      whose connection was refused (gone);
 *   4. none of these: poll for one until `waitMs` has passed (a lone worker that died is being
 *      restarted by `runtime up`'s supervisor or the cluster's, as a new instance), then
 *      `no_instances`.
 * A selector that declines every candidate (a KV router whose workers are all over their
 * threshold) is answered at once: that is overload, which waiting here would only hide.
 */
import { instancesWithAdapter, loraCapable } from '../lora/served-adapters.js';
import { setTimeout as sleep } from 'node:timers/promises';
import type { InstanceId, PreprocessedRequest, TokenDelta } from '../../proto/wire.js';
import { NoInstancesError } from '../../runtime/errors.js';
import type { ServedModel } from '../model-watcher.js';
import type { RouteRequest, WorkerSelector } from '../routing.js';
import type { WorkerHealth } from '../worker-health.js';

/** Another pool that can run a whole request when the model's own pool has no instance left. */
export interface FallbackPool {
  /** Books attempts on this pool (its own selector's hooks). */
  readonly selector: WorkerSelector;
  /** A live instance of the pool, not in cooldown and not in `excluded`; undefined when none. */
  pick(model: string, request: PreprocessedRequest, excluded: ReadonlySet<InstanceId>): Promise<InstanceId | undefined>;
  generate(model: string, request: PreprocessedRequest, instanceId: InstanceId, signal: AbortSignal): AsyncIterable<TokenDelta>;
}

export interface AttemptTarget {
  instanceId: InstanceId;
  /** The attempt runs on the fallback pool, not the model's own. */
  fallback: boolean;
}

export interface TargetQuery {
  model: ServedModel;
  selector: WorkerSelector;
  route: RouteRequest;
  /** Instances that already failed this request. */
  excluded?: ReadonlySet<InstanceId>;
  health?: WorkerHealth;
  fallback?: FallbackPool;
  /** How long to wait for an instance when there is none (ms); 0 = answer at once. */
  waitMs: number;
  /** A retry: never an instance in cooldown (step 3 is skipped). */
  strict: boolean;
}

/** How often a waiting request looks for a returned worker. */
const WAIT_POLL_MS = 100;
const NONE: ReadonlySet<InstanceId> = new Set();

/**
 * Choose an instance among the model's candidates, skipping `excluded`. A first pick may fall
 * back to workers in cooldown when every one is (a guess beats a refusal), never to a gone one;
 * a retry (`strict`) never picks one in cooldown: it just failed somewhere, and a worker in
 * cooldown is dead or draining. No waiting, no fallback pool.
 */
export async function selectInstance(
  model: ServedModel,
  selector: WorkerSelector,
  route: RouteRequest,
  excluded?: ReadonlySet<InstanceId>,
  health?: WorkerHealth,
  strict = false,
): Promise<InstanceId> {
  const candidates = poolCandidates(model, excluded, health, strict ? 'up' : 'guess', route.request.lora, route.request.loraPath, selector.mode === 'kv');
  if (candidates.length === 0) throw new NoInstancesError(`no workers available for model '${model.name}'`);
  return pickFrom(model, selector, route, candidates);
}

/** Steps 1–4 above. Throws NoInstancesError when nothing turned up within `waitMs`, or on abort. */
export async function chooseTarget(query: TargetQuery, signal?: AbortSignal): Promise<AttemptTarget> {
  const { model, selector, route, excluded, health, fallback } = query;
  const deadline = Date.now() + query.waitMs;
  for (;;) {
    const lora = route.request.lora;
    const up = poolCandidates(model, excluded, health, 'up', lora, route.request.loraPath, selector.mode === 'kv');
    if (up.length > 0) return { instanceId: await pickFrom(model, selector, route, up), fallback: false };
    const spare = await fallback?.pick(model.name, route.request, excluded ?? NONE);
    if (spare !== undefined) return { instanceId: spare, fallback: true };
    if (!query.strict) {
      const guess = poolCandidates(model, excluded, health, 'guess', lora, route.request.loraPath, selector.mode === 'kv');
      if (guess.length > 0) return { instanceId: await pickFrom(model, selector, route, guess), fallback: false };
    }
    const left = deadline - Date.now();
    if (left <= 0 || signal?.aborted) throw new NoInstancesError(`no workers available for model '${model.name}'`);
    try {
      await sleep(Math.min(WAIT_POLL_MS, left), undefined, signal ? { signal } : undefined);
    } catch {
      // Aborted: the next round answers.
    }
  }
}

function poolCandidates(
  model: ServedModel,
  excluded: ReadonlySet<InstanceId> | undefined,
  health: WorkerHealth | undefined,
  which: 'up' | 'guess',
  lora?: string,
  loraPath?: string,
  allWorkersForAdapters = false,
): InstanceId[] {
  let candidates = model.candidates();
  // An adapter request never goes to a worker whose engine refuses adapters (card.supportsLora).
  if (lora !== undefined) candidates = loraCapable((id) => model.card(id), candidates);
  // A request for an adapter goes to workers whose card lists it; when none of them is left it may
  // go to any worker, which loads the adapter from `loraPath` first. (The KV router sees every
  // worker and charges the others a load: kv-selector.ts.)
  if (lora !== undefined && !(allWorkersForAdapters && loraPath !== undefined)) {
    const holders = instancesWithAdapter(model, candidates, lora);
    candidates = holders.length > 0 || loraPath === undefined ? holders : candidates;
  }
  if (excluded && excluded.size > 0) candidates = candidates.filter((id) => !excluded.has(id));
  if (!health) return candidates;
  return which === 'up' ? health.up(candidates, Date.now()) : health.filter(candidates, Date.now());
}

async function pickFrom(model: ServedModel, selector: WorkerSelector, route: RouteRequest, candidates: InstanceId[]): Promise<InstanceId> {
  const picked = await selector.select(route, candidates);
  if (picked === undefined) throw new NoInstancesError(`no worker can take a request for model '${model.name}' now`);
  return picked;
}
