/**
 * Which workers a decision passes over, and when a request is refused (docs/design.md "Router",
 * backpressure). Two separate rules:
 *
 * 1. Over its load threshold (`OverloadPolicy`, `overloadReason`): the worker is passed over
 *    while some candidate is not. "Over" is what the worker itself reports (KV usage at or above
 *    `maxKvUsage`); the router's own bookings over-count (a booked request may still wait in the
 *    worker's queue, where round-robin would have put it too), so alone they only decide:
 *      - before a worker has reported (or when its report is stale: the adapter leaves `load`
 *        out): booked blocks / pool ≥ `maxKvUsage`, as the best estimate there is;
 *      - always: booked blocks / pool ≥ `maxBookedUsage` (default 2): more is routed there than
 *        the pool could hold twice over, a burst that outran the reports. Never pile on that.
 *    When every candidate is over, the request still goes to the least-bad one (lowest cost)
 *    and waits in its scheduler, as round-robin's would: the worker starts it the moment blocks
 *    free, and queueing in the router instead adds latency and buys nothing. Such a decision is
 *    counted as `saturated`.
 * 2. Refusal (`RefusalPolicy`, opt-in: `--router-busy-threshold`, `--router-max-waiting`): a
 *    worker whose report is at or above one of these bounds is busy; when every candidate is,
 *    the router answers `all_busy` and the frontend's bounded queue ends in 429 + Retry-After.
 *    Off by default (as in Dynamo, whose busy threshold is opt-in; vLLM and SGLang queue).
 */
import type { LoadMetrics } from '../proto/wire.js';

export interface OverloadPolicy {
  /** KV usage fraction at or above which a worker is busy (its report; bookings before one). */
  maxKvUsage: number;
  /** Booked blocks / pool at or above which a worker is busy even when its report is low. */
  maxBookedUsage?: number;
  /** Queued prefill tokens at or above which a worker is busy; absent = no limit. */
  maxQueuedPrefillTokens?: number;
  /** Waiting sequences at or above which a worker is busy; absent = no limit. */
  maxWaiting?: number;
}

export const DEFAULT_MAX_BOOKED_USAGE = 2;

export const DEFAULT_OVERLOAD_POLICY: OverloadPolicy = { maxKvUsage: 0.95, maxBookedUsage: DEFAULT_MAX_BOOKED_USAGE };

export type OverloadReason = 'kv_usage' | 'booked' | 'queued_prefill' | 'waiting';

export interface RouterLoadEstimate {
  activeBlocks: number;
  pendingPrefillTokens: number;
}

/**
 * Opt-in refusal bounds on what a worker reports. Before a worker reports (or when its report
 * is stale) its bookings stand in for the KV bound, as for the load threshold.
 */
export interface RefusalPolicy {
  /**
   * `--router-busy-threshold`: reported KV usage at or above which a worker is busy (its
   * bookings stand in before it reports); so are bookings past `maxBookedUsage` of its pool.
   */
  kvUsage?: number;
  /** With `kvUsage`: booked blocks / pool at or above which a worker is busy whatever it reports; default 2. */
  maxBookedUsage?: number;
  /** `--router-max-waiting`: reported waiting requests at or above which a worker is busy. */
  maxWaiting?: number;
}

export type RefusalReason = 'busy_threshold' | 'max_waiting';

/** Why the worker is busy by the refusal policy, or undefined when it is not (or no bound is set). */
export function refusalReason(load: LoadMetrics | undefined, estimate: RouterLoadEstimate, totalBlocks: number | undefined, policy: RefusalPolicy | undefined): RefusalReason | undefined {
  if (policy === undefined) return undefined;
  if (policy.kvUsage !== undefined) {
    const total = totalBlocks ?? load?.totalBlocks;
    const booked = total !== undefined && total > 0 ? estimate.activeBlocks / total : 0;
    if ((load !== undefined ? load.kvUsage : booked) >= policy.kvUsage) return 'busy_threshold';
    if (booked >= (policy.maxBookedUsage ?? DEFAULT_MAX_BOOKED_USAGE)) return 'busy_threshold';
  }
  if (policy.maxWaiting !== undefined && load !== undefined && load.numWaiting >= policy.maxWaiting) return 'max_waiting';
  return undefined;
}

/** True when the policy sets at least one bound. */
export function refuses(policy: RefusalPolicy | undefined): boolean {
  return policy !== undefined && (policy.kvUsage !== undefined || policy.maxWaiting !== undefined);
}

/** Why the worker is over threshold, or undefined when it is not. */
export function overloadReason(
  load: LoadMetrics | undefined,
  estimate: RouterLoadEstimate,
  totalBlocks: number | undefined,
  policy: OverloadPolicy,
): OverloadReason | undefined {
  const total = totalBlocks ?? load?.totalBlocks;
  const bookedUsage = total !== undefined && total > 0 ? estimate.activeBlocks / total : 0;
  if (load !== undefined) {
    if (load.kvUsage >= policy.maxKvUsage) return 'kv_usage';
  } else if (bookedUsage >= policy.maxKvUsage) return 'kv_usage';
  if (bookedUsage >= (policy.maxBookedUsage ?? DEFAULT_MAX_BOOKED_USAGE)) return 'booked';
  if (policy.maxQueuedPrefillTokens !== undefined) {
    const queued = Math.max(load?.queuedPrefillTokens ?? 0, estimate.pendingPrefillTokens);
    if (queued >= policy.maxQueuedPrefillTokens) return 'queued_prefill';
  }
  if (policy.maxWaiting !== undefined && load !== undefined && load.numWaiting >= policy.maxWaiting) return 'waiting';
  return undefined;
}
