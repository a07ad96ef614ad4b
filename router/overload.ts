/**
 * When a worker counts as over its load threshold (DESIGN.md "Router", backpressure). An
 * overloaded worker is never chosen while some candidate is not; when all are, the router
 * answers "all busy" and the frontend turns that into 429/503 with Retry-After.
 *
 * KV usage is the larger of what the worker last reported and what the router itself has
 * booked there since (reports lag routing by up to a scheduler step).
 */
import type { LoadMetrics } from '../proto/wire.js';

export interface OverloadPolicy {
  /** KV usage fraction at or above which a worker is busy. */
  maxKvUsage: number;
  /** Queued prefill tokens at or above which a worker is busy; absent = no limit. */
  maxQueuedPrefillTokens?: number;
  /** Waiting sequences at or above which a worker is busy; absent = no limit. */
  maxWaiting?: number;
}

export const DEFAULT_OVERLOAD_POLICY: OverloadPolicy = { maxKvUsage: 0.95 };

export type OverloadReason = 'kv_usage' | 'queued_prefill' | 'waiting';

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
  const estimatedUsage = total !== undefined && total > 0 ? estimate.activeBlocks / total : 0;
  if (Math.max(load?.kvUsage ?? 0, estimatedUsage) >= policy.maxKvUsage) return 'kv_usage';
  if (policy.maxQueuedPrefillTokens !== undefined) {
    const queued = Math.max(load?.queuedPrefillTokens ?? 0, estimate.pendingPrefillTokens);
    if (queued >= policy.maxQueuedPrefillTokens) return 'queued_prefill';
  }
  if (policy.maxWaiting !== undefined && load !== undefined && load.numWaiting >= policy.maxWaiting) return 'waiting';
  return undefined;
}
