/**
 * Aggregation arithmetic on hand-made records, worked by hand so a reader can check them.
 */
import { describe, expect, it } from 'vitest';
import { buildSummary, buildTimeline, chooseBinSeconds, isGood, maxInFlight } from '../../bench/loadgen/aggregate.js';
import type { RequestRecord } from '../../bench/loadgen/record.js';
import { percentileSorted, summarize } from '../../bench/loadgen/stats.js';

function rec(index: number, startMs: number, chunks: number[], endMs: number, extra: Partial<RequestRecord> = {}): RequestRecord {
  return {
    index,
    session: index,
    turn: 0,
    scheduledMs: null,
    startMs,
    endMs,
    ok: true,
    errorKind: null,
    errorMessage: null,
    chunkTimesMs: Float64Array.from(chunks),
    islRequested: 100,
    islReported: 100,
    oslRequested: chunks.length,
    oslReported: chunks.length,
    cachedTokens: null,
    ...extra,
  };
}

describe('stats', () => {
  it('percentiles interpolate linearly between order statistics (numpy default)', () => {
    const sorted = [10, 20, 30, 40];
    // rank = p/100 * (n-1): p50 -> 1.5 -> 25; p90 -> 2.7 -> 37
    expect(percentileSorted(sorted, 50)).toBe(25);
    expect(percentileSorted(sorted, 90)).toBeCloseTo(37, 10);
    const s = summarize([40, 10, 30, 20]);
    expect(s).toMatchObject({ count: 4, mean: 25, min: 10, max: 40, p50: 25 });
    expect(s.std).toBeCloseTo(Math.sqrt(125), 10);
  });
});

describe('summary arithmetic', () => {
  // Request A: sent at 0, tokens at 100, 110, 130 -> TTFT 100, gaps 10 and 20, TPOT (130-100)/2 = 15, e2e 140.
  // Request B: sent at 50, tokens at 250, 260 -> TTFT 200, gap 10, TPOT 10, e2e 270 (ends at 320).
  // Request C: failed with HTTP 503 at 60..70.
  const a = rec(0, 0, [100, 110, 130], 140, { cachedTokens: 40 });
  const b = rec(1, 50, [250, 260], 320, { cachedTokens: 0, islReported: 101 });
  const c = rec(2, 60, [], 70, { ok: false, errorKind: 'http_503', errorMessage: 'HTTP 503: overloaded', oslReported: null });
  const s = buildSummary([a, b, c], 2, { ttft: 150 });

  it('latencies', () => {
    expect(s.latency_ms.ttft).toMatchObject({ count: 2, mean: 150, min: 100, max: 200 });
    expect(s.latency_ms.itl).toMatchObject({ count: 3, min: 10, max: 20, p50: 10 });
    expect(s.latency_ms.itl.mean).toBeCloseTo(40 / 3, 10);
    expect(s.latency_ms.tpot).toMatchObject({ count: 2, mean: 12.5 });
    expect(s.latency_ms.e2e).toMatchObject({ count: 2, mean: 205 });
  });

  it('throughput over the measured span (0 .. 320 ms)', () => {
    expect(s.duration_s).toBeCloseTo(0.32, 10);
    expect(s.throughput.requests_per_s).toBeCloseTo(2 / 0.32, 10);
    expect(s.throughput.output_tokens_per_s).toBeCloseTo(5 / 0.32, 10);
    expect(s.throughput.input_tokens_per_s).toBeCloseTo(201 / 0.32, 10);
  });

  it('tokens, cache, goodput and errors', () => {
    expect(s.tokens.input_total).toBe(201);
    expect(s.tokens.output_total).toBe(5);
    expect(s.tokens.cached_total).toBe(40);
    expect(s.tokens.cached_ratio).toBeCloseTo(40 / 201, 10);
    expect(s.tokens.isl_mismatches).toBe(1);
    expect(s.requests).toEqual({ measured: 3, completed: 2, failed: 1, warmup: 2 });
    // Only A meets ttft <= 150; C failed.
    expect(s.goodput).toMatchObject({ good_requests: 1, fraction: 1 / 3 });
    expect(s.goodput!.requests_per_s).toBeCloseTo(1 / 0.32, 10);
    expect(s.errors).toEqual({ total: 1, by_kind: { http_503: 1 }, examples: { http_503: 'HTTP 503: overloaded' } });
    // A 0..140 and B 50..320 overlap, C 60..70 overlaps both.
    expect(s.concurrency.max_in_flight).toBe(3);
    expect(s.concurrency.mean_in_flight).toBeCloseTo((140 + 270 + 10) / 320, 10);
  });

  it('goodput checks per-request mean ITL, TPOT and e2e', () => {
    expect(isGood(a, { itl: 15 })).toBe(true); // mean gap (130-100)/2 = 15
    expect(isGood(a, { itl: 14.9 })).toBe(false);
    expect(isGood(a, { e2e: 139 })).toBe(false);
    expect(isGood(b, { tpot: 10 })).toBe(true);
    expect(isGood(c, {})).toBe(false);
  });

  it('cached ratio is null when the server never reports cached tokens', () => {
    expect(buildSummary([rec(0, 0, [1, 2], 3)], 0, null).tokens.cached_ratio).toBeNull();
  });
});

describe('timeline', () => {
  it('bins output tokens, completions and time-weighted in-flight', () => {
    // Two requests over 2 s in 1 s bins: R1 0..1500 ms with 3 tokens at 200, 700, 1200;
    // R2 500..2000 ms with 2 tokens at 1600, 1900.
    const r1 = rec(0, 0, [200, 700, 1200], 1500);
    const r2 = rec(1, 500, [1600, 1900], 2000);
    const t = buildTimeline([r1, r2], 1);
    expect(t.start_s).toEqual([0, 1]);
    expect(t.output_tokens_per_s).toEqual([2, 3]);
    expect(t.completed_requests_per_s).toEqual([0, 2]);
    // bin 0: r1 1000 ms + r2 500 ms = 1.5; bin 1: r1 500 ms + r2 1000 ms = 1.5
    expect(t.in_flight).toEqual([1.5, 1.5]);
    expect(maxInFlight([r1, r2])).toBe(2);
  });

  it('picks a bin width that keeps plots under 120 points', () => {
    expect(chooseBinSeconds(10)).toBe(0.1);
    expect(chooseBinSeconds(100)).toBe(1);
    expect(chooseBinSeconds(3000)).toBe(30);
  });
});
