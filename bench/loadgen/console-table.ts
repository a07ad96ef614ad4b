/**
 * The console summary printed when a run ends, and the text-table helper `compare` shares.
 */
import type { BenchReport } from './report.js';
import { isNotApplicable, type Stats } from './stats.js';

/** Left-aligned first column, right-aligned numbers, two-space gaps. */
export function formatTable(rows: readonly (readonly string[])[]): string {
  const widths: number[] = [];
  for (const row of rows) row.forEach((cell, i) => (widths[i] = Math.max(widths[i] ?? 0, cell.length)));
  return rows
    .map((row) => row.map((cell, i) => (i === 0 ? cell.padEnd(widths[i] as number) : cell.padStart(widths[i] as number))).join('  ').trimEnd())
    .join('\n');
}

export function fmt(v: number | null | undefined, digits = 2): string {
  if (v === null || v === undefined || !Number.isFinite(v)) return '-';
  if (Math.abs(v) >= 1000) return v.toFixed(0);
  if (Math.abs(v) >= 100) return v.toFixed(1);
  return v.toFixed(digits);
}

/** A metric the endpoint does not have (TTFT of embeddings) reads n/a, not zeros. */
const statsRow = (name: string, s: Stats, digits = 2) =>
  isNotApplicable(s) ? [name, 'n/a', 'n/a', 'n/a', 'n/a', 'n/a', 'n/a'] : [name, String(s.count), fmt(s.mean, digits), fmt(s.p50, digits), fmt(s.p90, digits), fmt(s.p99, digits), fmt(s.max, digits)];

export function renderConsoleReport(report: BenchReport): string {
  const s = report.summary;
  const c = report.config;
  const lines: string[] = [];
  const w = c.workload as { name?: string };
  lines.push(`tandem bench · ${report.label} · ${w.name ?? '?'} · ${c.model} @ ${c.url}`);
  lines.push(
    `load ${c.load.mode}` +
      (c.load.rate !== null ? ` rate=${c.load.rate}/s` : '') +
      (c.load.concurrency !== null ? ` concurrency=${c.load.concurrency}` : '') +
      ` · ${c.endpoint}/${c.prompt_format}${c.exact_prompts ? '' : ' (approximate prompt lengths: no --tokenizer)'}`,
  );
  lines.push('');
  const overview: string[][] = [
    ['requests', `${s.requests.completed} ok / ${s.requests.failed} failed (+${s.requests.warmup} warm-up) in ${fmt(s.duration_s)} s`],
    [
      'throughput',
      c.endpoint === 'embeddings'
        ? `${fmt(s.throughput.requests_per_s)} req/s · ${fmt(s.throughput.sequences_per_s, 1)} seq/s (batch ${c.batch_size ?? '?'}) · ${fmt(s.throughput.input_tokens_per_s, 1)} input tok/s`
        : `${fmt(s.throughput.requests_per_s)} req/s · ${fmt(s.throughput.output_tokens_per_s, 1)} output tok/s · ${fmt(s.throughput.total_tokens_per_s, 1)} total tok/s`,
    ],
  ];
  if (s.goodput) {
    const slo = Object.entries(s.goodput.slo).map(([k, v]) => `${k}<=${v}ms`).join(',');
    overview.push(['goodput', `${fmt(s.goodput.requests_per_s)} req/s (${fmt(s.goodput.fraction * 100, 1)}% of requests meet ${slo})`]);
  }
  const cached = s.tokens.cached_ratio === null ? 'not reported by server' : `${s.tokens.cached_total} of ${s.tokens.input_total} prompt tokens (${fmt(s.tokens.cached_ratio * 100, 1)}%)`;
  overview.push(['cached tokens', cached]);
  overview.push(['in flight', `mean ${fmt(s.concurrency.mean_in_flight)} · max ${s.concurrency.max_in_flight}`]);
  lines.push(formatTable(overview));
  lines.push('');
  const lat = s.latency_ms;
  const latencyRows: string[][] = [['latency (ms)', 'n', 'mean', 'p50', 'p90', 'p99', 'max'], statsRow('TTFT', lat.ttft), statsRow('ITL', lat.itl), statsRow('TPOT', lat.tpot), statsRow('E2E', lat.e2e)];
  if (lat.schedule_lag.count > 0) latencyRows.push(statsRow('schedule lag', lat.schedule_lag));
  latencyRows.push([''], ['tokens', 'n', 'mean', 'p50', 'p90', 'p99', 'max'], statsRow('ISL', s.tokens.isl, 1), statsRow('OSL', s.tokens.osl, 1));
  lines.push(formatTable(latencyRows));
  if (s.tokens.isl_mismatches > 0 || s.tokens.osl_short > 0) {
    lines.push(`note: ${s.tokens.isl_mismatches} requests had a server prompt count different from the built prompt; ${s.tokens.osl_short} returned fewer tokens than asked`);
  }
  if (s.errors.total > 0) {
    lines.push('');
    lines.push(formatTable([['errors', 'count', 'example'], ...Object.entries(s.errors.by_kind).map(([k, n]) => [k, String(n), (s.errors.examples[k] ?? '').slice(0, 100)])]));
  }
  return lines.join('\n') + '\n';
}
