/**
 * The fleet simulator: the fluid model on worked numbers, trace binning, and the comparison the
 * planner is judged by (planner vs static peak vs static average on a diurnal + bursty day).
 */
import { describe, expect, it } from 'vitest';
import { PolynomialPerfModel } from '../../perf-model/index.js';
import { ConfigError } from '../../runtime/errors.js';
import { binTrace, compareProvisioning, defaultPlannerConfig, FleetModel, formatComparison, parseMooncakeTrace, simulate, summarizeTrace, syntheticTrace, type PlannerConfig } from '../../planner/index.js';

const perf = new PolynomialPerfModel();

describe('fluid model', () => {
  it('steady 100 req/s on 8 prefill + 41 decode: TTFT = S + M/D/1 wait = 218.9 ms, ITL under 25 ms', () => {
    const m = new FleetModel(perf, 131072, 'disagg');
    let out = m.tick({ dt: 1, requests: 100, isl: 3000, osl: 300 }, 8, 41);
    for (let t = 0; t < 300; t++) out = m.tick({ dt: 1, requests: 100, isl: 3000, osl: 300 }, 8, 41);
    // S = 65.84 ms; ρ = 100·0.06584/8 = 0.823; wait = 0.823·65.84/(2·0.177) = 153.1 → 218.9 ms
    expect(out.ttftMs).toBeCloseTo(218.9, 0);
    expect(m.prefillBacklogS).toBe(0);
    // Little: 100 req/s × 300 tokens × ITL (s) = 30·ITL(ms) sequences decoding, ≈ 17.5 per worker, KV ≈ 0.42;
    // `active` is read after the tick's 100 completions left
    expect(out.itlMs).toBeGreaterThan(20);
    expect(out.itlMs).toBeLessThan(25);
    expect((m.active + 100) / 41).toBeCloseTo((30 * out.itlMs) / 41, 1);
  });

  it('overload: 5 prefill workers serve 75.9 req/s, so at 100 req/s the backlog and TTFT grow every tick', () => {
    const m = new FleetModel(perf, 131072, 'disagg');
    const ttft: number[] = [];
    for (let t = 0; t < 60; t++) ttft.push(m.tick({ dt: 1, requests: 100, isl: 3000, osl: 300 }, 5, 41).ttftMs);
    // backlog grows by 100·0.06584 − 5 = 1.584 worker-s per second → 60 s: 95 worker-s, 19 s of wait per worker
    expect(m.prefillBacklogS).toBeCloseTo(60 * 1.584, 0);
    expect(ttft[59]!).toBeGreaterThan(ttft[10]! + 10_000);
  });

  it('no prefill workers: TTFT is infinite (a pool at zero serves nothing)', () => {
    const m = new FleetModel(perf, 131072, 'disagg');
    expect(m.tick({ dt: 1, requests: 5, isl: 3000, osl: 300 }, 0, 1).ttftMs).toBe(Infinity);
  });
});

describe('traces', () => {
  it('Mooncake lines bin into ticks from the first timestamp', () => {
    const text = [
      { timestamp: 1000, input_length: 100, output_length: 10 },
      { timestamp: 1500, input_length: 300, output_length: 30 },
      { timestamp: 3200, input_length: 200, output_length: 20, hash_ids: [1, 2] },
    ]
      .map((x) => JSON.stringify(x))
      .join('\n');
    const b = binTrace(parseMooncakeTrace(text), 1);
    // ticks from t0 = 1000 ms: [0, 1) has 2 requests (ISL 400, OSL 40), [2, 3) has 1
    expect([...b.count]).toEqual([2, 0, 1]);
    expect([...b.islSum]).toEqual([400, 0, 200]);
    expect(summarizeTrace(b, 1)).toMatchObject({ requests: 3, durationS: 3, meanRps: 1, peakRps: 2, meanIsl: 200, meanOsl: 20 });
  });

  it('a bad line is a ConfigError naming the line', () => {
    expect(() => parseMooncakeTrace('{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1, "input_length": 0, "output_length": 1}', 't.jsonl')).toThrow(ConfigError);
    expect(() => parseMooncakeTrace('x', 't.jsonl')).toThrow(/t\.jsonl:1: not JSON/);
  });

  it('the one Mooncake parser (the load generator replays with it too): hash ids kept, sorted by time', () => {
    const text = '{"timestamp": 900, "input_length": 1024, "output_length": 8, "hash_ids": [7, 8]}\n{"timestamp": 100, "input_length": 10, "output_length": 2}\n';
    expect(parseMooncakeTrace(text)).toEqual([
      { timestamp: 100, input_length: 10, output_length: 2, hash_ids: [] },
      { timestamp: 900, input_length: 1024, output_length: 8, hash_ids: [7, 8] },
    ]);
    expect(() => parseMooncakeTrace('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1.5]}', 't.jsonl')).toThrow(/t\.jsonl:1: hash_ids must be an array of integers/);
    expect(() => parseMooncakeTrace('\n\n', 't.jsonl')).toThrow(/t\.jsonl: no requests/);
  });

  it('synthetic diurnal: the trough is 1/8 of the peak, and a seed reproduces the trace', () => {
    const a = syntheticTrace({ shape: 'diurnal', hours: 24, peakRps: 80, tickS: 60, seed: 3 });
    const b = syntheticTrace({ shape: 'diurnal', hours: 24, peakRps: 80, tickS: 60, seed: 3 });
    expect([...a.count]).toEqual([...b.count]);
    const rate = (i: number) => a.count[i]! / 60;
    expect(rate(0)).toBeCloseTo(10, -1); // 80 / 8
    expect(rate(720)).toBeCloseTo(80, -1); // noon
  });
});

