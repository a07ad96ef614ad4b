/**
 * `KvRouterService`: one `KvRouter` (the pure core) wired to the runtime for one worker
 * component. It is the only place where the router touches I/O:
 *
 *   discovery {ns}/{component}/kv_events instances ─▶ addWorker / removeWorker
 *   event plane kv_events (KvEvent[] batches)      ─▶ applyEvent ─┐
 *   event plane load_metrics (the process's LoadFeed) ─▶ latest LoadMetrics per worker
 *   model cards of the component (card feed)       ─▶ KV pool size per worker (overload check
 *                                                     before a worker has reported any load);
 *                                                     the model's parameter counts (latency cost)
 *   RecoveryAction (replay / dump) ─▶ request plane {component}/kv_events, direct to the worker
 *                                   ─▶ applyReplay / applyDump ─▶ more actions, if any
 *   timer (tickIntervalMs)          ─▶ tick: expiry, re-asking unanswered recoveries, gauges
 *   route / book / firstToken / finished ─▶ the core's one admission path; every booking change
 *                                           goes to `publishSync` (router_sync) when given
 *
 * Events from a worker the service does not follow (not, or no longer, listed in discovery)
 * are dropped: the dump asked for on discovery covers them, and a dead worker must not come
 * back through a late event.
 */
import {
  KV_EVENTS_ENDPOINT,
  TOPICS,
  type InstanceId,
  type KvDumpResponse,
  type KvEvent,
  type KvRecoveryRequest,
  type KvReplayResponse,
  type LoadMetrics,
  type RouterSyncMessage,
} from '../../proto/wire.js';
import { ModelCardFeed } from '../../runtime/index.js';
import type { Component, DistributedRuntime } from '../../runtime/index.js';
import type { EndpointClient } from '../../runtime/index.js';
import type { Subscription } from '../../runtime/index.js';
import type { Logger } from '../../runtime/index.js';
import type { ActiveSequenceUpdate, WorkerActiveLoad } from '../active-sequences.js';
import { KvRouter, type KvRouterConfig, type RouteDecision, type RouteRequest, type RouteResult, type WorkerCandidate } from '../kv-router.js';
import type { RecoveryAction } from '../recovery-protocol.js';
import { LoadFeed } from './load-feed.js';
import { RouterMetrics } from './router-metrics.js';

export interface KvRouterServiceOptions {
  namespace: string;
  /** Worker component to route for, e.g. `backend`. */
  component: string;
  /** KV block size of the workers (model card `kvBlockSize`). */
  blockSize: number;
  /** The process's card feed (KV pool sizes); the service starts and closes its own without it. */
  cards?: ModelCardFeed;
  /** The process's `load_metrics` feed (shared with its dashboard); the service opens its own without it. */
  loads?: LoadFeed;
  router?: Partial<KvRouterConfig>;
  /** Housekeeping period (expiry, recovery retries, gauges). */
  tickIntervalMs?: number;
  /** Deadline of one replay/dump call. */
  recoveryTimeoutMs?: number;
  /** Called with every local booking change, for router_sync. */
  publishSync?: (updates: ActiveSequenceUpdate[]) => void;
  /** Test hook: return true to drop a live event as if the event plane lost it. */
  dropEvent?: (event: KvEvent) => boolean;
  /** Milliseconds clock; defaults to Date.now. */
  clock?: () => number;
  /**
   * A load report older than this (by receipt) is not used: workers report per engine step,
   * so an idle worker's last report can say "full" for ever. The router's bookings stand in.
   */
  loadStaleMs?: number;
}

export const KV_ROUTER_SERVICE_DEFAULTS = {
  tickIntervalMs: 250,
  recoveryTimeoutMs: 5_000,
  /** Unanswered recovery requests are re-sent after this (the core's sequencer option). */
  retryAfterMs: 1_000,
  loadStaleMs: 1_000,
};

export class KvRouterService {
  readonly router: KvRouter;
  private readonly members = new Set<InstanceId>();
  private readonly loads = new Map<InstanceId, LoadMetrics>();
  /** When each worker's latest load report arrived (our clock, not the worker's). */
  private readonly loadsAt = new Map<InstanceId, number>();
  /** KV pool size per worker, from its model card. */
  private readonly totalBlocks = new Map<InstanceId, number>();
  private unsubscribeCards: (() => void) | undefined;
  private ownedFeed: ModelCardFeed | undefined;
  private ownedLoads: LoadFeed | undefined;
  private stopLoads: (() => void) | undefined;
  private readonly inflight = new Map<string, Promise<void>>();
  private readonly subscriptions: Subscription[] = [];
  private readonly metrics: RouterMetrics;
  private readonly labels: { component: string };
  private readonly clock: () => number;
  private readonly log: Logger;
  private kvClient: EndpointClient | undefined;
  private unwatch: (() => void) | undefined;
  private timer: NodeJS.Timeout | undefined;
  private reportedEventsApplied = 0;
  private closed = false;

