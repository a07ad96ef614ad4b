/**
 * LoadPublisher: what a worker puts on `load_metrics`, and when.
 *
 * The engine loop reports load after every step. Publishing each one would flood the event
 * plane at high step rates, so reports are throttled to `minIntervalMs`; but a throttle that
 * only drops would lose the last report of a burst, and the last report is the one that says
 * "idle now". So:
 *   - a report inside the interval is held, and the newest held one is sent when the interval
 *     ends (trailing edge): the final state of every burst reaches subscribers;
 *   - with no step at all (an idle worker, or a request cancelled while nothing runs), the
 *     current load is re-sent every `heartbeatMs`, so readers can tell "idle" from "silent"
 *     and expire reports that stop coming (proto/wire.ts `LOAD_REPORT_STALE_MS`).
 *
 * Heartbeats begin at `start(sample)`: the publisher exists before the engine loop it
 * reports for (it is among the loop's sinks), and samples that loop once it is built.
 */
import type { LoadMetrics } from '../../proto/wire.js';

export interface LoadPublisherOptions {
  /** At most one report per this many ms (`--load-metrics-interval`); 0 sends every report. */
  minIntervalMs: number;
  /** Re-send the current load when nothing was sent for this long. */
  heartbeatMs: number;
  publish(m: LoadMetrics): void;
  clock?: () => number;
}

export class LoadPublisher {
  private lastSentAt = Number.NEGATIVE_INFINITY;
  private held: LoadMetrics | undefined;
  private trailing: NodeJS.Timeout | undefined;
  private heartbeat: NodeJS.Timeout | undefined;
  private readonly clock: () => number;
  private closed = false;

  constructor(private readonly o: LoadPublisherOptions) {
    this.clock = o.clock ?? Date.now;
  }

  /** Starts the heartbeat; `sample` is the worker's load now. */
  start(sample: () => LoadMetrics): void {
    if (this.closed || this.heartbeat !== undefined) return;
    this.heartbeat = setInterval(() => this.beat(sample), Math.max(1, Math.floor(this.o.heartbeatMs / 2)));
    this.heartbeat.unref();
  }

  /** A report from the engine loop. */
  offer(m: LoadMetrics): void {
    if (this.closed) return;
    const wait = this.lastSentAt + this.o.minIntervalMs - this.clock();
    if (wait <= 0) return this.send(m);
    this.held = m;
    if (this.trailing === undefined) {
      this.trailing = setTimeout(() => this.flush(), wait);
      this.trailing.unref();
    }
  }

  close(): void {
    this.closed = true;
    clearInterval(this.heartbeat);
    if (this.trailing !== undefined) clearTimeout(this.trailing);
    this.trailing = undefined;
    this.held = undefined;
  }

  private flush(): void {
    this.trailing = undefined;
    const m = this.held;
    this.held = undefined;
    if (m !== undefined && !this.closed) this.send(m);
  }

  private beat(sample: () => LoadMetrics): void {
    if (this.closed || this.trailing !== undefined) return;
    if (this.clock() - this.lastSentAt >= this.o.heartbeatMs) this.send(sample());
  }

  private send(m: LoadMetrics): void {
    this.lastSentAt = this.clock();
    this.o.publish(m);
  }
}
