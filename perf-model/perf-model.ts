/**
 * The performance model: how long one engine step takes, from its shape. The mocker sleeps what
 * it predicts; the planner sizes pools from it. Pure: no I/O, no clock.
 *
 *   stepMs = (t > 0 ? prefillMs(t) : 0) + (d > 0 ? decodeMs(p, d) : 0)
 *
 * t = prompt (or recompute) tokens computed in the step, d = decoding sequences, p = fraction of
 * KV blocks in use. A mixed step pays both: the prefill chunk and the decode tokens share one
 * forward pass, but the fits were measured on pure steps, and adding them is the conservative
 * (slower) reading that keeps chunked prefill from looking free.
 *
 * Implementations: PolynomialPerfModel (Dynamo's published fit, the default) and
 * InterpolatedPerfModel (measured points from a profile file).
 */

export interface StepShape {
  prefillTokens: number;
  numDecodeSeqs: number;
  /** KV blocks in use / total, 0..1. */
  kvUsage: number;
}

/**
 * What every implementation promises (test/perf-model/perf-model.contract.ts checks it):
 * finite, positive times for tokens ≥ 1 and batch size ≥ 1; prefill time never falls as tokens
 * grow; decode time is at least DECODE_FLOOR_MS, and KV usage outside 0..1 is clamped.
 */
export interface PerfModel {
  /** Milliseconds to prefill `tokens` new tokens in one step. */
  prefillMs(tokens: number): number;
  /** Milliseconds of one decode step at KV usage `kvUsage` with `batchSize` sequences. */
  decodeMs(kvUsage: number, batchSize: number): number;
}

/** No decode step is predicted faster than this (ms): a forward pass is never free. */
export const DECODE_FLOOR_MS = 1;

/** Simulated milliseconds of one step, before any speedup ratio. */
export function stepTimeMs(model: PerfModel, shape: StepShape): number {
  let ms = 0;
  if (shape.prefillTokens > 0) ms += model.prefillMs(shape.prefillTokens);
  if (shape.numDecodeSeqs > 0) ms += model.decodeMs(shape.kvUsage, shape.numDecodeSeqs);
  return ms;
}

export function clamp01(v: number): number {
  return v < 0 ? 0 : v > 1 ? 1 : v;
}
