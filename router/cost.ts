/**
 * The KV-mode cost of docs/design.md "Router", per candidate worker:
 *
 *   cost = prefill_load_scale × max(0, new_prefill_blocks − overlap_credit × cached_blocks)
 *        + active_decode_blocks
 *
 * Our reading of the terms (all in KV blocks of `block_size` tokens):
 *   request_blocks       ceil(prompt_tokens / block_size): a partial last block still prefills
 *   cached_blocks        max(indexed overlap, in-flight overlap): the leading request blocks
 *                        the worker holds according to its KV events (RadixIndexer), or that an
 *                        active sequence routed there shares (ActiveSequences.sharedPrefixBlocks);
 *                        the latter will be computed by the time this request is scheduled, but
 *                        the worker announces them only after that prefill
 *   new_prefill_blocks   request_blocks + the worker's pending prefill blocks (sequences routed
 *                        to it whose first token has not come back): the prefill work queued
 *                        in front of, plus including, this request
 *   active_decode_blocks the worker's active blocks (ActiveSequences.activeBlocks): distinct
 *                        blocks of its in-flight sequences, shared prefixes counted once
 *
 * So with overlap_credit = 1 the prefill term is "queued prefill + this request's uncached
 * part", and a cache hit is worth exactly the blocks it saves. Lower is better.
 */
import type { InstanceId } from '../proto/wire.js';
import type { LatencyPrediction } from './latency-cost.js';

export interface CostWeights {
  prefillLoadScale: number;
  overlapScoreCredit: number;
  /**
   * KV tiers: the share of a block's prefill that a hit in the worker's host (G2) or disk (G3)
   * tier saves (`--router-host-hit-weight`, `--router-disk-hit-weight`):
   *   prefill = max(0, new − credit·device − host_weight·host − disk_weight·disk)
   * A worker that reports its own tier costs (`LoadTierReport.onboardMsPerBlock`: its measured
   * onboard time, and its perf model's recompute time) is weighed by those, 1 − onboard /
   * recompute (`tierHitWeight`), unless these flags are set. Defaults, for workers that do not
   * report: the same from the default perf model and H100-like bandwidths (docs/kv-tiers.md):
   * a 2 MiB block (8B model, bf16) copies over PCIe in 0.084 ms against 0.243 ms to recompute
   * its 16 tokens → 0.65; from NVMe at 3 GB/s it takes 0.70 ms, slower than recomputing → 0
   * (the worker would not onboard it either).
   */
  hostHitWeight?: number;
  diskHitWeight?: number;
}

export const DEFAULT_HOST_HIT_WEIGHT = 0.65;
export const DEFAULT_DISK_HIT_WEIGHT = 0;

export const DEFAULT_COST_WEIGHTS: CostWeights = {
  prefillLoadScale: 1,
  overlapScoreCredit: 1,
  hostHitWeight: DEFAULT_HOST_HIT_WEIGHT,
  diskHitWeight: DEFAULT_DISK_HIT_WEIGHT,
};

export interface WorkerCostInput {
  instanceId: InstanceId;
  cachedBlocks: number;
  pendingPrefillBlocks: number;
  activeDecodeBlocks: number;
  /** Request blocks after the cached ones that the worker holds in its host / disk tier. */
  hostBlocks?: number;
  diskBlocks?: number;
  /** This worker's own hit weights (1 − its measured onboard time / recompute time), over `CostWeights`'. */
  hostHitWeight?: number;
  diskHitWeight?: number;
}

/** One line of the cost table a decision carries (and logs). */
export interface CostRow extends WorkerCostInput {
  /** The two sources of `cachedBlocks` (set by `KvRouter.select`): KV-event index, active bookings. */
  indexedBlocks?: number;
  inflightBlocks?: number;
  newPrefillBlocks: number;
  /** max(0, new_prefill_blocks − overlap_credit × cached_blocks) */
  prefillBlocks: number;
  cost: number;
  /** Over its load threshold: not eligible while any candidate is not. */
  overloaded: boolean;
  /** `--router-cost latency`: the predictions `cost` (then in ms) was made of (latency-cost.ts). */
  latency?: LatencyPrediction;
  /** Holds at least the prefix-affinity share of the prompt in some tier (prefix-affinity.ts). */
  prefixHolder?: boolean;
  /** For a holder: pool − used − the blocks this request adds; negative = it would wait for KV. */
  kvRoomBlocks?: number;
  /** Prefix affinity: this holder holds enough of the prompt (`waitShare`) to keep it without KV room. */
  waitsForRoom?: boolean;
  /** Multi-LoRA: adapters in flight there beyond its `--max-loras` with this request's (lora-affinity.ts). */
  loraSlotWaits?: number;
}

/**
 * The share of a block's prefill that a hit in a lower tier saves: 1 − onboard copy time /
 * recompute time, clamped to 0..1. One formula for the worker's figures and the router's
 * weights (workers/kv-tiers/tier-costs.ts, `KvRouter`).
 */
export function tierHitWeight(onboardMsPerBlock: number, recomputeMsPerBlock: number): number {
  if (!(recomputeMsPerBlock > 0) || !Number.isFinite(onboardMsPerBlock)) return 0;
  return Math.max(0, Math.min(1, 1 - onboardMsPerBlock / recomputeMsPerBlock));
}

/** Ms the perf model takes to prefill one more block on top of a `contextTokens` prefill (its marginal cost). */
export function recomputeMsPerBlock(prefillMs: (tokens: number) => number, blockSize: number, contextTokens = 1024): number {
  return prefillMs(contextTokens + blockSize) - prefillMs(contextTokens);
}

export function requestBlocksOf(promptTokens: number, blockSize: number): number {
  return Math.ceil(promptTokens / blockSize);
}

export function workerCost(requestBlocks: number, w: WorkerCostInput, weights: CostWeights, overloaded = false): CostRow {
  const newPrefillBlocks = requestBlocks + w.pendingPrefillBlocks;
  const hostBlocks = w.hostBlocks ?? 0;
  const diskBlocks = w.diskBlocks ?? 0;
  const hostWeight = w.hostHitWeight ?? weights.hostHitWeight ?? DEFAULT_HOST_HIT_WEIGHT;
  const diskWeight = w.diskHitWeight ?? weights.diskHitWeight ?? DEFAULT_DISK_HIT_WEIGHT;
  const tierCredit = (hostBlocks > 0 ? hostWeight * hostBlocks : 0) + (diskBlocks > 0 ? diskWeight * diskBlocks : 0);
  const prefillBlocks = Math.max(0, newPrefillBlocks - weights.overlapScoreCredit * w.cachedBlocks - tierCredit);
  // An explicit literal, not a spread: this runs per candidate per decision.
  return {
    instanceId: w.instanceId,
    cachedBlocks: w.cachedBlocks,
    pendingPrefillBlocks: w.pendingPrefillBlocks,
    activeDecodeBlocks: w.activeDecodeBlocks,
    hostBlocks,
    diskBlocks,
    ...(hostBlocks + diskBlocks > 0 ? { hostHitWeight: hostWeight, diskHitWeight: diskWeight } : {}),
    newPrefillBlocks,
    prefillBlocks,
    cost: weights.prefillLoadScale * prefillBlocks + w.activeDecodeBlocks,
    overloaded,
  };
}
