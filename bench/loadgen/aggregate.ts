/**
 * Pure aggregation: measured request records in, the report's summary, CDFs and timeline
 * out. No clocks and no I/O, so the arithmetic is tested with hand-made records.
 */
import { e2eMs, isl, meanItlMs, osl, scheduleLagMs, sequences, tpotMs, ttftMs, writeItlGaps, type RequestRecord } from './record.js';
import { CDF_QUANTILES, cdfPoints, NOT_APPLICABLE_STATS, summarize, type Stats } from './stats.js';

/** Goodput SLOs in ms; a request is good when it succeeded and meets every one given. */
export interface GoodputSlo {
  ttft?: number;
  /** Per-request mean inter-token latency. */
  itl?: number;
  tpot?: number;
  e2e?: number;
}

export interface Summary {
  duration_s: number;
  requests: { measured: number; completed: number; failed: number; warmup: number };
  /** sequences_per_s: input sequences (an embeddings batch counts its inputs; a generation request counts 1). */
  throughput: { requests_per_s: number; sequences_per_s: number; output_tokens_per_s: number; input_tokens_per_s: number; total_tokens_per_s: number };
  goodput: { slo: GoodputSlo; good_requests: number; fraction: number; requests_per_s: number } | null;
  /** ttft, itl and tpot are NOT_APPLICABLE_STATS (null in JSON) for an endpoint that streams no tokens (embeddings). */
  latency_ms: { ttft: Stats; itl: Stats; tpot: Stats; e2e: Stats; schedule_lag: Stats };
  tokens: {
    isl: Stats;
    osl: Stats;
    input_total: number;
    output_total: number;
    cached_total: number;
    /** cached_total / input_total over requests whose server reported cached tokens; null if none did. */
    cached_ratio: number | null;
    /** Requests whose server-counted prompt differs from what the workload built. */
    isl_mismatches: number;
    /** Requests that returned fewer output tokens than requested. */
    osl_short: number;
    /** Output tokens per text chunk; above 1 means the server coalesces tokens. */
    tokens_per_chunk: number;
  };
  concurrency: { max_in_flight: number; mean_in_flight: number };
  errors: { total: number; by_kind: Record<string, number>; examples: Record<string, string> };
}

export interface Cdf {
  quantiles: readonly number[];
  ttft_ms: number[];
  itl_ms: number[];
  e2e_ms: number[];
}

export interface Timeline {
  bin_s: number;
  start_s: number[];
  output_tokens_per_s: number[];
  completed_requests_per_s: number[];
  in_flight: number[];
}

export function measuredDurationMs(records: readonly RequestRecord[]): number {
  if (records.length === 0) return 0;
  let first = Infinity;
  let last = -Infinity;
  for (const r of records) {
    first = Math.min(first, r.startMs);
    last = Math.max(last, r.endMs);
  }
  return Math.max(0, last - first);
}

export function isGood(r: RequestRecord, slo: GoodputSlo): boolean {
  if (!r.ok) return false;
  const ttft = ttftMs(r);
  if (slo.ttft !== undefined && (ttft === null || ttft > slo.ttft)) return false;
  if (slo.itl !== undefined) {
    const itl = meanItlMs(r);
    if (itl !== null && itl > slo.itl) return false;
  }
  if (slo.tpot !== undefined) {
    const tpot = tpotMs(r);
    if (tpot !== null && tpot > slo.tpot) return false;
  }
  if (slo.e2e !== undefined && e2eMs(r) > slo.e2e) return false;
  return true;
}

function collect(records: readonly RequestRecord[], f: (r: RequestRecord) => number | null): Float64Array {
  const out = new Float64Array(records.length);
  let n = 0;
  for (const r of records) {
    const v = f(r);
    if (v !== null) out[n++] = v;
  }
  return out.subarray(0, n);
}

/** Every inter-chunk gap of every successful request, pooled. */
export function allItlGaps(records: readonly RequestRecord[]): Float64Array {
  let total = 0;
  for (const r of records) if (r.ok) total += Math.max(0, r.chunkTimesMs.length - 1);
  const out = new Float64Array(total);
  let at = 0;
  for (const r of records) if (r.ok) at = writeItlGaps(r, out, at);
  return out;
}

