/**
 * `tandem_router_*` metrics. One set per registry, labelled by component, so a process that
 * routes for several components (a `runtime router` replica) registers each metric once.
 * Counters that the core already keeps (events applied) are advanced by delta on each tick,
 * so the per-event path touches no metric.
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

export class RouterMetrics {
  readonly decisions: Counter<'component' | 'result'>;
  readonly overlapBlocks: Histogram<'component'>;
  readonly eventsApplied: Counter<'component'>;
  readonly eventsDropped: Counter<'component' | 'reason'>;
  readonly gapsRecovered: Counter<'component' | 'kind'>;
  readonly recoveryFailures: Counter<'component' | 'kind'>;
  readonly indexBlocks: Gauge<'component'>;
  readonly workers: Gauge<'component'>;
  readonly activeSequences: Gauge<'component'>;
  readonly workerActiveBlocks: Gauge<'component' | 'worker'>;
  readonly syncMessages: Counter<'component' | 'direction'>;
  readonly saturated: Counter<'component'>;
  readonly refused: Counter<'component' | 'reason'>;
  readonly loraPrefetches: Counter<'component'>;

  private constructor(registry: Registry) {
    const registers = [registry];
    this.decisions = new Counter({ name: 'tandem_router_decisions_total', help: 'Routing decisions by result (routed, all_busy, no_candidates, pinned)', labelNames: ['component', 'result'], registers });
    this.overlapBlocks = new Histogram({
      name: 'tandem_router_overlap_blocks',
      help: 'Prompt blocks the chosen worker already cached, per routed request',
      labelNames: ['component'],
      buckets: [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
      registers,
    });
    this.eventsApplied = new Counter({ name: 'tandem_router_events_applied_total', help: 'Worker KV events applied to the index, in order', labelNames: ['component'], registers });
    this.eventsDropped = new Counter({ name: 'tandem_router_events_dropped_total', help: 'KV events ignored (malformed, unknown worker, test hook)', labelNames: ['component', 'reason'], registers });
    this.gapsRecovered = new Counter({ name: 'tandem_router_gaps_recovered_total', help: 'Recovery answers applied: replays of missing event ranges and full dumps', labelNames: ['component', 'kind'], registers });
    this.recoveryFailures = new Counter({ name: 'tandem_router_recovery_failures_total', help: 'Replay/dump calls that failed (retried on the next tick)', labelNames: ['component', 'kind'], registers });
    this.indexBlocks = new Gauge({ name: 'tandem_router_index_blocks', help: '(worker, block) entries in the prefix index', labelNames: ['component'], registers });
    this.workers = new Gauge({ name: 'tandem_router_workers', help: 'Workers the router follows', labelNames: ['component'], registers });
    this.activeSequences = new Gauge({ name: 'tandem_router_active_sequences', help: 'Sequences booked and not yet finished (all replicas when synced)', labelNames: ['component'], registers });
    this.workerActiveBlocks = new Gauge({ name: 'tandem_router_worker_active_blocks', help: "Router's estimate of each worker's active KV blocks", labelNames: ['component', 'worker'], registers });
    this.syncMessages = new Counter({ name: 'tandem_router_sync_messages_total', help: 'router_sync messages published (out) and applied (in)', labelNames: ['component', 'direction'], registers });
    this.saturated = new Counter({
      name: 'tandem_router_saturated_decisions_total',
      help: 'Requests routed while every worker was over its load threshold: sent to the least-bad one, to wait in its queue',
      labelNames: ['component'],
      registers,
    });
    this.loraPrefetches = new Counter({
      name: 'tandem_router_lora_prefetches_total',
      help: 'Adapter loads asked of a worker ahead of need (the router would have sent it there, or the adapter is popular enough for more holders)',
      labelNames: ['component'],
      registers,
    });
    this.refused = new Counter({
      name: 'tandem_router_refused_requests_total',
      help: 'Requests refused (429 + Retry-After) under the opt-in busy threshold: every worker stayed busy for the wait bound (busy_wait) or the wait queue was full (queue_full)',
      labelNames: ['component', 'reason'],
      registers,
    });
  }

  private static readonly byRegistry = new WeakMap<Registry, RouterMetrics>();

  static for(registry: Registry): RouterMetrics {
    let m = RouterMetrics.byRegistry.get(registry);
    if (m === undefined) RouterMetrics.byRegistry.set(registry, (m = new RouterMetrics(registry)));
    return m;
  }
}
