/**
 * The self-contained HTML report: headline numbers, latency and token tables, latency
 * CDFs (TTFT, ITL, E2E), throughput and in-flight requests over time, and the run's
 * configuration. Inline CSS and SVG only: no scripts, no fonts, no network.
 */
import { fmt } from './console-table.js';
import type { BenchReport } from './report.js';
import { isNotApplicable, type Stats } from './stats.js';
import { escapeXml as esc, lineChart } from './svg-chart.js';

function statsRow(name: string, s: Stats): string {
  if (isNotApplicable(s)) return `<tr><th>${esc(name)}</th>${'<td>n/a</td>'.repeat(6)}</tr>`;
  const cells = [s.count, s.mean, s.p50, s.p90, s.p99, s.max].map((v, i) => `<td>${i === 0 ? String(v) : fmt(v)}</td>`);
  return `<tr><th>${esc(name)}</th>${cells.join('')}</tr>`;
}

function card(label: string, value: string, sub = ''): string {
  return `<div class="card"><div class="v">${esc(value)}</div><div class="l">${esc(label)}</div>${sub ? `<div class="s">${esc(sub)}</div>` : ''}</div>`;
}

function cdfChart(title: string, values: readonly number[], quantiles: readonly number[]): string {
  return lineChart({ title, xLabel: 'milliseconds', yLabel: 'fraction of samples', yRange: [0, 1], series: [{ name: title, x: values, y: values.length ? quantiles : [], step: true }] });
}

export function renderHtmlReport(report: BenchReport): string {
  const s = report.summary;
  const c = report.config;
  const lat = s.latency_ms;
  const t = report.timeline;
  const cards = [
    card('TTFT p50 / p90', isNotApplicable(lat.ttft) ? 'n/a' : `${fmt(lat.ttft.p50)} / ${fmt(lat.ttft.p90)} ms`),
    card('ITL p50 / p99', isNotApplicable(lat.itl) ? 'n/a' : `${fmt(lat.itl.p50)} / ${fmt(lat.itl.p99)} ms`),
    c.endpoint === 'embeddings' ? card('sequences/s', fmt(s.throughput.sequences_per_s, 1), `batch ${c.batch_size ?? '?'}`) : card('output tokens/s', fmt(s.throughput.output_tokens_per_s, 1)),
    card('requests/s', fmt(s.throughput.requests_per_s), `${s.requests.completed} ok, ${s.requests.failed} failed`),
    card('cached-token ratio', s.tokens.cached_ratio === null ? 'n/a' : `${fmt(s.tokens.cached_ratio * 100, 1)}%`),
  ];
  if (s.goodput) cards.push(card('goodput', `${fmt(s.goodput.requests_per_s)} req/s`, `${fmt(s.goodput.fraction * 100, 1)}% within SLO`));

  const errors = Object.entries(s.errors.by_kind);
  const errorTable = errors.length
    ? `<h2>Errors</h2><table><tr><th>kind</th><th>count</th><th>example</th></tr>${errors
        .map(([k, n]) => `<tr><th>${esc(k)}</th><td>${n}</td><td class="msg">${esc(s.errors.examples[k] ?? '')}</td></tr>`)
        .join('')}</table>`
    : '';

  const charts = [
    cdfChart('TTFT CDF', report.cdf.ttft_ms, report.cdf.quantiles),
    cdfChart('ITL CDF', report.cdf.itl_ms, report.cdf.quantiles),
    cdfChart('End-to-end latency CDF', report.cdf.e2e_ms, report.cdf.quantiles),
    lineChart({ title: 'Output throughput', xLabel: 'seconds', yLabel: 'tokens / s', series: [{ name: 'output tok/s', x: t.start_s, y: t.output_tokens_per_s }] }),
    lineChart({ title: 'Requests in flight', xLabel: 'seconds', yLabel: 'requests (time-weighted mean)', series: [{ name: 'in flight', x: t.start_s, y: t.in_flight }] }),
    lineChart({ title: 'Completed requests', xLabel: 'seconds', yLabel: 'requests / s', series: [{ name: 'completed/s', x: t.start_s, y: t.completed_requests_per_s }] }),
  ];

  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tandem bench · ${esc(report.label)}</title>
<style>
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#111827;max-width:1240px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 8px}.sub{color:#6b7280}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:16px 0}.card{border:1px solid #e5e7eb;border-radius:8px;padding:10px 14px;min-width:150px}
.card .v{font-size:20px;font-weight:600}.card .l{color:#6b7280}.card .s{color:#9ca3af;font-size:12px}
table{border-collapse:collapse}td,th{padding:3px 10px;border-bottom:1px solid #f3f4f6;text-align:right}th:first-child{text-align:left}
td.msg{text-align:left;max-width:700px;overflow-wrap:anywhere}.charts{display:flex;flex-wrap:wrap;gap:16px}
pre{background:#f9fafb;padding:10px;border-radius:6px;overflow:auto}
</style></head><body>
<h1>tandem bench · ${esc(report.label)}</h1>
<div class="sub">${esc(String((c.workload as { name?: string }).name ?? ''))} · ${esc(c.model)} @ ${esc(c.url)} · load ${esc(c.load.mode)}${c.load.rate !== null ? ` ${c.load.rate} req/s` : ''}${c.load.concurrency !== null ? ` concurrency ${c.load.concurrency}` : ''} · ${esc(report.created_at)} · ${fmt(s.duration_s)} s</div>
<div class="cards">${cards.join('')}</div>
<h2>Latency (ms)</h2>
<table><tr><th></th><th>n</th><th>mean</th><th>p50</th><th>p90</th><th>p99</th><th>max</th></tr>
${statsRow('TTFT', lat.ttft)}${statsRow('ITL', lat.itl)}${statsRow('TPOT', lat.tpot)}${statsRow('E2E', lat.e2e)}${lat.schedule_lag.count ? statsRow('schedule lag', lat.schedule_lag) : ''}</table>
<h2>Tokens</h2>
<table><tr><th></th><th>n</th><th>mean</th><th>p50</th><th>p90</th><th>p99</th><th>max</th></tr>
${statsRow('ISL', s.tokens.isl)}${statsRow('OSL', s.tokens.osl)}</table>
<p>input ${s.tokens.input_total} tokens, output ${s.tokens.output_total}, cached ${s.tokens.cached_total}; ${fmt(s.tokens.tokens_per_chunk)} tokens per stream chunk; in flight mean ${fmt(s.concurrency.mean_in_flight)}, max ${s.concurrency.max_in_flight}.</p>
${errorTable}
<h2>Plots</h2>
<div class="charts">${charts.join('\n')}</div>
<h2>Configuration</h2>
<pre>${esc(JSON.stringify(c, null, 2))}</pre>
</body></html>
`;
}
