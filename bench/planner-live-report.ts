/**
 * planner-live's day and its HTML report. The page is rendered from the results JSON alone
 * (bench/results/planner-live.json), so a saved run can be re-rendered:
 *   node --import tsx bench/planner-live-report.ts [results.json] [out.html]
 */
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Stats } from './loadgen/stats.js';
import { escapeXml as esc, lineChart } from './loadgen/svg-chart.js';

/** The replayed day's shape, in wall seconds. */
export interface DayShape {
  wallS: number;
  diurnalPeakRps: number;
  /** Trough = peak ÷ swing. */
  swing: number;
  /** Fractions of the day: start, length, rate factor. */
  bursts: ReadonlyArray<{ at: number; len: number; factor: number }>;
}

/** Offered rate (wall req/s) at wall second `s` of the replay: the diurnal curve × any burst. */
export function offeredRpsAt(day: DayShape, s: number): number {
  const trough = day.diurnalPeakRps / day.swing;
  const x = s / day.wallS;
  const diurnal = trough + ((day.diurnalPeakRps - trough) * (1 - Math.cos(2 * Math.PI * x))) / 2;
  const burst = day.bursts.reduce((f, b) => (x >= b.at && x < b.at + b.len ? Math.max(f, b.factor) : f), 1);
  return diurnal * burst;
}

export interface Decision {
  tS: number;
  action: string;
  current: number;
  target: number;
  rule: string;
  limitedBy: string[];
  reason: string;
}

type Step = { tS: number; n: number };

/** The parts of planner-live.json the page shows. */
export interface PlannerLiveResults {
  date: string;
  machine: { loadavg: string };
  quick: boolean;
  setup: DayShape & { dayS: number; speedup: number; isl: number; osl: number; targets: { ttftMs: number; itlMs: number }; intervalS: number; binS: number };
  trace: { requests: number };
  runs: Array<{ label: string; requests: number; failed: number; attainment: number; ttftOk: number; itlOk: number; workerSeconds: number; meanWorkers: number; maxWorkers: number; actions: number; ttftMs: Stats; itlMs: Stats; vsPeak: number | null }>;
  timelines: Array<{ label: string; workers: Step[]; ready: Step[]; windowS?: number; bins: Array<{ tS: number; attainment: number; ttftP50Ms: number; itlMeanMs: number }> }>;
  decisions: Record<string, Decision[]>;
}

const pct = (x: number): string => `${(100 * x).toFixed(1)}%`;

