/**
 * When a worker counts as over its load threshold (docs/design.md "Router", backpressure). An
 * overloaded worker is never chosen while some candidate is not; when all are, the router
 * answers "all busy" and the frontend queues (bounded) and then answers 429/503 with
 * Retry-After.
 *
 * "Truly saturated" is what the worker itself reports: KV usage at or above `maxKvUsage`. The
 * router's own bookings are an estimate that over-counts (a booked request may still be waiting
 * in the worker's queue, which is where round-robin would have put it too), so they alone only
 * decide:
 *   - before a worker has reported (or when its report is stale: the adapter leaves `load`
 *     out): booked blocks / pool ≥ `maxKvUsage`, as the best estimate there is;
 *   - always: booked blocks / pool ≥ `maxBookedUsage` (default 2): more is routed there than
 *     the pool could hold twice over, a burst that outran the reports. Never pile on that.
 * Queueing in the router where round-robin would just run adds TTFT and buys nothing: the
 * worker's scheduler queues as well, and starts the request the moment blocks free.
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
