/**
 * The policy core as worked examples: observations in, decisions out, the arithmetic in the
 * comments. Perf model: Dynamo's polynomial (see sla-sizing.test.ts for the numbers).
 */
import { describe, expect, it } from 'vitest';
import { PolynomialPerfModel } from '../../perf-model/index.js';
import { ConfigError } from '../../runtime/errors.js';
import { applyBudget, backlogReplicas, defaultPlannerConfig, parsePlannerConfig, Planner, type BudgetEntry, type Observation, type PlannerConfig, type PoolObservation } from '../../planner/index.js';

const perf = new PolynomialPerfModel();

/** Worked-example config: targets used as given (no margin, no forecast-error or surge headroom) unless a test sets them. */
function config(over: Partial<PlannerConfig> = {}): PlannerConfig {
  const c = defaultPlannerConfig();
  return { ...c, cooldownDownS: 0, scaleDownIntervals: 1, predictor: 'constant', ...over, sla: { ...c.sla, ttftMs: 300, itlMs: 25, corrections: false, rateZ: 0, targetMargin: 1, surgeHalfLifeS: 0, ...(over.sla ?? {}) } };
}

const pool = (replicas: number, o: Partial<PoolObservation> = {}): PoolObservation => ({ replicas, ready: replicas, queuedPrefillTokens: 0, kvUsage: 0.6, ...o });

function obs(nowS: number, pools: Observation['pools'], traffic: Partial<Observation['traffic']> = {}): Observation {
  return { nowMs: nowS * 1000, pools, traffic: { requests: 6000, intervalS: 60, meanIsl: 3000, meanOsl: 300, ...traffic } };
}

const byPool = (ds: ReturnType<Planner['step']>) => Object.fromEntries(ds.map((d) => [d.pool, d]));

describe('load mode (Dynamo thresholds: queue 5 / 0.2, KV 0.9 / 0.5; context 8192)', () => {
  const cases: { name: string; prefill: Partial<PoolObservation> & { n: number }; decode: Partial<PoolObservation> & { n: number }; want: [number, number]; rules: [string, string] }[] = [
    // 196,608 queued / 4 workers / 8192 = 6 > 5 → +1; KV 0.95 > 0.9 → +1
    { name: 'both above: +1 each', prefill: { n: 4, queuedPrefillTokens: 196608 }, decode: { n: 6, kvUsage: 0.95 }, want: [5, 7], rules: ['load.up', 'load.up'] },
    // 16,384 / 4 / 8192 = 0.5 (between 0.2 and 5); KV 0.7 (between 0.5 and 0.9) → keep
    { name: 'both within the band: keep', prefill: { n: 4, queuedPrefillTokens: 16384 }, decode: { n: 6, kvUsage: 0.7 }, want: [4, 6], rules: ['load.within', 'load.within'] },
    // 0 queued → 0 < 0.2 → −1; KV 0.3 < 0.5 → −1
    { name: 'both below: −1 each', prefill: { n: 4 }, decode: { n: 6, kvUsage: 0.3 }, want: [3, 5], rules: ['load.down', 'load.down'] },
    // at the minimum (1) a low signal holds
    { name: 'at min: hold', prefill: { n: 1 }, decode: { n: 1, kvUsage: 0.1 }, want: [1, 1], rules: ['load.down', 'load.down'] },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const planner = new Planner(config({ mode: 'load' }), perf);
      const { prefill, decode } = byPool(planner.step(obs(60, { prefill: pool(c.prefill.n, c.prefill), decode: pool(c.decode.n, c.decode) })));
      expect([prefill!.target, decode!.target]).toEqual(c.want);
      expect([prefill!.rule, decode!.rule]).toEqual(c.rules);
      expect(prefill!.reason).toMatch(/prefill queue/);
      expect(decode!.reason).toMatch(/KV/);
    });
  }

  it('latency variant scales up earlier: KV 0.75 is "within" for throughput, "up" for latency', () => {
    const lat = new Planner(parsePlannerConfig({ mode: 'load', load: { variant: 'latency' }, scaleDownIntervals: 1 }), perf);
    const thr = new Planner(config({ mode: 'load' }), perf);
    const o = obs(60, { prefill: pool(2), decode: pool(4, { kvUsage: 0.75 }) });
    expect(byPool(thr.step(o)).decode!.target).toBe(4);
    expect(byPool(lat.step(o)).decode!.target).toBe(5);
  });

  it('agg pool: up on either signal, down only when both are low', () => {
    const p = new Planner(config({ mode: 'load', pools: { agg: { min: 1, max: 10, gpusPerWorker: 1, allowZero: false } } }), perf);
    expect(p.step(obs(60, { agg: pool(3, { kvUsage: 0.95 }) }))[0]!.target).toBe(4);
    const q = new Planner(config({ mode: 'load', pools: { agg: { min: 1, max: 10, gpusPerWorker: 1, allowZero: false } } }), perf);
    // KV low but queue 3 × 8192 × 1 / 3 / 8192 = 1 (not < 0.2) → keep
    expect(q.step(obs(60, { agg: pool(3, { kvUsage: 0.1, queuedPrefillTokens: 3 * 8192 }) }))[0]!.target).toBe(3);
  });
});

