/**
 * Traffic: request and hand-off counters and timestamped samples (rates, TTFT, ITL, KV
 * transfers), bounded by fixed rings. Pure: the clock is an argument.
 *
 * Rates are per second over the **rate window**: the interval between the stream's last two
 * ticks, which only `advance(now)` (the stream's timer) moves. A page load, a new SSE client or
 * a `/dashboard/api/snapshot` read `view` and leave the window alone, so they never shorten
 * what streamed clients see. With no stream running the window is the last second.
 * Percentiles cover the last `PERCENTILE_WINDOW_MS`.
 */
import { percentiles, SampleRing } from './ring.js';
import { SNAPSHOT_INTERVAL_MS, type DisaggView, type TrafficView } from './snapshot.js';

/** Window of the latency percentiles. */
export const PERCENTILE_WINDOW_MS = 60_000;
/** The rate window is clamped to this range. */
const MIN_WINDOW_MS = 250;
const MAX_WINDOW_MS = 10_000;
const SAMPLE_CAPACITY = 8192;

export interface DisaggEnd {
  fallback: boolean;
  transferSeconds?: number;
  transferBytes?: number;
}

export class Traffic {
  private readonly starts = new SampleRing(SAMPLE_CAPACITY);
  private readonly ends = new SampleRing(SAMPLE_CAPACITY);
  private readonly ttft = new SampleRing(SAMPLE_CAPACITY);
  private readonly itl = new SampleRing(SAMPLE_CAPACITY);
  private readonly transferBytes = new SampleRing(SAMPLE_CAPACITY);
  private readonly transferLatency = new SampleRing(SAMPLE_CAPACITY);
  private readonly errors: Record<string, number> = {};
  private migrations = 0;
  private requestsTotal = 0;
  private finishedTotal = 0;
  private disaggTotal = 0;
  private fallbacks = 0;
  private lastAdvanceAt = 0;
  private window: { start: number; end: number } | undefined;

  started(now: number): void {
    this.starts.push(now, 1);
    this.requestsTotal++;
  }

  firstToken(now: number, ttftMs: number): void {
    this.ttft.push(now, ttftMs);
  }

  /** A request refused before it was routed (bad request, overload, draining…), or one that failed. */
  error(code: string): void {
    this.errors[code] = (this.errors[code] ?? 0) + 1;
  }

  migrated(): void {
    this.migrations++;
  }

  ended(now: number, firstTokenAt: number | undefined, completionTokens: number, disagg: DisaggEnd | undefined): void {
    this.ends.push(now, 1);
    this.finishedTotal++;
    if (firstTokenAt !== undefined && completionTokens > 1) this.itl.push(now, (now - firstTokenAt) / (completionTokens - 1));
    if (!disagg) return;
    if (disagg.fallback) this.fallbacks++;
    else this.disaggTotal++;
    if (disagg.transferSeconds !== undefined) {
      this.transferLatency.push(now, disagg.transferSeconds * 1000);
      this.transferBytes.push(now, disagg.transferBytes ?? 0);
    }
  }

  /** The stream's tick: the rate window becomes (previous tick, now]. */
  advance(now: number): void {
    const start = this.lastAdvanceAt > 0 ? now - clamp(now - this.lastAdvanceAt) : now - SNAPSHOT_INTERVAL_MS;
    this.window = { start, end: now };
    this.lastAdvanceAt = now;
  }

  view(now: number, inflight: number, queued: number): { traffic: TrafficView; disagg: DisaggView } {
    const w = this.rateWindow(now);
    const seconds = (w.end - w.start) / 1000;
    const since = now - PERCENTILE_WINDOW_MS;
    const transfer = percentiles(this.transferLatency.valuesSince(since));
    return {
      traffic: {
        requestRate: this.starts.sumBetween(w.start, w.end) / seconds,
        finishRate: this.ends.sumBetween(w.start, w.end) / seconds,
        ttft: percentiles(this.ttft.valuesSince(since)),
        itl: percentiles(this.itl.valuesSince(since)),
        windowMs: PERCENTILE_WINDOW_MS,
        inflight,
        queued,
        errorsByType: { ...this.errors },
        migrations: this.migrations,
        requestsTotal: this.requestsTotal,
        finishedTotal: this.finishedTotal,
      },
      disagg: {
        // The same population as the count beside it on the page: every request finished so far.
        share: this.finishedTotal > 0 ? this.disaggTotal / this.finishedTotal : 0,
        disaggregatedTotal: this.disaggTotal,
        transferGBps: this.transferBytes.sumBetween(w.start, w.end) / seconds / 1e9,
        transferLatencyMs: { p50: transfer.p50, p99: transfer.p99 },
        fallbacks: this.fallbacks,
      },
    };
  }

  private rateWindow(now: number): { start: number; end: number } {
    const w = this.window;
    if (w !== undefined && now >= w.end && now - w.end <= MAX_WINDOW_MS) return w;
    return { start: now - SNAPSHOT_INTERVAL_MS, end: now };
  }
}

function clamp(ms: number): number {
  return Math.max(MIN_WINDOW_MS, Math.min(MAX_WINDOW_MS, ms));
}