export function renderPlannerLiveHtml(out: PlannerLiveResults): string {
  const { setup } = out;
  const end = setup.wallS;
  const stepX = (s: Step[]) => [...s.map((p) => p.tS), end];
  const stepY = (s: Step[]) => [...s.map((p) => p.n), s[s.length - 1]?.n ?? 0];
  const offered = Array.from({ length: Math.ceil(setup.wallS) + 1 }, (_, s) => s);
  const lines = out.timelines;
  const charts = [
    lineChart({ title: 'Offered load', xLabel: 'seconds', yLabel: 'requests / s', series: [{ name: 'rate (trace intensity)', x: offered, y: offered.map((s) => offeredRpsAt(setup, s)) }] }),
    lineChart({ title: 'Live worker processes', xLabel: 'seconds', yLabel: 'workers', series: lines.map((r) => ({ name: r.label, x: stepX(r.workers), y: stepY(r.workers), step: true })) }),
    lineChart({ title: `SLA attainment per ${setup.binS} s of arrivals`, xLabel: 'seconds', yLabel: 'share of requests', yRange: [0, 1], series: lines.map((r) => ({ name: r.label, x: r.bins.map((b) => b.tS), y: r.bins.map((b) => b.attainment) })) }),
    lineChart({ title: 'Routable workers (frontend /health)', xLabel: 'seconds', yLabel: 'workers', series: lines.map((r) => ({ name: r.label, x: r.ready.map((p) => p.tS), y: r.ready.map((p) => p.n), step: true })) }),
    lineChart({ title: `Median TTFT per ${setup.binS} s (log10 ms)`, xLabel: 'seconds', yLabel: 'log10 ms', series: lines.map((r) => ({ name: r.label, x: r.bins.map((b) => b.tS), y: r.bins.map((b) => Math.log10(Math.max(1, b.ttftP50Ms))) })) }),
    lineChart({ title: `Mean ITL per ${setup.binS} s`, xLabel: 'seconds', yLabel: 'ms', series: lines.map((r) => ({ name: r.label, x: r.bins.map((b) => b.tS), y: r.bins.map((b) => b.itlMeanMs) })) }),
  ];
  const tableRows = out.runs
    .map((r) => `<tr><th>${esc(r.label)}</th><td>${pct(r.attainment)}</td><td>${pct(r.ttftOk)}</td><td>${pct(r.itlOk)}</td><td>${r.workerSeconds.toFixed(0)}</td><td>${r.vsPeak !== null ? pct(r.vsPeak) : '-'}</td><td>${r.meanWorkers.toFixed(1)}</td><td>${r.maxWorkers}</td><td>${r.actions}</td><td>${r.ttftMs.p50.toFixed(0)} / ${r.ttftMs.p99.toFixed(0)}</td><td>${r.itlMs.p50.toFixed(1)} / ${r.itlMs.p99.toFixed(1)}</td><td>${r.requests}</td><td>${r.failed}</td></tr>`)
    .join('');
  const decisionRows = Object.entries(out.decisions)
    .flatMap(([label, ds]) => ds.map((d) => `<tr><th>${esc(label)}</th><td>${d.tS.toFixed(1)}</td><td>${esc(d.action)}</td><td>${d.current} → ${d.target}</td><td>${esc(d.rule)}${d.limitedBy.length ? ` (${esc(d.limitedBy.join(', '))})` : ''}</td><td class="msg">${esc(d.reason)}</td></tr>`))
    .join('');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tandem bench · planner-live</title>
<style>
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#111827;max-width:1240px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 8px}.sub{color:#6b7280}
table{border-collapse:collapse}td,th{padding:3px 10px;border-bottom:1px solid #f3f4f6;text-align:right}th:first-child{text-align:left}
td.msg{text-align:left;max-width:760px;overflow-wrap:anywhere;font-size:12px}.charts{display:flex;flex-wrap:wrap;gap:16px}
pre{background:#f9fafb;padding:10px;border-radius:6px;overflow:auto}
</style></head><body>
<h1>tandem bench · planner-live</h1>
<div class="sub">${out.trace.requests} requests over ${setup.wallS} s (a ${setup.dayS / 60}-minute day replayed at ${setup.speedup}×) · ISL ${setup.isl}, OSL ${setup.osl} · targets TTFT ${setup.targets.ttftMs} ms, ITL ${setup.targets.itlMs} ms · planner interval ${setup.intervalS} s · ${esc(out.date)} · load ${esc(out.machine.loadavg)}${out.quick ? ' · quick' : ''}</div>
<h2>Runs</h2>
<table><tr><th>run</th><th>attain</th><th>TTFT ok</th><th>ITL ok</th><th>worker-s</th><th>vs peak</th><th>mean</th><th>max</th><th>actions</th><th>TTFT p50 / p99 ms</th><th>ITL p50 / p99 ms</th><th>requests</th><th>failed</th></tr>${tableRows}</table>
<h2>Over time</h2>
<div class="charts">${charts.join('\n')}</div>
<h2>Planner decisions (scale actions)</h2>
<table><tr><th>run</th><th>s</th><th>action</th><th>replicas</th><th>rule</th><th>reason</th></tr>${decisionRows}</table>
<h2>Setup</h2>
<pre>${esc(JSON.stringify(setup, null, 2))}</pre>
</body></html>
`;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const results = path.join(path.dirname(new URL(import.meta.url).pathname), 'results');
  const input = process.argv[2] ?? path.join(results, 'planner-live.json');
  const output = process.argv[3] ?? path.join(results, 'planner-live.html');
  const out = JSON.parse(readFileSync(input, 'utf8')) as PlannerLiveResults;
  // Runs saved before binS was recorded used the bench's rule.
  out.setup.binS ??= Math.max(2, Math.round(out.setup.wallS / 40));
  writeFileSync(output, renderPlannerLiveHtml(out));
  process.stdout.write(`wrote ${output}\n`);
}