describe('SLA mode: sizing from predictions', () => {
  it('100 req/s, ISL 3000, OSL 300, TTFT 300, ITL 25 → prefill 8, decode 41, with the arithmetic in the reason', () => {
    const p = new Planner(config(), perf);
    const { prefill, decode } = byPool(p.step(obs(60, { prefill: pool(2), decode: pool(10) })));
    // prefill: 100 × 65.84 ms ÷ ρ 0.877 = 7.51 → 8 ; decode: 30,000 tok/s ÷ 741.1 = 40.48 → 41
    expect(prefill).toMatchObject({ current: 2, desired: 8, target: 8, action: 'up', rule: 'sla.prefill' });
    expect(decode).toMatchObject({ current: 10, desired: 41, target: 41, action: 'up', rule: 'sla.decode' });
    expect(prefill!.reason).toContain('100.0 × 65.8 ms ÷ ρ 0.877');
    expect(decode!.reason).toContain('30000 tok/s ÷ 741.1 tok/s/worker (batch 18');
    // surge 0: no forecast has been wrong yet (and this config turns surge headroom off)
    expect(prefill!.prediction).toEqual({ rate: 100, isl: 3000, osl: 300, plannedRate: 100, surge: 0 });
  });

  it('a measured TTFT twice the expected raises the prefill count: factor 1.5 → target 200 ms → 9', () => {
    const p = new Planner(config({ sla: { ...defaultPlannerConfig().sla, ttftMs: 300, itlMs: 25, corrections: true, rateZ: 0, targetMargin: 1 } }), perf);
    // 8 ready at 100 req/s: ρ = 6.584/8 = 0.823; expected = 65.84 + 0.823·65.84/(2·0.177) = 218.9 ms
    // measured 437.8 → ratio 2 → factor 0.5·1 + 0.5·2 = 1.5 → TTFT target 300/1.5 = 200 ms
    // ρ*(200) = 2k/(1+2k), k = (200 − 65.84)/65.84 = 2.0376 → 0.803; 6.584 / 0.803 = 8.20 → 9
    const { prefill } = byPool(p.step(obs(60, { prefill: pool(8), decode: pool(41, { kvUsage: 0.43 }) }, { ttftMs: 437.8 })));
    expect(p.corrections.ttft).toBeCloseTo(1.5, 2);
    expect(prefill!.desired).toBe(9);
    expect(prefill!.corrections!.ttft).toBeCloseTo(1.5, 2);
  });

  it('a queued prefill backlog adds the workers that clear it within one interval: 7.51 + 1.10 → 9', () => {
    const p = new Planner(config(), perf);
    // 3,000,000 queued tokens ÷ ISL 3000 = 1000 prompts × 65.84 ms = 65.84 worker-s ÷ 60 s = 1.097
    const { prefill } = byPool(p.step(obs(60, { prefill: pool(8, { queuedPrefillTokens: 3_000_000 }), decode: pool(41) })));
    expect(backlogReplicas(pool(8, { queuedPrefillTokens: 3_000_000 }), 3000, 65.84073, 60)).toBeCloseTo(1.0973, 3);
    expect(prefill!.desired).toBe(9);
    expect(prefill!.reason).toContain('+ backlog 3000000 tokens drained in one interval 1.10');
  });

  it('headroom: targetMargin 0.9 sizes for 270 ms; rateZ 1.28 adds 1.28 × the RMS forecast error to the rate', () => {
    // surge headroom off: the jump below would also be a surge sample (next test)
    const p = new Planner(config({ sla: { ...defaultPlannerConfig().sla, ttftMs: 300, itlMs: 25, corrections: false, rateZ: 1.28, targetMargin: 0.9, surgeHalfLifeS: 0 } }), perf);
    // interval 1: 100 req/s, no forecast yet → error 0 → planned 100. TTFT 270 ms: k = (270 − 65.84)/65.84 = 3.1008,
    // ρ* = 6.2016/7.2016 = 0.8611 → 6.584 / 0.8611 = 7.65 → 8
    expect(byPool(p.step(obs(60, { prefill: pool(8), decode: pool(41) }))).prefill!.desired).toBe(8);
    // interval 2: 150 req/s against a forecast of 100 → error² 2500 × 0.2 = 500 → RMS 22.36 → planned 150 + 28.62 = 178.62
    const d = byPool(p.step(obs(120, { prefill: pool(8), decode: pool(41) }, { requests: 9000 }))).prefill!;
    expect(d.prediction!.plannedRate).toBeCloseTo(178.62, 1);
    // 178.62 × 0.06584 / 0.8611 = 13.66 → 14
    expect(d.desired).toBe(14);
  });

  it('surge: 1.8× the forecast is remembered; the pools also cover rate × 1.8 at the full targets, and it halves every surgeHalfLifeS', () => {
    const p = new Planner(config({ sla: { ...defaultPlannerConfig().sla, ttftMs: 300, itlMs: 25, corrections: false, rateZ: 0, targetMargin: 0.9, surgeHalfLifeS: 3600 } }), perf);
    const step = (t: number, requests: number) => byPool(p.step(obs(t, { prefill: pool(8), decode: pool(41) }, { requests })));
    // interval 1: 100 req/s, no forecast → surge 0; base rule at 270 ms: 100 × 0.06584 ÷ 0.8611 = 7.65 → 8
    expect(step(60, 6000).prefill).toMatchObject({ desired: 8, prediction: { surge: 0 } });
    // interval 2: 180 req/s against a forecast of 100 → sample 0.8. The forecast is now 180:
    //   base:  180 × 0.06584 ÷ 0.8611 (270 ms) = 13.76 → 14
    //   surge: 180 × 1.8 = 324 req/s at the full 300 ms: k = 3.5565, ρ* = 0.8767 → 324 × 0.06584 ÷ 0.8767 = 24.33 → 25
    //   decode surge: 324 × 300 = 97,200 tok/s ÷ 741.1 (batch 18 at ≤ 25 ms, as in the first test) = 131.2 → 132
    const burst = step(120, 10800);
    expect(burst.prefill!.prediction!.surge).toBeCloseTo(0.8, 9);
    expect(burst.prefill!.desired).toBe(25);
    expect(burst.prefill!.reason).toContain('surge ×1.80 → 324.0 req/s at the full targets: 324.0 × 65.8 ms ÷ ρ 0.877 (TTFT 300.0 ms) = 24.33');
    expect(burst.decode!.desired).toBe(132);
    expect(burst.decode!.reason).toContain('97200 tok/s ÷ 741.1 tok/s/worker (batch 18');
    // an hour of 100 req/s (60 intervals; below the forecast adds no sample): 0.8 × 2^(−3600/3600) = 0.4;
    // surge case 140 req/s at 300 ms: 140 × 0.06584 ÷ 0.8767 = 10.51 → 11, above the base 8
    let calm = step(180, 6000);
    for (let t = 240; t <= 3720; t += 60) calm = step(t, 6000);
    expect(calm.prefill!.prediction!.surge).toBeCloseTo(0.4, 9);
    expect(calm.prefill!.desired).toBe(11);
  });

  it('surge from near zero is capped at 3× the forecast (MAX_SURGE 2); surgeHalfLifeS 0 turns it off', () => {
    const on = new Planner(config({ sla: { ...defaultPlannerConfig().sla, surgeHalfLifeS: 3600 } }), perf);
    on.step(obs(60, { prefill: pool(1), decode: pool(1) }, { requests: 6 })); // 0.1 req/s
    expect(byPool(on.step(obs(120, { prefill: pool(1), decode: pool(1) }, { requests: 6000 }))).prefill!.prediction!.surge).toBe(2); // 1000× → capped
    const off = new Planner(config(), perf);
    off.step(obs(60, { prefill: pool(1), decode: pool(1) }, { requests: 6 }));
    expect(byPool(off.step(obs(120, { prefill: pool(1), decode: pool(1) }, { requests: 6000 }))).prefill!.prediction!.surge).toBe(0);
  });

  it('no traffic seen yet: keep, rule no_signal', () => {
    const p = new Planner(config(), perf);
    const ds = p.step(obs(60, { prefill: pool(2), decode: pool(3) }, { requests: 0, meanIsl: undefined, meanOsl: undefined }));
    expect(ds.map((d) => [d.rule, d.target])).toEqual([['no_signal', 2], ['no_signal', 3]]);
  });
});

