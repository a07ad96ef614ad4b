/**
 * Dynamo's published polynomial fit of step time (the default model).
 *
 *   prefillMs(t) = 4.209989e-7·t² + 1.518344e-2·t + 16.50142      (t = 1000 → 32.106 ms)
 *   decodeMs(p)  = max(1, −25.74·p² + 54.01·p + 5.74)              (p = 0.5 → 26.31 ms)
 *
 * Decode depends on KV usage only (the fit has no batch-size term); p is clamped to 0..1.
 */
import { clamp01, DECODE_FLOOR_MS, type PerfModel } from './perf-model.js';

export class PolynomialPerfModel implements PerfModel {
  constructor(
    readonly prefill: readonly [a2: number, a1: number, a0: number] = [4.209989e-7, 1.518344e-2, 16.50142],
    readonly decode: readonly [b2: number, b1: number, b0: number] = [-25.74, 54.01, 5.74],
  ) {}

  prefillMs(tokens: number): number {
    const [a2, a1, a0] = this.prefill;
    return a2 * tokens * tokens + a1 * tokens + a0;
  }

  decodeMs(kvUsage: number, _batchSize: number): number {
    const [b2, b1, b0] = this.decode;
    const p = clamp01(kvUsage);
    return Math.max(DECODE_FLOOR_MS, b2 * p * p + b1 * p + b0);
  }
}
