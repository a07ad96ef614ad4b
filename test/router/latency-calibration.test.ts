/**
 * Online calibration: measured / predicted, smoothed in log space with α = 0.2 and bounded to
 * [1/8, 8]. After k samples of a steady ratio R (starting from 1) the estimate is R^(1 − 0.8^k):
 * 2× slow reads 1.51× after 4 samples, 1.98× after 20.
 */
import { describe, expect, it } from 'vitest';
import { LatencyCalibration } from '../../router/calibration.js';
import { KvRouter } from '../../router/kv-router.js';
import { VirtualFleet, poissonRequests } from './virtual-fleet.js';

describe('LatencyCalibration', () => {
  it('converges on a steady ratio as R^(1 − 0.8^k)', () => {
    const c = new LatencyCalibration();
    expect(c.of('w', 0).ttftRatio).toBe(1);
    for (let k = 1; k <= 20; k++) {
      c.observe('w', 'ttft', 50, 100, 0);
      expect(c.of('w', 0).ttftRatio).toBeCloseTo(2 ** (1 - 0.8 ** k), 9);
    }
    expect(c.of('w', 0)).toMatchObject({ ttftSamples: 20, itlSamples: 0, itlRatio: 1 });
  });

  it('is bounded, ignores nonsense, and keeps workers and metrics apart', () => {
    const c = new LatencyCalibration();
    for (let i = 0; i < 200; i++) c.observe('stalled', 'itl', 1, 10_000, 0);
    expect(c.of('stalled', 0).itlRatio).toBeCloseTo(8, 6);
    c.observe('x', 'ttft', 0, 10, 0);
    c.observe('x', 'ttft', 10, Number.NaN, 0);
    c.observe('x', 'ttft', 10, -1, 0);
    expect(c.of('x', 0).ttftSamples).toBe(0);
    expect(c.of('stalled', 0).ttftRatio).toBe(1);
    c.removeWorker('stalled');
    expect(c.of('stalled', 0).itlRatio).toBe(1);
  });

  it('ages toward 1 without samples: the log ratio halves every half-life, so a worker written off is tried again', () => {
    const c = new LatencyCalibration({ halfLifeMs: 30_000 });
    for (let i = 0; i < 100; i++) c.observe('w', 'ttft', 10, 40, 1000);
    expect(c.of('w', 1000).ttftRatio).toBeCloseTo(4, 6);
    expect(c.of('w', 31_000).ttftRatio).toBeCloseTo(2, 6);
    expect(c.of('w', 61_000).ttftRatio).toBeCloseTo(Math.SQRT2, 6);
    // A new sample starts from the aged value: 2^0.8 · 4^0.2 = 2^1.2.
    c.observe('w', 'ttft', 10, 40, 31_000);
    expect(c.of('w', 31_000).ttftRatio).toBeCloseTo(2 ** 1.2, 6);
  });
});

describe('a worker slowed to half speed', () => {
  it('is seen as slow within 20 requests, and the router then sends it less', () => {
    const router = new KvRouter({ cost: 'latency' });
    const fleet = new VirtualFleet([{ id: 'a', speed: 1 }, { id: 'b', speed: 1 }], router);
    const cal = () => router.latency!.calibration;
    // Warm-up at equal speed: both workers calibrate to about 1.
    fleet.run(poissonRequests({ count: 60, ratePerS: 40, isl: 512, osl: 16, seed: 1, prefix: 'warm' }));
    expect(cal().of('b', fleet.nowMs).ttftRatio).toBeGreaterThan(0.8);
    expect(cal().of('b', fleet.nowMs).ttftRatio).toBeLessThan(1.25);
    const before = cal().of('b', fleet.nowMs).ttftRatio;

    fleet.setSpeed('b', 0.5);
    // Offered load that needs both workers (one alone would queue), so b keeps getting requests
    // until it is seen as slow: a worker that gets no traffic gets no new measurements.
    const after = poissonRequests({ count: 200, ratePerS: 40, isl: 512, osl: 16, seed: 2, startMs: fleet.nowMs + 1000, prefix: 'slow' });
    let seenSlowAfter: number | undefined;
    let routed = 0;
    fleet.run(after, () => {
      routed++;
      if (seenSlowAfter === undefined && cal().of('b', fleet.nowMs).ttftRatio >= 1.5 * cal().of('a', fleet.nowMs).ttftRatio) seenSlowAfter = routed;
    });
    expect(seenSlowAfter, `b's TTFT ratio ${cal().of('b', fleet.nowMs).ttftRatio.toFixed(2)} (was ${before.toFixed(2)}), a's ${cal().of('a', fleet.nowMs).ttftRatio.toFixed(2)}`).toBeDefined();
    expect(seenSlowAfter!).toBeLessThanOrEqual(20);
    const toB = after.filter((r) => fleet.outcomes.get(r.requestId)!.workerId === 'b').length;
    expect(toB).toBeLessThan(after.length / 2);
  });
});