  private constructor(
    private readonly runtime: DistributedRuntime,
    readonly options: KvRouterServiceOptions,
  ) {
    this.router = new KvRouter({
      blockSize: options.blockSize,
      ...options.router,
      sequencer: { retryAfterMs: KV_ROUTER_SERVICE_DEFAULTS.retryAfterMs, ...options.router?.sequencer },
    });
    this.metrics = RouterMetrics.for(runtime.metrics);
    this.labels = { component: options.component };
    this.clock = options.clock ?? Date.now;
    this.log = runtime.logger.child({ router: options.component });
  }

  static async start(runtime: DistributedRuntime, options: KvRouterServiceOptions): Promise<KvRouterService> {
    const service = new KvRouterService(runtime, options);
    try {
      await service.open();
    } catch (err) {
      await service.close();
      throw err;
    }
    return service;
  }

  get component(): string {
    return this.options.component;
  }

  /** Workers currently followed (listed in discovery). */
  workers(): InstanceId[] {
    return [...this.members].sort();
  }

  /** Pick and book a worker among `candidateIds` (default: every followed worker). */
  route(req: RouteRequest, candidateIds?: readonly InstanceId[]): RouteResult {
    const now = this.clock();
    this.router.expire(now);
    const result = this.router.select(req, this.candidates(candidateIds ?? this.workers()));
    if (result.kind === 'routed') {
      this.book(result.decision, now);
      this.metrics.overlapBlocks.observe(this.labels, result.decision.overlapBlocks);
      if (result.decision.saturated === true) this.metrics.saturated.inc(this.labels);
      // Latency cost: the rows with their predictions (the dashboard shows them beside the measured TTFT).
      if (this.router.latency !== undefined) this.log.debug({ requestId: req.requestId, worker: result.decision.instanceId, costs: result.decision.costs }, 'routed by predicted latency');
    }
    this.metrics.decisions.inc({ ...this.labels, result: result.kind });
    return result;
  }

  /**
   * Book a request on a worker chosen elsewhere (a pinned request, a migration target):
   * the booking carries the real overlap, but the worker is not checked for load.
   */
  bookOn(req: RouteRequest, instanceId: InstanceId): RouteDecision | undefined {
    const result = this.router.select(req, [{ instanceId }], { pinned: true });
    if (result.kind !== 'routed') return undefined;
    this.book(result.decision, this.clock());
    this.metrics.decisions.inc({ ...this.labels, result: 'pinned' });
    return result.decision;
  }

  firstToken(requestId: string): void {
    this.share(this.router.onFirstToken(requestId, this.clock()));
  }

  /** Stream ended, failed or was cancelled; also the rollback of a booking never dispatched. */
  finished(requestId: string, outputTokens?: number): void {
    this.share(this.router.onFinished(requestId, this.clock(), outputTokens));
  }

  /** Another replica's bookings (router_sync). */
  applySync(message: RouterSyncMessage): number {
    const applied = this.router.applySync(message, this.clock());
    if (applied > 0) this.metrics.syncMessages.inc({ ...this.labels, direction: 'in' });
    return applied;
  }

  load(workerId: InstanceId): WorkerActiveLoad {
    return this.router.workerLoad(workerId);
  }

  /** Latest load report of a worker, while it is current (see `loadStaleMs`). */
  reportedLoad(workerId: InstanceId): LoadMetrics | undefined {
    const at = this.loadsAt.get(workerId);
    if (at === undefined || at < this.clock() - (this.options.loadStaleMs ?? KV_ROUTER_SERVICE_DEFAULTS.loadStaleMs)) return undefined;
    return this.loads.get(workerId);
  }

  /** Sequence hashes the index believes `workerId` holds (event mode). */
  blocksOf(workerId: InstanceId): string[] {
    return this.router.eventIndex?.blocksOf(workerId) ?? [];
  }

