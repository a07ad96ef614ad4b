/**
 * The contract every PerfModel passes (polynomial, and interpolated profiles of both decode
 * shapes). A model's test file calls `perfModelContract(name, case)` with the points it must
 * reproduce: hand-worked formula values for the polynomial, the measured points for a profile.
 *
 * Monotonicity is promised where the model promises it: the polynomial on KV usage 0..1 (its
 * decode derivative 54.01 − 51.48·p stays positive there) and everywhere in tokens; a profile
 * only when its measured points are monotone, which every profile given here is (a profile with
 * a dip is reproduced faithfully instead; see interpolated.test.ts).
 */
import { describe, expect, it } from 'vitest';
import { DECODE_FLOOR_MS, stepTimeMs, type PerfModel } from '../../perf-model/index.js';

export interface PerfModelCase {
  make(): PerfModel;
  /** [tokens, ms] the model must give (to 1e-6). */
  prefillAnchors: Array<[tokens: number, ms: number]>;
  /** [kvUsage, batchSize, ms] the model must give (to 1e-6). */
  decodeAnchors: Array<[kvUsage: number, batchSize: number, ms: number]>;
}

const TOKENS = [1, 2, 7, 16, 100, 512, 1000, 1024, 2048, 4096, 8192, 32768, 131072];
const KV = [0, 0.05, 0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 0.9, 0.99, 1];
const BATCH = [1, 2, 4, 8, 16, 32, 64, 128, 256, 1024];

function nonDecreasing(values: number[]): boolean {
  return values.every((v, i) => i === 0 || v >= values[i - 1]! - 1e-9);
}

export function perfModelContract(name: string, c: PerfModelCase): void {
  describe(`perf model contract: ${name}`, () => {
    const m = c.make();
    const maxAnchorTokens = Math.max(...c.prefillAnchors.map(([t]) => t), 1);

    it('reproduces its anchor points (hand-worked values or measured points)', () => {
      for (const [t, ms] of c.prefillAnchors) expect(m.prefillMs(t), `prefill ${t}`).toBeCloseTo(ms, 6);
      for (const [kv, b, ms] of c.decodeAnchors) expect(m.decodeMs(kv, b), `decode ${kv}×${b}`).toBeCloseTo(ms, 6);
    });

    it('predicts positive, finite times for every prompt length and batch', () => {
      for (const t of TOKENS) {
        const ms = m.prefillMs(t);
        expect(Number.isFinite(ms) && ms > 0, `prefill ${t} → ${ms}`).toBe(true);
      }
      for (const kv of KV) {
        for (const b of BATCH) {
          const ms = m.decodeMs(kv, b);
          expect(Number.isFinite(ms) && ms >= DECODE_FLOOR_MS, `decode ${kv}×${b} → ${ms}`).toBe(true);
        }
      }
    });

    it('prefill time never falls as the prompt grows, including between and around anchors', () => {
      const sweep = [...TOKENS, ...c.prefillAnchors.flatMap(([t]) => [t - 1, t, t + 1])].filter((t) => t >= 1).sort((a, b) => a - b);
      expect(nonDecreasing(sweep.map((t) => m.prefillMs(t)))).toBe(true);
    });

    it('decode time never falls as KV usage or batch size grows', () => {
      for (const b of BATCH) expect(nonDecreasing(KV.map((kv) => m.decodeMs(kv, b))), `batch ${b}`).toBe(true);
      for (const kv of KV) expect(nonDecreasing(BATCH.map((b) => m.decodeMs(kv, b))), `kv ${kv}`).toBe(true);
    });

    it('KV usage outside 0..1 is clamped to the ends', () => {
      for (const b of [1, 64]) {
        expect(m.decodeMs(-0.5, b)).toBe(m.decodeMs(0, b));
        expect(m.decodeMs(1.7, b)).toBe(m.decodeMs(1, b));
      }
    });

    it('extrapolates prefill past its largest anchor: still growing, and at most quadratically', () => {
      let prev = m.prefillMs(maxAnchorTokens);
      for (const t of [2, 4, 16, 64].map((k) => k * maxAnchorTokens)) {
        const ms = m.prefillMs(t);
        expect(Number.isFinite(ms)).toBe(true);
        expect(ms).toBeGreaterThan(prev);
        // Doubling the prompt at most quadruples the time (t² is the steepest term any fit has).
        expect(ms / m.prefillMs(t / 2)).toBeLessThanOrEqual(4);
        prev = ms;
      }
    });

    it('batching pays: one decode step of 8 sequences costs less than 8 steps of one', () => {
      for (const kv of KV) expect(m.decodeMs(kv, 8)).toBeLessThan(8 * m.decodeMs(kv, 1));
    });

    it('a long prompt costs more to prefill than any one decode step', () => {
      const longest = Math.max(...KV.flatMap((kv) => BATCH.map((b) => m.decodeMs(kv, b))));
      expect(m.prefillMs(Math.max(4096, maxAnchorTokens))).toBeGreaterThan(longest);
    });

    it('a step pays prefill plus decode; a pure step pays one; an empty step costs nothing', () => {
      const p = m.prefillMs(1000);
      const d = m.decodeMs(0.5, 4);
      expect(stepTimeMs(m, { prefillTokens: 1000, numDecodeSeqs: 4, kvUsage: 0.5 })).toBeCloseTo(p + d, 9);
      expect(stepTimeMs(m, { prefillTokens: 1000, numDecodeSeqs: 0, kvUsage: 0.5 })).toBeCloseTo(p, 9);
      expect(stepTimeMs(m, { prefillTokens: 0, numDecodeSeqs: 4, kvUsage: 0.5 })).toBeCloseTo(d, 9);
      expect(stepTimeMs(m, { prefillTokens: 0, numDecodeSeqs: 0, kvUsage: 0.5 })).toBe(0);
    });
  });
}
