/**
 * The load driver: decides when sessions start and runs their turns. Three load models:
 *   closed   C workers, each starting its next session as soon as the last one ends;
 *   poisson  sessions arrive at exponential gaps (seeded), regardless of completions;
 *   trace    sessions arrive at the trace's own offsets.
 * Open loops take an optional in-flight cap; a capped arrival waits, and that wait shows
 * up as schedule lag in the report. After --duration no new session or turn starts and the
 * requests in flight run to completion.
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import type { LoadMode } from './options.js';
import type { RequestRecord } from './record.js';
import { encodeTurn, type EncoderOptions } from './request-encoder.js';
import { Rng } from './rng.js';
import type { SseClient } from './sse-client.js';
import type { TokenSpace } from './token-space.js';
import type { SessionSpec, Workload } from './workloads/workload.js';

export interface DriverOptions {
  mode: LoadMode;
  rate: number | undefined;
  concurrency: number | undefined;
  durationMs: number | undefined;
  maxTokens: number | undefined;
  timeoutMs: number;
  seed: number;
  encoder: EncoderOptions;
  signal: AbortSignal | undefined;
}

/** Live counters, read by the progress display. */
export interface LiveCounters {
  startedAt: number;
  launched: number;
  completed: number;
  failed: number;
  inFlight: number;
  outputTokens: number;
}

/**
 * Wait until performance.now() >= target. libuv computes timer deadlines from a loop time
 * cached at the start of the iteration, so a timer can fire up to ~1-2 ms early; the last
 * stretch is covered by yielding with setImmediate, which keeps the event loop free.
 */
export async function sleepUntil(target: number): Promise<void> {
  for (;;) {
    const delay = target - performance.now();
    if (delay <= 0) return;
    if (delay > 2) await sleep(delay - 1);
    else await new Promise<void>((resolve) => setImmediate(resolve));
  }
}

export class LoadDriver {
  readonly live: LiveCounters = { startedAt: 0, launched: 0, completed: 0, failed: 0, inFlight: 0, outputTokens: 0 };
  private readonly records: RequestRecord[] = [];
  private t0 = 0;
  /** Set by an abort or the deadline timer; `halted()` also reads the clock. */
  private stopped = false;
  private waiters: (() => void)[] = [];
  private sessionsInFlight = 0;

  constructor(
    private readonly client: SseClient,
    private readonly tokens: TokenSpace,
    private readonly options: DriverOptions,
  ) {}

  /** Run `workload` to exhaustion (or to the deadline); resolves with its records in launch order. */
  async run(workload: Workload): Promise<RequestRecord[]> {
    this.t0 = performance.now();
    this.live.startedAt = this.t0;
    const { durationMs, signal } = this.options;
    const deadline = durationMs !== undefined ? setTimeout(() => (this.stopped = true), durationMs) : undefined;
    const onAbort = () => (this.stopped = true);
    signal?.addEventListener('abort', onAbort, { once: true });
    if (signal?.aborted) this.stopped = true;
    try {
      if (this.options.mode === 'closed') await this.runClosed(workload, this.options.concurrency ?? 1);
      else await this.runOpen(workload);
    } finally {
      clearTimeout(deadline);
      signal?.removeEventListener('abort', onAbort);
    }
    return this.records.sort((a, b) => a.index - b.index);
  }

  /**
   * No new request may start: aborted, or past --duration. The deadline timer alone is not
   * enough: under event-loop lag it fires late and a request would start after the deadline.
   */
  private halted(): boolean {
    const { durationMs } = this.options;
    return this.stopped || (durationMs !== undefined && performance.now() - this.t0 >= durationMs);
  }

  private async runClosed(workload: Workload, workers: number): Promise<void> {
    const loop = async () => {
      while (!this.halted()) {
        const session = workload.nextSession();
        if (!session) return;
        await this.runSession(session, null);
      }
    };
    await Promise.all(Array.from({ length: workers }, loop));
  }

  private async runOpen(workload: Workload): Promise<void> {
    const { mode, rate, concurrency, durationMs } = this.options;
    const arrivals = new Rng(this.options.seed, 0x41525256);
    const running = new Set<Promise<void>>();
    let nextArrival = 0;
    while (!this.halted()) {
      const session = workload.nextSession();
      if (!session) break;
      const at = mode === 'trace' ? (session.arrivalMs ?? 0) : nextArrival;
      if (mode === 'poisson') nextArrival += arrivals.exponential(rate as number) * 1000;
      if (durationMs !== undefined && at >= durationMs) break;
      await sleepUntil(this.t0 + at);
      if (this.halted()) break;
      if (concurrency !== undefined) await this.acquire(concurrency);
      if (this.halted()) {
        if (concurrency !== undefined) this.release();
        break;
      }
      const p = this.runSession(session, at).finally(() => {
        if (concurrency !== undefined) this.release();
        running.delete(p);
      });
      running.add(p);
    }
    await Promise.all(running);
  }

  private acquire(limit: number): Promise<void> {
    if (this.sessionsInFlight < limit) {
      this.sessionsInFlight++;
      return Promise.resolve();
    }
    return new Promise((resolve) =>
      this.waiters.push(() => {
        this.sessionsInFlight++;
        resolve();
      }),
    );
  }

  private release(): void {
    this.sessionsInFlight--;
    this.waiters.shift()?.();
  }

  private async runSession(session: SessionSpec, scheduledMs: number | null): Promise<void> {
    const answers: string[] = [];
    const keepText = session.turns > 1;
    for (let t = 0; t < session.turns; t++) {
      if (t > 0) {
        if (this.halted()) return;
        await sleep(session.thinkTimeMs);
        if (this.halted()) return;
      }
      const turn = session.turn(t, answers);
      const maxTokens = this.options.maxTokens ?? turn.outputTokens;
      const request = encodeTurn(turn, maxTokens, this.options.encoder, this.tokens);
      const index = this.live.launched++;
      this.live.inFlight++;
      const outcome = await this.client.send(request.path, request.body, {
        expectedTokens: maxTokens,
        ...(request.streamed ? {} : { unarySequences: request.sequences }),
        keepText,
        timeoutMs: this.options.timeoutMs,
        signal: this.options.signal,
      });
      this.live.inFlight--;
      const chunkTimesMs = outcome.chunkTimes;
      // Rebase in place: the client's buffer is ours now, no second array per request.
      for (let i = 0; i < chunkTimesMs.length; i++) chunkTimesMs[i] = (chunkTimesMs[i] as number) - this.t0;
      this.records.push({
        index,
        session: session.id,
        turn: t,
        scheduledMs: t === 0 ? scheduledMs : null,
        startMs: outcome.sentAt - this.t0,
        endMs: outcome.endedAt - this.t0,
        ok: outcome.ok,
        errorKind: outcome.errorKind ?? null,
        errorMessage: outcome.errorMessage ?? null,
        chunkTimesMs,
        islRequested: request.expectedPromptTokens,
        islReported: outcome.promptTokens ?? null,
        oslRequested: maxTokens,
        oslReported: outcome.completionTokens ?? null,
        cachedTokens: outcome.cachedTokens ?? null,
        sequences: request.sequences,
      });
      if (outcome.ok) {
        this.live.completed++;
        this.live.outputTokens += outcome.completionTokens ?? chunkTimesMs.length;
      } else {
        this.live.failed++;
        // A conversation cannot continue without the answer it failed to get.
        return;
      }
      answers.push(outcome.text ?? '');
    }
  }
}
