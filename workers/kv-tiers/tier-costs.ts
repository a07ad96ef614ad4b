/**
 * What moving a block between tiers costs against recomputing it. The onboard decision
 * (copy only when cheaper) and the router's default hit weights both come from here.
 *
 * Bandwidths are documented constants (docs/kv-tiers.md), overridable per worker: host↔device
 * copies at PCIe-pinned speed on a GPU (memcpy speed on the CPU engine), disk reads at NVMe speed.
 */
import type { PerfModel } from '../../perf-model/index.js';
import type { OnboardCosts } from '../block-manager/kv-tier-policy.js';
import { recomputeMsPerBlock, tierHitWeight } from '../../router/index.js';

export interface TierBandwidths {
  /** G2 → G1 bytes per second. */
  hostBytesPerSec: number;
  /** G3 → G1 bytes per second (the disk read dominates). */
  diskBytesPerSec: number;
}

/** H100-like: pinned host over PCIe 5 (~25 GB/s effective) and a local NVMe SSD (~3 GB/s). */
export const H100_TIER_BANDWIDTHS: TierBandwidths = { hostBytesPerSec: 25e9, diskBytesPerSec: 3e9 };
/** The native CPU engine: G1 is host memory too, so a G2 copy is a memcpy (~8 GB/s single-threaded). */
export const CPU_TIER_BANDWIDTHS: TierBandwidths = { hostBytesPerSec: 8e9, diskBytesPerSec: 2e9 };

export function onboardCosts(perf: PerfModel, blockBytes: number, bw: TierBandwidths): OnboardCosts {
  return {
    hostMsPerBlock: (blockBytes / bw.hostBytesPerSec) * 1000,
    diskMsPerBlock: (blockBytes / bw.diskBytesPerSec) * 1000,
    prefillMs: (t) => perf.prefillMs(t),
  };
}

/**
 * Router hit weights: the share of a block's prefill a hit in that tier saves, 1 − copy/recompute
 * (clamped to 0..1), recompute measured on top of a `contextTokens` prefill.
 */
export function tierHitWeights(costs: OnboardCosts, blockSize: number, contextTokens = 1024): { host: number; disk: number } {
  const recompute = recomputeMsPerBlockOf(costs, blockSize, contextTokens);
  return { host: tierHitWeight(costs.hostMsPerBlock, recompute), disk: tierHitWeight(costs.diskMsPerBlock, recompute) };
}

/** Ms to recompute one block on top of a `contextTokens` prefill: the perf model's marginal cost. */
export function recomputeMsPerBlockOf(costs: Pick<OnboardCosts, 'prefillMs'>, blockSize: number, contextTokens = 1024): number {
  return recomputeMsPerBlock((t) => costs.prefillMs(t), blockSize, contextTokens);
}