  /** Resolves when no replay/dump call is in flight (tests, start-up readiness). */
  async settled(): Promise<void> {
    while (this.inflight.size > 0) await Promise.all([...this.inflight.values()]);
  }

  /** Housekeeping; runs on the timer, callable directly by tests. */
  tick(): void {
    if (this.closed) return;
    this.execute(this.router.tick(this.clock()));
    const stats = this.router.stats();
    if (stats.eventsApplied > this.reportedEventsApplied) {
      this.metrics.eventsApplied.inc(this.labels, stats.eventsApplied - this.reportedEventsApplied);
      this.reportedEventsApplied = stats.eventsApplied;
    }
    this.metrics.indexBlocks.set(this.labels, stats.index.entries);
    this.metrics.workers.set(this.labels, this.members.size);
    this.metrics.activeSequences.set(this.labels, stats.activeSequences);
    for (const id of this.members) this.metrics.workerActiveBlocks.set({ ...this.labels, worker: id }, this.router.workerLoad(id).activeBlocks);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    this.unwatch?.();
    this.unsubscribeCards?.();
    this.stopLoads?.();
    this.ownedFeed?.close();
    await this.ownedLoads?.close();
    this.kvClient?.close();
    await Promise.all(this.subscriptions.map((s) => s.close().catch(() => undefined)));
  }

  private async open(): Promise<void> {
    const { namespace, component: name } = this.options;
    const component: Component = this.runtime.namespace(namespace).component(name);
    const useEvents = this.router.config.useKvEvents;
    if (useEvents) {
      this.subscriptions.push(await component.subscribe<unknown>(TOPICS.kvEvents, (e) => this.onKvEvents(e.payload)));
    }
    const loads = this.options.loads ?? (this.ownedLoads = new LoadFeed(this.runtime, namespace, this.log));
    this.stopLoads = await loads.listen(name, (m) => this.onLoad(m));
    const cards = this.options.cards ?? (this.ownedFeed = await ModelCardFeed.start(this.runtime.discovery, namespace, this.log));
    this.unsubscribeCards = cards.subscribe(
      (e) => {
        if (e.type === 'removed') this.totalBlocks.delete(e.entry.instanceId);
        else this.totalBlocks.set(e.entry.instanceId, e.entry.card.totalKvBlocks);
        // The model's size: a latency cost without a profile charges a MoE its active share.
        if (e.type !== 'removed' && e.entry.card.parameters !== undefined) this.router.useModelParameters(e.entry.card.parameters);
      },
      { component: name },
    );
    // Workers serve `generate` and `kv_events` under one lease: the kv_events instance set is
    // the set of workers, and the same client carries replay and dump calls.
    this.kvClient = await component.endpoint(KV_EVENTS_ENDPOINT).client();
    this.unwatch = this.kvClient.onChange((ids) => this.onMembers(ids));
    this.onMembers(this.kvClient.instanceIds());
    this.timer = setInterval(() => this.tick(), this.options.tickIntervalMs ?? KV_ROUTER_SERVICE_DEFAULTS.tickIntervalMs);
    this.timer.unref();
  }

