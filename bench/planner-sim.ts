/**
 * Issue 13: the fleet simulator's comparison at scale. A 24-hour diurnal + bursty trace (8×
 * trough to peak, ~1 burst an hour of 1.5–2× for 2–10 min), sized so static peak provisioning
 * needs ~1,000 workers, replayed through the fluid fleet model (planner/simulator): the SLA
 * planner (each predictor, and load mode) vs static peak vs static average, with the planner's
 * total budget at 1,000 workers. Disaggregated pools, Dynamo's polynomial perf model, TTFT
 * 500 ms, ITL 30 ms, workers ready 120 s after a scale-up.
 *
 *   node --import tsx bench/planner-sim.ts [--quick]
 *
 * Prints a table and writes bench/results/planner-sim.json (wall time included).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PolynomialPerfModel } from '../perf-model/index.js';
import { defaultPlannerConfig, formatComparison, PREDICTOR_NAMES, simulate, slaSizing, summarizeTrace, syntheticTrace, type PlannerConfig, type SimReport } from '../planner/index.js';

const QUICK = process.argv.includes('--quick');
const HOURS = QUICK ? 6 : 24;
const FLEET = 1000;
const STARTUP_S = 120;
const perf = new PolynomialPerfModel();

const config: PlannerConfig = defaultPlannerConfig();
config.pools = { prefill: { min: 1, max: FLEET, gpusPerWorker: 1, allowZero: false }, decode: { min: 1, max: FLEET, gpusPerWorker: 1, allowZero: false } };
config.maxWorkers = FLEET;

const total = (s: Partial<Record<string, number>>): number => Object.values(s).reduce<number>((a, b) => a + (b ?? 0), 0);

// Calibrate the diurnal peak so that static peak (sized for the busiest minute) is ~FLEET workers.
const traceStart = performance.now();
const probe = summarizeTrace(syntheticTrace({ shape: 'diurnal-bursty', hours: 24, peakRps: 1000, seed: 1 }), config.intervalS);
const perRps = total(slaSizing(perf, config, 1000, probe.meanIsl, probe.meanOsl)) / 1000;
const peakRps = Math.floor((FLEET / perRps / probe.peakRps) * 1000);
const trace = syntheticTrace({ shape: 'diurnal-bursty', hours: HOURS, peakRps, seed: 1 });
const summary = summarizeTrace(trace, config.intervalS);
const traceMs = performance.now() - traceStart;

const peakSize = slaSizing(perf, config, summary.peakRps, summary.meanIsl, summary.meanOsl);
const averageSize = slaSizing(perf, config, summary.meanRps, summary.meanIsl, summary.meanOsl);

const runs: { report: SimReport; wallMs: number }[] = [];
function run(label: string, c: PlannerConfig, policy: Parameters<typeof simulate>[0]['policy']) {
  const t0 = performance.now();
  const report = simulate({ label, perf, trace, config: c, policy, startupS: STARTUP_S });
  runs.push({ report, wallMs: performance.now() - t0 });
}
for (const predictor of ['kalman', ...PREDICTOR_NAMES.filter((p) => p !== 'kalman')] as const) run(`planner (sla, ${predictor})`, { ...config, predictor }, { kind: 'planner' });
run('planner (load, throughput)', { ...config, mode: 'load' }, { kind: 'planner' });
run('static peak', config, { kind: 'static', replicas: peakSize });
run('static average', config, { kind: 'static', replicas: averageSize });

const headline = runs[0]!;
process.stdout.write(formatComparison({ trace: summary, runs: runs.map((r) => r.report), wallMs: 0 }));
process.stdout.write(`static peak ${JSON.stringify(peakSize)}, static average ${JSON.stringify(averageSize)}; diurnal peak ${peakRps} req/s\n`);
process.stdout.write(`wall: ${runs.map((r) => `${r.report.label} ${(r.wallMs / 1000).toFixed(2)} s`).join(', ')}; trace generation ${(traceMs / 1000).toFixed(2)} s\n`);

const downsample = (r: SimReport) => r.timeline.filter((_, i) => i % 10 === 0).map((p) => ({ tS: p.tS, rps: Math.round(p.rps * 10) / 10, replicas: p.replicas, ttftMs: Math.round(p.ttftMs), itlMs: Math.round(p.itlMs * 10) / 10 }));
const out = {
  bench: 'planner-sim',
  date: new Date().toISOString(),
  machine: { cpus: os.cpus().length, model: os.cpus()[0]?.model, loadavg1: os.loadavg()[0] },
  quick: QUICK,
  setup: { hours: HOURS, fleet: FLEET, startupS: STARTUP_S, diurnalPeakRps: peakRps, perfModel: 'polynomial (Dynamo fit)', targets: { ttftMs: config.sla.ttftMs, itlMs: config.sla.itlMs }, intervalS: config.intervalS, staticPeak: peakSize, staticAverage: averageSize },
  trace: summary,
  headline: { label: headline.report.label, attainment: headline.report.attainment, workerHoursVsPeak: headline.report.workerHours / runs.find((r) => r.report.label === 'static peak')!.report.workerHours, wallS: headline.wallMs / 1000 },
  runs: runs.map(({ report: { timeline: _t, decisions: _d, ...r }, wallMs }) => ({ ...r, wallS: wallMs / 1000 })),
  headlineTimeline: downsample(headline.report),
};
const file = path.join(path.dirname(new URL(import.meta.url).pathname), 'results', 'planner-sim.json');
mkdirSync(path.dirname(file), { recursive: true });
writeFileSync(file, JSON.stringify(out, null, 1) + '\n');
process.stdout.write(`wrote ${path.relative(process.cwd(), file)}\n`);
