/**
 * The headline row every fleet bench prints and saves: the numbers issue 4 asks for (TTFT
 * p50/p90, ITL p50/p99, output tok/s, cached-token ratio) plus what is needed to trust them
 * (requests, errors, offered load, machine load). One definition, so the baseline and the
 * KV-router rerun print rows that line up.
 */
import type { BenchReport } from '../loadgen/index.js';

export interface Headline {
  phase: string;
  /** What was offered: `rate 12.5/s`, `conc 64`, `trace x1`. */
  load: string;
  requests: number;
  errors: number;
  requests_per_s: number;
  output_tokens_per_s: number;
  ttft_p50_ms: number;
  ttft_p90_ms: number;
  itl_p50_ms: number;
  itl_p99_ms: number;
  cached_ratio: number | null;
  /** 1-minute load average at the end of the phase. */
  loadavg_1m: number;
}

export function headlineOf(phase: string, load: string, report: BenchReport, loadavg: string): Headline {
  const s = report.summary;
  return {
    phase,
    load,
    requests: s.requests.measured,
    errors: s.errors.total,
    requests_per_s: s.throughput.requests_per_s,
    output_tokens_per_s: s.throughput.output_tokens_per_s,
    ttft_p50_ms: s.latency_ms.ttft.p50,
    ttft_p90_ms: s.latency_ms.ttft.p90,
    itl_p50_ms: s.latency_ms.itl.p50,
    itl_p99_ms: s.latency_ms.itl.p99,
    cached_ratio: s.tokens.cached_ratio,
    loadavg_1m: Number(loadavg.split(/\s+/)[0]),
  };
}

const COLUMNS: Array<[string, (h: Headline) => string]> = [
  ['phase', (h) => h.phase],
  ['load', (h) => h.load],
  ['req', (h) => String(h.requests)],
  ['err', (h) => String(h.errors)],
  ['req/s', (h) => h.requests_per_s.toFixed(2)],
  ['out tok/s', (h) => h.output_tokens_per_s.toFixed(0)],
  ['TTFT p50 ms', (h) => h.ttft_p50_ms.toFixed(1)],
  ['TTFT p90 ms', (h) => h.ttft_p90_ms.toFixed(1)],
  ['ITL p50 ms', (h) => h.itl_p50_ms.toFixed(2)],
  ['ITL p99 ms', (h) => h.itl_p99_ms.toFixed(2)],
  ['cached', (h) => (h.cached_ratio === null ? 'n/a' : h.cached_ratio.toFixed(3))],
  ['load 1m', (h) => h.loadavg_1m.toFixed(2)],
];

/** A Markdown table: readable on a console and pasteable into docs/benchmarks.md. */
export function renderHeadlines(rows: readonly Headline[]): string {
  const cells = [COLUMNS.map(([name]) => name), ...rows.map((h) => COLUMNS.map(([, get]) => get(h)))];
  const widths = COLUMNS.map((_, i) => Math.max(...cells.map((r) => r[i]!.length)));
  const line = (r: string[]) => `| ${r.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`;
  return [line(cells[0]!), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...cells.slice(1).map(line)].join('\n') + '\n';
}
