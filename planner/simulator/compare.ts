/**
 * The comparison the planner is judged by: the planner vs static provisioning for the trace's
 * peak (highest `intervalS` window) and for its average rate, each static size from the same
 * SLA rules. Also the table it prints.
 */
import type { PerfModel } from '../../perf-model/index.js';
import type { PlannerConfig } from '../policy/config.js';
import { simulate, slaSizing, type SimReport } from './simulate.js';
import { summarizeTrace, type TraceBins, type TraceSummary } from './trace.js';

export interface Comparison {
  trace: TraceSummary;
  runs: SimReport[];
  wallMs: number;
}

export const plannerLabel = (c: PlannerConfig) => `planner (${c.mode}, ${c.predictor})`;

export function compareProvisioning(perf: PerfModel, trace: TraceBins, config: PlannerConfig, startupS: number, now: () => number = () => 0, keepDecisions = false): Comparison {
  const t0 = now();
  const summary = summarizeTrace(trace, config.intervalS);
  const peak = slaSizing(perf, config, summary.peakRps, summary.meanIsl, summary.meanOsl);
  const average = slaSizing(perf, config, summary.meanRps, summary.meanIsl, summary.meanOsl);
  const runs = [
    simulate({ label: plannerLabel(config), perf, trace, config, policy: { kind: 'planner' }, startupS, keepDecisions }),
    simulate({ label: 'static peak', perf, trace, config, policy: { kind: 'static', replicas: peak }, startupS }),
    simulate({ label: 'static average', perf, trace, config, policy: { kind: 'static', replicas: average }, startupS }),
  ];
  return { trace: summary, runs, wallMs: now() - t0 };
}

export function formatComparison(c: Comparison): string {
  const peak = c.runs.find((r) => r.label === 'static peak')?.workerHours ?? NaN;
  const head = `${'run'.padEnd(28)} ${'attain'.padStart(7)} ${'TTFT ok'.padStart(8)} ${'ITL ok'.padStart(7)} ${'worker-h'.padStart(10)} ${'vs peak'.padStart(8)} ${'mean'.padStart(7)} ${'max'.padStart(6)} ${'actions'.padStart(8)}`;
  const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
  const rows = c.runs.map(
    (r) =>
      `${r.label.padEnd(28)} ${pct(r.attainment).padStart(7)} ${pct(r.ttftAttainment).padStart(8)} ${pct(r.itlAttainment).padStart(7)} ${r.workerHours.toFixed(0).padStart(10)} ${pct(r.workerHours / peak).padStart(8)} ${r.meanWorkers.toFixed(0).padStart(7)} ${String(r.peakWorkers).padStart(6)} ${String(r.actions).padStart(8)}`,
  );
  const t = c.trace;
  const info = `trace: ${Math.round(t.requests).toLocaleString('en-US')} requests over ${(t.durationS / 3600).toFixed(1)} h, mean ${t.meanRps.toFixed(1)} req/s, peak ${t.peakRps.toFixed(1)} req/s, ISL ${Math.round(t.meanIsl)}, OSL ${Math.round(t.meanOsl)}`;
  return [info, head, ...rows].join('\n') + '\n';
}
