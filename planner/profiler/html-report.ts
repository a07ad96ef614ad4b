/**
 * `runtime profile --html`: one self-contained page (inline SVG and CSS, no scripts, no CDN) with
 * the four curves of a profile: TTFT and prefill tokens/s against ISL, ITL and decode tokens/s
 * against concurrency, one line per context length. Pure: report in, HTML text out.
 */
import type { ProfileReport } from './profile-build.js';

export interface Series {
  name: string;
  points: Array<[number, number]>;
}

export interface ChartSpec {
  title: string;
  xLabel: string;
  yLabel: string;
  series: Series[];
}

const W = 520;
const H = 300;
const M = { left: 64, right: 16, top: 28, bottom: 44 };
const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#17becf', '#8c564b', '#e377c2'];

export function renderProfileHtml(report: ProfileReport): string {
  const w = report.worker;
  const byContext = new Map<number, typeof report.measured.decode>();
  for (const d of report.measured.decode) byContext.set(d.contextLength, [...(byContext.get(d.contextLength) ?? []), d]);
  const contexts = [...byContext.keys()].sort((a, b) => a - b);
  const decodeSeries = (y: (d: (typeof report.measured.decode)[number]) => number): Series[] =>
    contexts.map((ctx) => ({ name: `context ${ctx}`, points: byContext.get(ctx)!.map((d) => [d.concurrency, y(d)] as [number, number]).sort((a, b) => a[0] - b[0]) }));
  const pre = report.measured.prefill;
  const charts: ChartSpec[] = [
    { title: 'TTFT vs ISL', xLabel: 'ISL (tokens)', yLabel: 'TTFT (ms)', series: [{ name: 'TTFT', points: pre.map((p) => [p.isl, p.ttftMs]) }] },
    { title: 'Prefill throughput vs ISL', xLabel: 'ISL (tokens)', yLabel: 'tokens/s', series: [{ name: 'prefill tok/s', points: pre.map((p) => [p.isl, p.tokensPerS]) }] },
    { title: 'ITL vs concurrency', xLabel: 'concurrent streams', yLabel: 'ITL (ms)', series: decodeSeries((d) => d.itlMs) },
    { title: 'Decode throughput vs concurrency', xLabel: 'concurrent streams', yLabel: 'output tokens/s', series: decodeSeries((d) => d.tokensPerS) },
  ];
  const rows = report.measured.decode
    .map((d) => `<tr><td>${d.contextLength}</td><td>${d.concurrency}</td><td>${fmt(d.kvUsage)}</td><td>${fmt(d.itlMs)}</td><td>${fmt(d.tokensPerS)}</td></tr>`)
    .join('');
  const preRows = pre.map((p) => `<tr><td>${p.isl}</td><td>${fmt(p.ttftMs)}</td><td>${fmt(p.tokensPerS)}</td></tr>`).join('');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Tandem profile: ${esc(w.model)} (${esc(w.engine)})</title>
<style>
body{font:14px system-ui,sans-serif;margin:24px;color:#222}
.charts{display:flex;flex-wrap:wrap;gap:16px}
svg{background:#fff;border:1px solid #ddd}
svg text{font:11px system-ui,sans-serif;fill:#333}
svg .title{font-size:13px;font-weight:600}
table{border-collapse:collapse;margin:8px 0 16px}
td,th{border:1px solid #ddd;padding:2px 8px;text-align:right}
</style></head><body>
<h1>Profile: ${esc(w.model)} (${esc(w.engine)})</h1>
<p>Context length ${w.contextLength}; KV ${w.totalKvBlocks} blocks × ${w.kvBlockSize} tokens = ${w.kvCapacityTokens} tokens; max batched tokens ${w.maxNumBatchedTokens}.
Measured ${esc(report.tool.createdAt)} in ${fmt(report.tool.wallS)} s. Profile schema version ${report.version}.</p>
<div class="charts">${charts.map(renderChart).join('\n')}</div>
<h2>Prefill</h2><table><tr><th>ISL</th><th>TTFT ms</th><th>tok/s</th></tr>${preRows}</table>
<h2>Decode</h2><table><tr><th>context</th><th>concurrency</th><th>KV usage</th><th>ITL ms</th><th>tok/s</th></tr>${rows}</table>
</body></html>
`;
}

/** One line chart as an inline SVG; x is log-scaled when it spans more than 16×. */
export function renderChart(spec: ChartSpec): string {
  const pts = spec.series.flatMap((s) => s.points).filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y));
  const xs = pts.map((p) => p[0]);
  const ys = pts.map((p) => p[1]);
  const xMin = xs.length ? Math.min(...xs) : 0;
  const xMax = xs.length ? Math.max(...xs) : 1;
  const log = xMin > 0 && xMax / xMin > 16;
  const fx = (x: number) => (log ? Math.log2(x) : x);
  const [a, b] = xMin === xMax ? [fx(xMin) - 1, fx(xMax) + 1] : [fx(xMin), fx(xMax)];
  const yStep = niceStep((ys.length ? Math.max(...ys) : 1) / 4 || 0.25);
  const yMax = Math.max(yStep, Math.ceil((ys.length ? Math.max(...ys) * 1.05 : 1) / yStep) * yStep);
  const pw = W - M.left - M.right;
  const ph = H - M.top - M.bottom;
  const px = (x: number) => M.left + ((fx(x) - a) / (b - a)) * pw;
  const py = (y: number) => M.top + ph - (y / yMax) * ph;
  const parts: string[] = [];
  parts.push(`<text class="title" x="${W / 2}" y="18" text-anchor="middle">${esc(spec.title)}</text>`);
  parts.push(`<line x1="${M.left}" y1="${M.top + ph}" x2="${M.left + pw}" y2="${M.top + ph}" stroke="#444"/>`);
  parts.push(`<line x1="${M.left}" y1="${M.top}" x2="${M.left}" y2="${M.top + ph}" stroke="#444"/>`);
  for (let y = 0; y <= yMax + yStep / 2; y += yStep) {
    parts.push(`<line x1="${M.left}" y1="${r(py(y))}" x2="${M.left + pw}" y2="${r(py(y))}" stroke="#eee"/>`);
    parts.push(`<text x="${M.left - 6}" y="${r(py(y) + 4)}" text-anchor="end">${fmt(y)}</text>`);
  }
  let lastLabelPx = -Infinity;
  for (const x of [...new Set(xs)].sort((p, q) => p - q)) {
    if (px(x) - lastLabelPx < 28) continue; // crowded: the point's tooltip still names it
    lastLabelPx = px(x);
    parts.push(`<text x="${r(px(x))}" y="${M.top + ph + 16}" text-anchor="middle">${fmt(x)}</text>`);
  }
  parts.push(`<text x="${M.left + pw / 2}" y="${H - 8}" text-anchor="middle">${esc(spec.xLabel)}${log ? ' (log scale)' : ''}</text>`);
  parts.push(`<text transform="translate(14 ${M.top + ph / 2}) rotate(-90)" text-anchor="middle">${esc(spec.yLabel)}</text>`);
  spec.series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length]!;
    const line = s.points.map(([x, y]) => `${r(px(x))},${r(py(y))}`).join(' ');
    parts.push(`<polyline class="series" data-name="${esc(s.name)}" fill="none" stroke="${color}" stroke-width="2" points="${line}"/>`);
    for (const [x, y] of s.points) parts.push(`<circle cx="${r(px(x))}" cy="${r(py(y))}" r="3" fill="${color}"><title>${esc(s.name)}: ${fmt(x)}, ${fmt(y)}</title></circle>`);
    if (spec.series.length > 1) parts.push(`<text x="${M.left + 8}" y="${M.top + 12 + i * 14}" fill="${color}" style="fill:${color}">${esc(s.name)}</text>`);
  });
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" role="img" aria-label="${esc(spec.title)}">${parts.join('')}</svg>`;
}

/** 1, 2, 2.5 or 5 × a power of ten, at least `raw`. */
function niceStep(raw: number): number {
  const p = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

function r(x: number): string {
  return (Math.round(x * 10) / 10).toString();
}

function fmt(x: number): string {
  if (x === 0) return '0';
  const ax = Math.abs(x);
  if (ax >= 1000) return Math.round(x).toString();
  if (ax >= 10) return (Math.round(x * 10) / 10).toString();
  return (Math.round(x * 1000) / 1000).toString();
}

function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}
