/**
 * SLA sizing, worked by hand on Dynamo's polynomial (perf-model/README.md):
 *   prefillMs(t) = 4.209989e-7·t² + 1.518344e-2·t + 16.50142
 *   decodeMs(p)  = −25.74·p² + 54.01·p + 5.74      (no batch term)
 */
import { describe, expect, it } from 'vitest';
import { PolynomialPerfModel } from '../../perf-model/index.js';
import { decodeOperatingPoint, maxUtilizationForTtft, mdWaitMs, sizeAgg, sizeDecode, sizePrefill } from '../../planner/index.js';

const perf = new PolynomialPerfModel();
// S(3000) = 4.209989e-7·9e6 + 1.518344e-2·3000 + 16.50142 = 3.78899 + 45.55032 + 16.50142 = 65.84073 ms
const S3000 = 65.84073;

describe('prefill: M/D/1 utilization under the TTFT target', () => {
  it('mean wait at ρ 0.5 is half a service time: 0.5·S / (2·0.5) = S/2', () => {
    expect(mdWaitMs(0.5, 100)).toBeCloseTo(50, 9);
    expect(mdWaitMs(1, 100)).toBe(Infinity);
  });

  it('TTFT 300 ms at S 65.84: k = (300 − 65.84)/65.84 = 3.5565, ρ* = 2k/(1+2k) = 0.8767', () => {
    expect(maxUtilizationForTtft(S3000, 300)).toBeCloseTo(0.87674, 4);
    // check: S + ρS/(2(1−ρ)) = 65.84 + 0.87674·65.84/(2·0.12326) = 65.84 + 234.16 = 300
    const rho = maxUtilizationForTtft(S3000, 300);
    expect(S3000 + mdWaitMs(rho, S3000)).toBeCloseTo(300, 3);
  });

  it('100 req/s at ISL 3000, TTFT 300: 100 × 0.06584 s ÷ 0.8767 = 7.51 workers', () => {
    const s = sizePrefill(perf, 100, 3000, 300, 0.9);
    expect(s.serviceMs).toBeCloseTo(S3000, 4);
    expect(s.replicas).toBeCloseTo(7.5097, 3);
    expect(s.feasible).toBe(true);
  });

  it('a loose target is capped by maxUtilization: TTFT 5000 gives ρ* 0.987, used 0.9 → 100 × 0.06584 / 0.9 = 7.32', () => {
    expect(sizePrefill(perf, 100, 3000, 5000, 0.9).replicas).toBeCloseTo(7.3156, 3);
  });

  it('a target below one unloaded prefill is flagged infeasible and sized at ρ 0.5: 100 × 0.06584 / 0.5 = 13.17', () => {
    const s = sizePrefill(perf, 100, 3000, 50, 0.9);
    expect(s.feasible).toBe(false);
    expect(s.replicas).toBeCloseTo(13.168, 2);
  });
});

describe('decode: the best operating point under the ITL target', () => {
  // context 3000 + 300/2 = 3150 tokens, KV capacity 131072 → p(b) = b·3150/131072 = 0.024033·b
  it('ITL 25 ms: batch 18 (p 0.4326, 24.29 ms) fits, batch 19 (p 0.4566, 25.04 ms) does not', () => {
    // decodeMs(0.432587) = −25.74·0.187131 + 54.01·0.432587 + 5.74 = −4.8168 + 23.3640 + 5.74 = 24.2873
    const pt = decodeOperatingPoint(perf, 3150, 25, 131072);
    expect(pt.batch).toBe(18);
    expect(pt.itlMs).toBeCloseTo(24.287, 2);
    expect(pt.tokensPerS).toBeCloseTo(18000 / 24.2873, 1); // 741.1
    expect(perf.decodeMs((19 * 3150) / 131072, 19)).toBeGreaterThan(25);
  });

  it('100 req/s × OSL 300 = 30,000 tok/s ÷ 741.1 = 40.48 workers', () => {
    const s = sizeDecode(perf, 100, 3000, 300, 25, 131072);
    expect(s.contextTokens).toBe(3150);
    expect(s.replicas).toBeCloseTo(40.48, 1);
  });

  it('an ITL target below the batch-1 step (5.74 ms at p≈0) is flagged infeasible', () => {
    expect(decodeOperatingPoint(perf, 3150, 5, 131072).feasible).toBe(false);
  });
});

describe('aggregated: both shares on one worker', () => {
  const t = { ttftMs: 300, itlMs: 25, kvCapacityTokens: 131072, maxUtilization: 0.9 };
  it('100 req/s, ISL 3000, OSL 300, TTFT 300, ITL 25: 52 workers (disagg needs 8 + 41 = 49)', () => {
    // prefill load = 100 × 0.06584 = 6.584 worker-s/s.
    // n = 52: u = 6.584/52 = 0.1266; decode sized for ITL 25 × (1 − 0.1266) = 21.83 ms → batch 14
    //   (p = 14·3150/131072 = 0.3365, step 21.00 ms, 666.7 tok/s); capacity 52 × 666.7 × 0.8734 = 30,280 ≥ 30,000 ✓
    //   TTFT: ρ* for T − step = 279 ms at S 65.84 is 0.866 ≥ u ✓
    // n = 51: u = 0.1291, same batch 14; capacity 51 × 666.7 × 0.8709 = 29,613 < 30,000 ✗
    const agg = sizeAgg(perf, 100, 3000, 300, t);
    expect(agg.feasible).toBe(true);
    expect(agg.replicas).toBe(52);
    expect(agg.prefillShare).toBeCloseTo(0.12662, 4);
    expect(agg.point.batch).toBe(14);
    expect(agg.point.itlMs / (1 - agg.prefillShare)).toBeLessThanOrEqual(25);
  });

  it('no traffic: one worker', () => {
    expect(sizeAgg(perf, 0, 3000, 300, t).replicas).toBe(1);
  });
});
