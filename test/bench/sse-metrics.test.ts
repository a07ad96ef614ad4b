/**
 * The instrument under test: runBench against a scripted SSE server whose timings are known,
 * so TTFT, ITL, TPOT, E2E and throughput must come out at the scripted values.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { runBench } from '../../bench/loadgen/index.js';
import { startScriptedServer, type ScriptedServer } from './fixtures/scripted-server.js';

let server: ScriptedServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

const base = { model: 'scripted', progress: 'off' as const, workload: 'random' as const, isl: 32 };

// Lower bounds come from the script (nothing arrives before it is sent); exact checks compare
// with the server's own write times on the same clock, so a loaded CI machine does not
// make them flaky; upper bounds against the script are loose.
describe('bench metrics against a scripted SSE server', () => {
  it('measures TTFT, ITL, TPOT and E2E at the scripted times', async () => {
    // 80 ms to the first token, then 15 ms per token, 12 tokens: e2e = 80 + 11 * 15 = 245 ms.
    server = await startScriptedServer({ ttftMs: 80, itlMs: 15, cachedTokens: () => 16 });
    // Two warm-up requests take the cold start (JIT, first connections) out of the numbers.
    const { report, records } = await runBench({ ...base, url: server.url, osl: 12, requests: 6, concurrency: 2, warmup: 2 });
    const s = report.summary;
    expect(server.received).toHaveLength(8);
    expect(s.requests).toEqual({ measured: 6, completed: 6, failed: 0, warmup: 2 });
    expect(records.every((r) => r.chunkTimesMs.length === 12)).toBe(true);

    // Against the script: nothing is faster than scripted (less the ~1 ms a Node timer can fire
    // early); slower only by machine load.
    expect(s.latency_ms.ttft.min).toBeGreaterThanOrEqual(79);
    expect(s.latency_ms.e2e.min).toBeGreaterThanOrEqual(244);
    expect(s.latency_ms.itl.count).toBe(6 * 11);
    expect(s.latency_ms.ttft.mean).toBeLessThan(80 * 2);
    expect(s.latency_ms.itl.mean).toBeLessThan(15 * 2);

    // Against the truth: the server's own write times, on the same clock. Client-side
    // numbers must match them up to delivery delay, however busy the machine is.
    const measured = server.received.slice(2);
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    const serverTtft = mean(measured.map((r) => r.writes[0]! - r.arrivedAt));
    const serverGaps = measured.flatMap((r) => r.writes.slice(1).map((w, i) => w - r.writes[i]!));
    const serverTpot = mean(measured.map((r) => (r.writes[11]! - r.writes[0]!) / 11));
    expect(s.latency_ms.ttft.mean).toBeGreaterThanOrEqual(serverTtft);
    // Delivery delay only: timing from the response headers instead of the first token would be ~80 ms off.
    expect(s.latency_ms.ttft.mean - serverTtft).toBeLessThan(40);
    expect(Math.abs(s.latency_ms.itl.mean - mean(serverGaps))).toBeLessThan(1.5);
    expect(Math.abs(s.latency_ms.tpot.mean - serverTpot)).toBeLessThan(1.5);

    // Throughput arithmetic and usage fields.
    expect(s.throughput.output_tokens_per_s).toBeCloseTo((6 * 12) / s.duration_s, 6);
    expect(s.throughput.requests_per_s).toBeCloseTo(6 / s.duration_s, 6);
    // Two closed-loop workers, three rounds of at least 245 ms each.
    expect(s.duration_s).toBeGreaterThanOrEqual(0.73);
    expect(s.tokens.osl.mean).toBe(12);
    expect(s.tokens.cached_total).toBe(6 * 16);
    expect(s.tokens.cached_ratio).toBeCloseTo(16 / 32, 6);
    expect(s.concurrency.max_in_flight).toBe(2);
  });

  it('counts coalesced chunks: ITL per chunk, TPOT per token', async () => {
    // 4 tokens per chunk every 40 ms, 32 tokens: 8 chunks, chunk gap 40 ms,
    // TPOT = (last chunk - first chunk) / (32 - 1) = 7 * 40 / 31 = 9.03 ms.
    server = await startScriptedServer({ ttftMs: 30, itlMs: 40, tokensPerChunk: 4 });
    const { report } = await runBench({ ...base, url: server.url, osl: 32, requests: 2, concurrency: 2, warmup: 1 });
    const s = report.summary;
    expect(s.tokens.tokens_per_chunk).toBe(4);
    expect(s.latency_ms.itl.count).toBe(2 * 7);
    // Both come from the same client timestamps: the 7 chunk gaps of a request span what its
    // 31 token gaps span, exactly (per-token ITL, or TPOT over 32 tokens, would break this).
    expect(s.latency_ms.tpot.mean * 31).toBeCloseTo(s.latency_ms.itl.mean * 7, 6);
    // Against the server's own write times: delivery to the client jitters by milliseconds on a
    // loaded machine (2.3 ms off in one full run at load 5), while a per-token ITL would read
    // 10 ms against the chunks' 40.
    const measured = server.received.slice(1);
    const span = measured.map((r) => r.writes[7]! - r.writes[0]!);
    const mean = (xs: number[]) => xs.reduce((x, y) => x + y, 0) / xs.length;
    expect(Math.abs(s.latency_ms.itl.mean - mean(span) / 7)).toBeLessThan(8);
  });

  it('classifies failures by kind and keeps them out of latency stats', async () => {
    const faults = ['http_503', 'reset', 'stream_error', 'no_done', 'hang'] as const;
    server = await startScriptedServer({ ttftMs: 5, itlMs: 2, fault: (i) => faults[i] });
    const { report } = await runBench({ ...base, url: server.url, osl: 4, requests: 8, concurrency: 1, timeoutS: 0.5 });
    const s = report.summary;
    expect(s.errors.by_kind).toEqual({ http_503: 1, network: 1, stream_error: 1, incomplete: 1, timeout: 1 });
    expect(s.errors.examples.http_503).toContain('overloaded');
    expect(s.errors.examples.stream_error).toContain('engine failed');
    expect(s.requests.completed).toBe(3);
    expect(s.requests.failed).toBe(5);
    expect(s.latency_ms.ttft.count).toBe(3);
  });

  it('a refused connection is a network error, not a crash', async () => {
    server = await startScriptedServer({ ttftMs: 1, itlMs: 1 });
    const url = server.url;
    await server.close();
    server = undefined;
    const { report } = await runBench({ ...base, url, osl: 2, requests: 2 });
    expect(report.summary.errors.by_kind).toEqual({ network: 2 });
    expect(report.summary.errors.examples.network).toContain('ECONNREFUSED');
  });

  it('goodput counts requests meeting every SLO', async () => {
    // One server answers in 20 ms, the other in 700 ms; the TTFT SLO is 400 ms (wide, because
    // a cold process on a loaded CI machine has been seen to take 250 ms for its first stream).
    server = await startScriptedServer({ ttftMs: 20, itlMs: 5 });
    const slow = await startScriptedServer({ ttftMs: 700, itlMs: 5 });
    try {
      const fast = await runBench({ ...base, url: server.url, osl: 4, requests: 3, concurrency: 3, goodput: { ttft: 400, itl: 50 } });
      expect(fast.report.summary.goodput?.good_requests).toBe(3);
      expect(fast.report.summary.goodput?.fraction).toBe(1);
      const late = await runBench({ ...base, url: slow.url, osl: 4, requests: 2, concurrency: 2, goodput: { ttft: 400 } });
      expect(late.report.summary.goodput?.good_requests).toBe(0);
      expect(late.report.summary.goodput?.requests_per_s).toBe(0);
    } finally {
      await slow.close();
    }
  });

  it('Poisson arrivals average the requested rate', async () => {
    server = await startScriptedServer({ ttftMs: 1, itlMs: 1 });
    const { report } = await runBench({ ...base, url: server.url, osl: 2, requests: 60, rate: 100, seed: 3 });
    const starts = report.requests.map((r) => r.scheduled_ms as number);
    // 59 exponential gaps with mean 10 ms: the span is ~590 ms (seeded, so exactly reproducible).
    const span = starts[starts.length - 1]! - starts[0]!;
    expect(span / 59).toBeGreaterThan(6);
    expect(span / 59).toBeLessThan(14);
    expect(report.summary.latency_ms.schedule_lag.p50).toBeLessThan(25);
    const again = await runBench({ ...base, url: server.url, osl: 2, requests: 60, rate: 100, seed: 3 });
    expect(again.report.requests.map((r) => r.scheduled_ms)).toEqual(starts);
  });

  it('--duration stops starting requests at the deadline and lets in-flight ones finish', async () => {
    server = await startScriptedServer({ ttftMs: 20, itlMs: 5 });
    const { report } = await runBench({ ...base, url: server.url, osl: 4, concurrency: 2, durationS: 0.3 });
    expect(report.config.workload.requests).toBeNull();
    // Each request takes ~35 ms: two workers fit roughly 16 in 300 ms.
    expect(report.summary.requests.completed).toBeGreaterThan(4);
    expect(report.summary.requests.failed).toBe(0);
    // The driver checks the deadline, then encodes and sends in the same tick; start_ms is the
    // send. So the last start may trail 300 by that synchronous work (0.64 ms in one loaded full
    // run). A driver that ignored the deadline would keep starting requests (with two in flight
    // a worker frees up every ~17 ms) and never end.
    expect(Math.max(...report.requests.map((r) => r.start_ms))).toBeLessThan(310);
    expect(Math.max(...report.requests.map((r) => r.start_ms + r.e2e_ms))).toBeGreaterThan(300);
  });
});