  private candidates(ids: readonly InstanceId[]): WorkerCandidate[] {
    const out: WorkerCandidate[] = new Array(ids.length);
    const freshAfter = this.clock() - (this.options.loadStaleMs ?? KV_ROUTER_SERVICE_DEFAULTS.loadStaleMs);
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i]!;
      const c: WorkerCandidate = { instanceId: id };
      const load = this.loads.get(id);
      if (load !== undefined && this.loadsAt.get(id)! >= freshAfter) c.load = load;
      const total = this.totalBlocks.get(id);
      if (total !== undefined) c.totalBlocks = total;
      out[i] = c;
    }
    return out;
  }

  private book(decision: RouteDecision, now: number): void {
    this.share(this.router.admit(decision, now));
  }

  private share(update: ActiveSequenceUpdate | undefined): void {
    if (update === undefined || this.options.publishSync === undefined) return;
    this.options.publishSync([update]);
    this.metrics.syncMessages.inc({ ...this.labels, direction: 'out' });
  }

  private onMembers(ids: readonly InstanceId[]): void {
    if (this.closed) return;
    const now = this.clock();
    const listed = new Set(ids);
    for (const id of [...this.members]) {
      if (listed.has(id)) continue;
      this.members.delete(id);
      this.loads.delete(id);
      this.loadsAt.delete(id);
      this.router.removeWorker(id);
      this.metrics.workerActiveBlocks.remove({ ...this.labels, worker: id });
      this.log.info({ worker: id }, 'worker left: its blocks leave the index');
    }
    for (const id of listed) {
      if (this.members.has(id)) continue;
      this.members.add(id);
      this.log.debug({ worker: id }, 'worker joined: asking for its block set');
      this.execute(this.router.addWorker(id, now));
    }
  }

  private onKvEvents(payload: unknown): void {
    if (this.closed) return;
    const batch = Array.isArray(payload) ? payload : [payload];
    const now = this.clock();
    for (const e of batch) {
      if (!isKvEvent(e)) {
        this.metrics.eventsDropped.inc({ ...this.labels, reason: 'malformed' });
        continue;
      }
      if (!this.members.has(e.workerId)) {
        this.metrics.eventsDropped.inc({ ...this.labels, reason: 'unknown_worker' });
        continue;
      }
      if (this.options.dropEvent?.(e)) {
        this.metrics.eventsDropped.inc({ ...this.labels, reason: 'test_hook' });
        continue;
      }
      this.execute(this.router.applyEvent(e, now));
    }
  }

  private onLoad(m: LoadMetrics): void {
    if (this.closed || !this.members.has(m.workerId)) return;
    this.loads.set(m.workerId, m);
    this.loadsAt.set(m.workerId, this.clock());
  }

  private execute(actions: readonly RecoveryAction[]): void {
    for (const a of actions) {
      const key = a.type === 'request_dump' ? `${a.workerId}:dump` : `${a.workerId}:replay:${a.fromEventId}-${a.toEventId}`;
      if (this.inflight.has(key) || this.closed) continue;
      const call = this.recover(a).finally(() => this.inflight.delete(key));
      this.inflight.set(key, call);
    }
  }

  /** One replay/dump round trip. Failures are left to the sequencer's retry on tick. */
  private async recover(action: RecoveryAction): Promise<void> {
    const kind = action.type === 'request_dump' ? 'dump' : 'replay';
    const worker = action.workerId;
    const client = this.kvClient;
    if (client === undefined || client.instance(worker) === undefined) return;
    const request: KvRecoveryRequest = action.type === 'request_dump' ? { type: 'dump' } : { type: 'replay', fromEventId: action.fromEventId, toEventId: action.toEventId };
    try {
      let answer: unknown;
      const timeoutMs = this.options.recoveryTimeoutMs ?? KV_ROUTER_SERVICE_DEFAULTS.recoveryTimeoutMs;
      for await (const item of client.generate<KvRecoveryRequest, unknown>(request, { routing: { mode: 'direct', instanceId: worker }, timeoutMs })) answer = item;
      if (this.closed || !this.members.has(worker)) return;
      const now = this.clock();
      let next: RecoveryAction[];
      if (kind === 'dump') {
        if (!isDump(answer, worker)) throw new Error('malformed dump answer');
        next = this.router.applyDump(answer, now);
      } else {
        if (!isReplay(answer, worker)) throw new Error('malformed replay answer');
        next = this.router.applyReplay(answer, now);
      }
      this.metrics.gapsRecovered.inc({ ...this.labels, kind });
      this.log.debug({ worker, kind }, 'kv recovery applied');
      this.execute(next);
    } catch (err) {
      if (this.closed) return;
      this.metrics.recoveryFailures.inc({ ...this.labels, kind });
      this.log.debug({ err, worker, kind }, 'kv recovery call failed; retrying on tick');
    }
  }
}

function isKvEvent(v: unknown): v is KvEvent {
  const e = v as Partial<KvEvent> | null;
  return typeof e === 'object' && e !== null && typeof e.workerId === 'string' && Number.isInteger(e.eventId) && typeof e.data === 'object' && e.data !== null;
}

function isDump(v: unknown, worker: InstanceId): v is KvDumpResponse {
  const d = v as Partial<KvDumpResponse> | null;
  return typeof d === 'object' && d !== null && d.workerId === worker && Number.isInteger(d.nextEventId) && Array.isArray(d.events);
}

function isReplay(v: unknown, worker: InstanceId): v is KvReplayResponse {
  const r = v as Partial<{ type: string; workerId: string; events: unknown; oldestEventId: unknown }> | null;
  if (typeof r !== 'object' || r === null || r.workerId !== worker) return false;
  return (r.type === 'events' && Array.isArray(r.events)) || (r.type === 'too_old' && typeof r.oldestEventId === 'number');
}
