/**
 * The JSON report: a stable, versioned schema (documented field by field in docs/bench.md).
 * Additive changes keep `version`; renaming or removing a field bumps it, and `compare`
 * refuses reports of a version it does not know.
 */
import { buildCdf, buildSummary, buildTimeline, type Cdf, type Summary, type Timeline } from './aggregate.js';
import type { ResolvedBenchOptions } from './options.js';
import { e2eMs, isl, meanItlMs, osl, sequences, tpotMs, ttftMs, type RequestRecord } from './record.js';
import type { TokenSpace } from './token-space.js';

export const REPORT_SCHEMA = 'tandem.bench.report';
export const REPORT_VERSION = 1;

export interface ReportConfig {
  url: string;
  model: string;
  endpoint: string;
  prompt_format: string;
  /** Embeddings: inputs per request; null for generation endpoints. */
  batch_size: number | null;
  tokenizer: string | null;
  /** True when prompts were built with the served tokenizer (lengths are exact). */
  exact_prompts: boolean;
  workload: Record<string, unknown>;
  load: { mode: string; rate: number | null; concurrency: number | null; requests: number | null; duration_s: number | null; warmup: number };
  seed: number;
  max_tokens: number | null;
  ignore_eos: boolean;
  temperature: number | null;
  timeout_s: number;
}

export interface RequestRow {
  index: number;
  session: number;
  turn: number;
  scheduled_ms: number | null;
  start_ms: number;
  ttft_ms: number | null;
  e2e_ms: number;
  tpot_ms: number | null;
  itl_mean_ms: number | null;
  isl: number;
  isl_requested: number;
  osl: number;
  osl_requested: number;
  cached_tokens: number | null;
  chunks: number;
  /** Inputs in the request (embeddings batch size; 1 for generation). */
  sequences: number;
  ok: boolean;
  error: string | null;
}

export interface BenchReport {
  schema: typeof REPORT_SCHEMA;
  version: typeof REPORT_VERSION;
  label: string;
  created_at: string;
  config: ReportConfig;
  summary: Summary;
  cdf: Cdf;
  timeline: Timeline;
  requests: RequestRow[];
}

const round3 = (v: number | null) => (v === null ? null : Math.round(v * 1000) / 1000);

export function requestRow(r: RequestRecord): RequestRow {
  return {
    index: r.index,
    session: r.session,
    turn: r.turn,
    scheduled_ms: round3(r.scheduledMs),
    start_ms: round3(r.startMs) as number,
    ttft_ms: round3(ttftMs(r)),
    e2e_ms: round3(e2eMs(r)) as number,
    tpot_ms: round3(tpotMs(r)),
    itl_mean_ms: round3(meanItlMs(r)),
    isl: isl(r),
    isl_requested: r.islRequested,
    osl: osl(r),
    osl_requested: r.oslRequested,
    cached_tokens: r.cachedTokens,
    chunks: r.chunkTimesMs.length,
    sequences: sequences(r),
    ok: r.ok,
    error: r.ok ? null : `${r.errorKind}: ${r.errorMessage}`,
  };
}

export function reportConfig(o: ResolvedBenchOptions, workload: Record<string, unknown>, tokens: TokenSpace): ReportConfig {
  return {
    url: o.url,
    model: o.model,
    endpoint: o.endpoint,
    prompt_format: o.promptFormat,
    batch_size: o.endpoint === 'embeddings' ? o.batchSize : null,
    tokenizer: o.tokenizer ?? null,
    exact_prompts: tokens.exact || o.promptFormat === 'ids',
    workload,
    load: {
      mode: o.loadMode,
      rate: o.rate ?? null,
      concurrency: o.concurrency ?? null,
      requests: o.requests ?? null,
      duration_s: o.durationS ?? null,
      warmup: o.warmup,
    },
    seed: o.seed,
    max_tokens: o.maxTokens ?? null,
    ignore_eos: o.ignoreEos,
    temperature: o.temperature ?? null,
    timeout_s: o.timeoutS,
  };
}

export function buildReport(args: {
  label: string;
  createdAt: Date;
  config: ReportConfig;
  records: readonly RequestRecord[];
  warmup: number;
  goodput: ResolvedBenchOptions['goodput'];
}): BenchReport {
  return {
    schema: REPORT_SCHEMA,
    version: REPORT_VERSION,
    label: args.label,
    created_at: args.createdAt.toISOString(),
    config: args.config,
    summary: buildSummary(args.records, args.warmup, args.goodput ?? null, args.config.endpoint !== 'embeddings'),
    cdf: buildCdf(args.records),
    timeline: buildTimeline(args.records),
    requests: args.records.map(requestRow),
  };
}