function disagg(): PlannerConfig {
  const c = defaultPlannerConfig();
  c.pools = { prefill: { min: 1, max: 500, gpusPerWorker: 1, allowZero: false }, decode: { min: 1, max: 500, gpusPerWorker: 1, allowZero: false } };
  return c;
}

describe('planner vs static provisioning on a diurnal + bursty day (50 req/s peak)', () => {
  const trace = syntheticTrace({ shape: 'diurnal-bursty', hours: 24, peakRps: 50, seed: 11 });
  const started = performance.now();
  const c = compareProvisioning(perf, trace, disagg(), 120);
  const wallMs = performance.now() - started;
  const [planner, peak, average] = c.runs;
  console.log(formatComparison(c) + `wall ${wallMs.toFixed(0)} ms`);

  it('static peak meets the SLA and static average does not', () => {
    expect(peak!.attainment).toBeGreaterThan(0.99);
    expect(average!.attainment).toBeLessThan(0.5);
  });

  // The aim: ≥ 95% attainment at ≤ 60% of the peak run's worker-hours. (Before surge
  // headroom this asserted > 85% at < 50%: the planner then met 91.0% at 39.1% here, missing the
  // starts of bursts; it now buys them back with headroom, 97.4% at 52.5% on this seed.)
  it('the planner meets the SLA for ≥ 95% of requests at ≤ 60% of the peak run\'s worker-hours', () => {
    expect(planner!.attainment).toBeGreaterThan(0.95);
    expect(planner!.attainment).toBeGreaterThan(average!.attainment + 0.3);
    expect(planner!.workerHours).toBeLessThan(0.6 * peak!.workerHours);
    expect(planner!.actions).toBeGreaterThan(0);
  });

  it('a day replays in well under a minute (fluid model: cost grows with ticks, not requests)', () => {
    expect(wallMs).toBeLessThan(30_000);
  });

  it('load mode also follows the day (it reacts to queue and KV only)', () => {
    const cfg = { ...disagg(), mode: 'load' as const };
    const r = simulate({ label: 'load', perf, trace, config: cfg, policy: { kind: 'planner' }, startupS: 120 });
    expect(r.actions).toBeGreaterThan(10);
    expect(r.peakWorkers).toBeGreaterThan(r.timeline[0]!.replicas.decode! + r.timeline[0]!.replicas.prefill!);
  });

  it('agg topology: one pool, sized by the agg rule', () => {
    const cfg = defaultPlannerConfig();
    cfg.pools = { agg: { min: 1, max: 500, gpusPerWorker: 1, allowZero: false } };
    const r = compareProvisioning(perf, trace, cfg, 120).runs;
    expect(r[1]!.attainment).toBeGreaterThan(0.99);
    expect(r[0]!.workerHours).toBeLessThan(0.6 * r[1]!.workerHours);
    expect(Object.keys(r[0]!.timeline[0]!.replicas)).toEqual(['agg']);
  });
});
