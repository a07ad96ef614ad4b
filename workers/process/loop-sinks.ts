/**
 * The engine loop's sinks in a worker: KV events onto the event plane (`kv_events`), and each
 * step's load into the worker's gauges and the LoadPublisher (`load_metrics`).
 *
 * Built before the loop (it is what the loop reports to), then attached to it: from then on
 * the gauges read the loop's counters and the load heartbeat samples it. The loop reports only
 * from steps, so nothing arrives before attach.
 */
import type { KvEvent, LoadMetrics } from '../../proto/wire.js';
import { LOAD_REPORT_HEARTBEAT_MS, TOPICS } from '../../proto/wire.js';
import type { Component } from '../../runtime/index.js';
import type { Logger } from '../../runtime/index.js';
import type { EngineLoop, EngineLoopSinks } from '../engine-loop/index.js';
import { LoadPublisher } from './load-publisher.js';
import type { WorkerMetrics } from './worker-metrics.js';

export interface WorkerLoopSinksOptions {
  component: Pick<Component, 'publish'>;
  metrics: WorkerMetrics;
  modelName: string;
  log: Logger;
  /** `--load-metrics-interval`: at most one load report per this many ms. */
  loadMetricsIntervalMs: number;
}

export class WorkerLoopSinks implements EngineLoopSinks {
  private readonly publisher: LoadPublisher;
  private loop: EngineLoop | undefined;

  constructor(private readonly o: WorkerLoopSinksOptions) {
    this.publisher = new LoadPublisher({
      minIntervalMs: o.loadMetricsIntervalMs,
      heartbeatMs: LOAD_REPORT_HEARTBEAT_MS,
      publish: (m) => void o.component.publish(TOPICS.loadMetrics, m).catch((err: unknown) => o.log.debug({ err }, 'load metrics publish failed')),
    });
  }

  /** The loop these sinks serve: gauges and heartbeats read it from now on. */
  attach(loop: EngineLoop): void {
    this.loop = loop;
    this.publisher.start(() => loop.loadMetrics());
    this.o.metrics.update(loop.stats());
  }

  readonly onKvEvents = (events: KvEvent[]): void => {
    void this.o.component.publish(TOPICS.kvEvents, events).catch((err: unknown) => this.o.log.debug({ err }, 'kv event publish failed'));
  };

  readonly onLoadMetrics = (m: LoadMetrics): void => {
    this.o.metrics.steps.inc({ model_name: this.o.modelName });
    if (this.loop !== undefined) this.o.metrics.update(this.loop.stats(m));
    this.publisher.offer(m);
  };

  close(): void {
    this.publisher.close();
  }
}