describe('constraints', () => {
  it('at most one pending action per pool: hold until the pool reports the target ready', () => {
    const p = new Planner(config(), perf);
    expect(byPool(p.step(obs(60, { prefill: pool(2), decode: pool(41) }))).prefill!.target).toBe(8);
    // next interval: 8 requested, 5 ready; traffic doubled → asks 15, but the action is pending
    const held = byPool(p.step(obs(120, { prefill: pool(8, { ready: 5 }), decode: pool(41) }, { requests: 12000 }))).prefill!;
    expect(held).toMatchObject({ current: 8, target: 8, action: 'hold', limitedBy: ['pending'] });
    expect(held.desired).toBeGreaterThan(8);
    const next = byPool(p.step(obs(180, { prefill: pool(8), decode: pool(82) }, { requests: 12000 }))).prefill!;
    expect(next.action).toBe('up');
  });

  it('cooldown: a second scale-up within cooldownUpS is held', () => {
    const p = new Planner(config({ cooldownUpS: 120 }), perf);
    p.step(obs(60, { prefill: pool(2), decode: pool(41) }));
    const d = byPool(p.step(obs(120, { prefill: pool(8), decode: pool(41) }, { requests: 12000 }))).prefill!;
    expect(d).toMatchObject({ action: 'hold', limitedBy: ['cooldown'] });
    expect(byPool(p.step(obs(180, { prefill: pool(8), decode: pool(82) }, { requests: 12000 }))).prefill!.action).toBe('up');
  });

  it('hysteresis: down only after 3 low intervals in a row, to the largest of the 3 asks', () => {
    const p = new Planner(config({ scaleDownIntervals: 3 }), perf);
    const at = (t: number, requests: number) => byPool(p.step(obs(t, { prefill: pool(20), decode: pool(41) }, { requests }))).prefill!;
    // asks: 60 req/s → 60·0.06584/0.877 = 4.51 → 5; 30 req/s → 2.25 → 3; 80 req/s → 6.01 → 7
    expect(at(60, 3600)).toMatchObject({ desired: 5, target: 20, limitedBy: ['hysteresis'] });
    expect(at(120, 1800)).toMatchObject({ desired: 3, target: 20, limitedBy: ['hysteresis'] });
    const third = at(180, 4800);
    expect(third).toMatchObject({ desired: 7, target: 7, action: 'down' });
  });

  it('a pool goes to zero only when allowed', () => {
    const zeroOk = { prefill: { min: 0, max: 10, gpusPerWorker: 1, allowZero: true }, decode: { min: 1, max: 100, gpusPerWorker: 1, allowZero: false } };
    const p = new Planner(config({ pools: zeroOk }), perf);
    p.step(obs(60, { prefill: pool(8), decode: pool(41) })); // sized already: hold, ISL/OSL learnt
    const ds = byPool(p.step(obs(120, { prefill: pool(8), decode: pool(41) }, { requests: 0 })));
    // constant predictor: rate 0 next → prefill asks 0 → 0 (allowed); decode asks 0 → floor 1
    expect(ds.prefill!.target).toBe(0);
    expect(ds.decode).toMatchObject({ target: 1, limitedBy: ['min'] });
  });

  it('max per pool clamps the ask', () => {
    const p = new Planner(config({ pools: { prefill: { min: 1, max: 4, gpusPerWorker: 1, allowZero: false }, decode: { min: 1, max: 1000, gpusPerWorker: 1, allowZero: false } } }), perf);
    expect(byPool(p.step(obs(60, { prefill: pool(2), decode: pool(41) }))).prefill).toMatchObject({ desired: 8, target: 4, limitedBy: ['max'] });
  });

  it('budget: growth is trimmed proportionally (worked example in constraints.ts)', () => {
    const e: BudgetEntry[] = [
      { pool: 'prefill', current: 2, target: 5, gpusPerWorker: 1, limitedBy: [] },
      { pool: 'decode', current: 4, target: 10, gpusPerWorker: 1, limitedBy: [] },
    ];
    applyBudget(e, 10, undefined);
    expect(e.map((x) => x.target)).toEqual([3, 6]);
    expect(e[0]!.limitedBy).toEqual(['budget']);
  });

  it('GPU budget counts gpusPerWorker: decode at 2 GPUs each, 6 → 10 trimmed to 9 (2 + 2·9 = 20 GPUs)', () => {
    // used = 2·1 + 10·2 = 22 > 20 by 2; decode growth 4 → 2·4 = 8 GPUs, factor (8 − 2)/8 = 0.75 → +floor(3) → 9
    const e: BudgetEntry[] = [
      { pool: 'prefill', current: 2, target: 2, gpusPerWorker: 1, limitedBy: [] },
      { pool: 'decode', current: 6, target: 10, gpusPerWorker: 2, limitedBy: [] },
    ];
    applyBudget(e, undefined, 20);
    expect(e[1]!.target).toBe(9);
  });
});

describe('config validation: a clear ConfigError naming the field', () => {
  const bad: [string, unknown, RegExp][] = [
    ['unknown pool', { pools: { encode: { min: 1, max: 2 } } }, /pools\.encode: unknown pool/],
    ['min > max', { pools: { prefill: { min: 5, max: 2 }, decode: {} } }, /pools\.prefill: min 5 > max 2/],
    ['negative interval', { intervalS: -5 }, /intervalS: must be a number > 0/],
    ['zero without allowZero', { pools: { agg: { min: 0, max: 4 } } }, /allowZero/],
    ['agg with prefill', { pools: { agg: {}, prefill: {}, decode: {} } }, /either agg, or prefill and decode/],
    ['unknown predictor', { predictor: 'arima' }, /predictor/],
    ['unknown field', { intervl: 5 }, /intervl: unknown field/],
    ['negative surge half-life', { sla: { surgeHalfLifeS: -1 } }, /sla\.surgeHalfLifeS: must be a number ≥ 0/],
  ];
  for (const [name, raw, re] of bad) {
    it(name, () => {
      expect(() => parsePlannerConfig(raw)).toThrow(ConfigError);
      expect(() => parsePlannerConfig(raw)).toThrow(re);
    });
  }
});
