/**
 * Live progress while a run goes: a redrawn bar on a terminal, a plain line every few
 * seconds otherwise (CI logs stay readable). Reads the driver's counters on a timer; it
 * never touches the request path.
 */
import { performance } from 'node:perf_hooks';
import type { LiveCounters } from './driver.js';
import type { ProgressMode } from './options.js';

export interface ProgressTarget {
  /** Total requests when known. */
  requests: number | undefined;
  durationMs: number | undefined;
}

export class ProgressReporter {
  private timer: NodeJS.Timeout | undefined;
  private readonly bar: boolean;
  private readonly enabled: boolean;

  constructor(
    private readonly live: LiveCounters,
    private readonly target: ProgressTarget,
    mode: ProgressMode,
    private readonly stream: NodeJS.WriteStream = process.stderr,
    private readonly plainIntervalMs = 5000,
  ) {
    this.bar = mode === 'bar' || (mode === 'auto' && stream.isTTY === true);
    this.enabled = mode !== 'off';
  }

  start(): void {
    if (!this.enabled) return;
    this.timer = setInterval(() => this.draw(false), this.bar ? 250 : this.plainIntervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    if (this.enabled) this.draw(true);
  }

  /** The status line for the current counters. */
  line(): string {
    const l = this.live;
    const elapsed = (performance.now() - l.startedAt) / 1000;
    const done = l.completed + l.failed;
    let fraction: number | undefined;
    if (this.target.requests !== undefined) fraction = done / this.target.requests;
    else if (this.target.durationMs !== undefined) fraction = (elapsed * 1000) / this.target.durationMs;
    const rate = elapsed > 0 ? done / elapsed : 0;
    const tok = elapsed > 0 ? l.outputTokens / elapsed : 0;
    const total = this.target.requests !== undefined ? `/${this.target.requests}` : '';
    const stats = `${done}${total} req · ${l.failed} err · ${l.inFlight} in flight · ${rate.toFixed(1)} req/s · ${tok.toFixed(0)} tok/s · ${elapsed.toFixed(0)}s`;
    if (!this.bar || fraction === undefined) return stats;
    const width = 24;
    const filled = Math.max(0, Math.min(width, Math.round(fraction * width)));
    return `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${(Math.min(1, fraction) * 100).toFixed(0).padStart(3)}% ${stats}`;
  }

  private draw(final: boolean): void {
    if (this.bar) this.stream.write(`\r\x1b[2K${this.line()}${final ? '\n' : ''}`);
    else this.stream.write(`bench: ${this.line()}\n`);
  }
}