export function buildSummary(records: readonly RequestRecord[], warmup: number, slo: GoodputSlo | null, streamed = true): Summary {
  const ok = records.filter((r) => r.ok);
  const durationMs = measuredDurationMs(records);
  const seconds = durationMs / 1000;
  const perSecond = (n: number) => (seconds > 0 ? n / seconds : 0);

  let inputTotal = 0;
  let outputTotal = 0;
  let cachedTotal = 0;
  let cachedInput = 0;
  let reportedCache = false;
  let chunks = 0;
  let sequenceTotal = 0;
  let islMismatches = 0;
  let oslShort = 0;
  for (const r of ok) {
    inputTotal += isl(r);
    outputTotal += osl(r);
    chunks += r.chunkTimesMs.length;
    sequenceTotal += sequences(r);
    if (r.cachedTokens !== null) {
      reportedCache = true;
      cachedTotal += r.cachedTokens;
      cachedInput += isl(r);
    }
    if (r.islReported !== null && r.islReported !== r.islRequested) islMismatches++;
    if (osl(r) < r.oslRequested) oslShort++;
  }

  const byKind: Record<string, number> = {};
  const examples: Record<string, string> = {};
  for (const r of records) {
    if (r.ok || r.errorKind === null) continue;
    byKind[r.errorKind] = (byKind[r.errorKind] ?? 0) + 1;
    if (examples[r.errorKind] === undefined) examples[r.errorKind] = r.errorMessage ?? r.errorKind;
  }

  let goodput: Summary['goodput'] = null;
  if (slo) {
    const good = records.filter((r) => isGood(r, slo)).length;
    goodput = { slo, good_requests: good, fraction: records.length > 0 ? good / records.length : 0, requests_per_s: perSecond(good) };
  }

  let e2eSum = 0;
  for (const r of records) e2eSum += e2eMs(r);

  return {
    duration_s: seconds,
    requests: { measured: records.length, completed: ok.length, failed: records.length - ok.length, warmup },
    throughput: {
      requests_per_s: perSecond(ok.length),
      sequences_per_s: perSecond(sequenceTotal),
      output_tokens_per_s: perSecond(outputTotal),
      input_tokens_per_s: perSecond(inputTotal),
      total_tokens_per_s: perSecond(inputTotal + outputTotal),
    },
    goodput,
    latency_ms: {
      ttft: streamed ? summarize(collect(ok, ttftMs)) : { ...NOT_APPLICABLE_STATS },
      itl: streamed ? summarize(allItlGaps(ok)) : { ...NOT_APPLICABLE_STATS },
      tpot: streamed ? summarize(collect(ok, tpotMs)) : { ...NOT_APPLICABLE_STATS },
      e2e: summarize(collect(ok, e2eMs)),
      schedule_lag: summarize(collect(records, scheduleLagMs)),
    },
    tokens: {
      isl: summarize(collect(ok, isl)),
      osl: summarize(collect(ok, osl)),
      input_total: inputTotal,
      output_total: outputTotal,
      cached_total: cachedTotal,
      cached_ratio: reportedCache && cachedInput > 0 ? cachedTotal / cachedInput : null,
      isl_mismatches: islMismatches,
      osl_short: oslShort,
      tokens_per_chunk: chunks > 0 ? outputTotal / chunks : 0,
    },
    concurrency: { max_in_flight: maxInFlight(records), mean_in_flight: durationMs > 0 ? e2eSum / durationMs : 0 },
    errors: { total: records.length - ok.length, by_kind: byKind, examples },
  };
}

export function maxInFlight(records: readonly RequestRecord[]): number {
  const events: [number, number][] = [];
  for (const r of records) events.push([r.startMs, 1], [r.endMs, -1]);
  // Ends before starts at equal times: a request that ends as another starts does not overlap it.
  events.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let cur = 0;
  let max = 0;
  for (const [, d] of events) {
    cur += d;
    if (cur > max) max = cur;
  }
  return max;
}

export function buildCdf(records: readonly RequestRecord[]): Cdf {
  const ok = records.filter((r) => r.ok);
  return {
    quantiles: CDF_QUANTILES,
    ttft_ms: cdfPoints(collect(ok, ttftMs)),
    itl_ms: cdfPoints(allItlGaps(ok)),
    e2e_ms: cdfPoints(collect(ok, e2eMs)),
  };
}

const NICE_BINS_S = [0.1, 0.25, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600];

/** The smallest bin width that keeps the timeline at or under `maxBins` bins. */
export function chooseBinSeconds(durationS: number, maxBins = 120): number {
  for (const b of NICE_BINS_S) if (durationS / b <= maxBins) return b;
  return Math.ceil(durationS / maxBins);
}

export function buildTimeline(records: readonly RequestRecord[], binS?: number): Timeline {
  let end = 0;
  for (const r of records) end = Math.max(end, r.endMs);
  const bin = binS ?? chooseBinSeconds(end / 1000);
  const binMs = bin * 1000;
  const n = Math.max(1, Math.ceil(end / binMs));
  const tokens = new Float64Array(n);
  const completed = new Float64Array(n);
  const busy = new Float64Array(n);
  const clampBin = (t: number) => Math.min(n - 1, Math.max(0, Math.floor(t / binMs)));
  for (const r of records) {
    const c = r.chunkTimesMs;
    if (r.ok && c.length > 0) {
      // Tokens per chunk are not visible on the wire; spread usage's count over the chunks.
      const each = osl(r) / c.length;
      for (let i = 0; i < c.length; i++) tokens[clampBin(c[i] as number)] += each;
      completed[clampBin(r.endMs)] += 1;
    }
    // Time-weighted in-flight: each request adds its overlap with every bin it spans.
    for (let b = clampBin(r.startMs); b <= clampBin(r.endMs); b++) {
      const overlap = Math.min(r.endMs, (b + 1) * binMs) - Math.max(r.startMs, b * binMs);
      if (overlap > 0) busy[b] += overlap;
    }
  }
  const startS: number[] = [];
  for (let b = 0; b < n; b++) startS.push(b * bin);
  // The last bin may be partial; rates use the time it actually covers.
  const width = (b: number) => (b === n - 1 ? Math.max(end - b * binMs, 1e-9) : binMs);
  return {
    bin_s: bin,
    start_s: startS,
    output_tokens_per_s: Array.from(tokens, (v, b) => (v * 1000) / width(b)),
    completed_requests_per_s: Array.from(completed, (v, b) => (v * 1000) / width(b)),
    in_flight: Array.from(busy, (v, b) => v / width(b)),
  };
}
