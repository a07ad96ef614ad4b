/**
 * `runtime bench compare A.json B.json`: headline metrics side by side with B/A ratios and
 * a verdict per row (for latency lower is better, for throughput higher is better).
 */
import { readFileSync } from 'node:fs';
import { ConfigError } from '../../runtime/errors.js';
import { fmt, formatTable } from './console-table.js';
import { REPORT_SCHEMA, REPORT_VERSION, type BenchReport } from './report.js';

export interface CompareRow {
  metric: string;
  a: number | null;
  b: number | null;
  /** b / a; null when either side is missing or a is 0. */
  ratio: number | null;
  better: 'higher' | 'lower';
}

export function readReport(file: string): BenchReport {
  let parsed: Partial<BenchReport>;
  try {
    parsed = JSON.parse(readFileSync(file, 'utf8')) as Partial<BenchReport>;
  } catch (err) {
    throw new ConfigError(`${file}: cannot read a bench report: ${(err as Error).message}`);
  }
  if (parsed.schema !== REPORT_SCHEMA) throw new ConfigError(`${file}: not a bench report (schema '${String(parsed.schema)}')`);
  if (parsed.version !== REPORT_VERSION) throw new ConfigError(`${file}: report version ${String(parsed.version)}; this tool reads version ${REPORT_VERSION}`);
  return parsed as BenchReport;
}

export function compareReports(a: BenchReport, b: BenchReport): CompareRow[] {
  const rows: CompareRow[] = [];
  const add = (metric: string, pick: (r: BenchReport) => number | null | undefined, better: 'higher' | 'lower') => {
    const va = pick(a) ?? null;
    const vb = pick(b) ?? null;
    rows.push({ metric, a: va, b: vb, ratio: va !== null && vb !== null && va !== 0 ? vb / va : null, better });
  };
  add('requests ok', (r) => r.summary.requests.completed, 'higher');
  add('requests failed', (r) => r.summary.requests.failed, 'lower');
  add('request throughput (req/s)', (r) => r.summary.throughput.requests_per_s, 'higher');
  add('sequence throughput (seq/s)', (r) => r.summary.throughput.sequences_per_s, 'higher');
  add('output throughput (tok/s)', (r) => r.summary.throughput.output_tokens_per_s, 'higher');
  add('total throughput (tok/s)', (r) => r.summary.throughput.total_tokens_per_s, 'higher');
  add('goodput (req/s)', (r) => r.summary.goodput?.requests_per_s, 'higher');
  for (const [name, key] of [['TTFT', 'ttft'], ['ITL', 'itl'], ['TPOT', 'tpot'], ['E2E', 'e2e']] as const) {
    for (const q of ['mean', 'p50', 'p90', 'p99'] as const) add(`${name} ${q} (ms)`, (r) => r.summary.latency_ms[key][q], 'lower');
  }
  add('cached-token ratio', (r) => r.summary.tokens.cached_ratio, 'higher');
  add('mean ISL', (r) => r.summary.tokens.isl.mean, 'higher');
  add('mean OSL', (r) => r.summary.tokens.osl.mean, 'higher');
  return rows;
}

export function renderComparison(a: BenchReport, b: BenchReport, nameA = a.label, nameB = b.label): string {
  const rows = compareReports(a, b);
  const table: string[][] = [['metric', `A: ${nameA}`, `B: ${nameB}`, 'B/A', '']];
  for (const r of rows) {
    let verdict = '';
    if (r.ratio !== null && Math.abs(r.ratio - 1) >= 0.02 && r.metric !== 'mean ISL' && r.metric !== 'mean OSL') {
      verdict = (r.ratio > 1) === (r.better === 'higher') ? 'better' : 'worse';
    }
    table.push([r.metric, fmt(r.a), fmt(r.b), r.ratio === null ? '-' : `${r.ratio.toFixed(3)}x`, verdict]);
  }
  return formatTable(table) + '\n';
}
