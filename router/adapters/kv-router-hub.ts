/**
 * `KvRouterHub`: the KV routers of one process, one `KvRouterService` per worker component
 * (started on first use), and the `router_sync` link between replicas.
 *
 * Sync: every local booking change is batched per component and published, once per event
 * loop turn, as a `RouterSyncEnvelope` on `{ns}/{syncComponent}/router_sync`. The envelope
 * names the component (the core's `RouterSyncMessage` does not), so one topic serves every
 * component a replica routes for. A replica that hears a component it does not route for yet
 * starts its router, so its load estimate already counts its peers' bookings when its first
 * request comes.
 *
 * With the direct event plane a subscriber only hears processes registered under the topic's
 * component; `announceSync` registers a no-op endpoint there for processes (frontends with an
 * embedded router) that serve nothing else under it.
 */
import { SYNC_PRESENCE_ENDPOINT, TOPICS, type RouterSyncEnvelope } from '../../proto/wire.js';
import { ModelCardFeed } from '../../runtime/index.js';
import type { DistributedRuntime, ServedEndpoint } from '../../runtime/index.js';
import type { Subscription } from '../../runtime/index.js';
import type { ActiveSequenceUpdate } from '../active-sequences.js';
import type { KvRouterConfig, RouteDecision } from '../kv-router.js';
import { KvRouterService, type KvRouterServiceOptions } from './kv-router-service.js';
import { LoadFeed } from './load-feed.js';

export const DEFAULT_SYNC_COMPONENT = 'router';

export interface KvRouterHubOptions {
  namespace: string;
  router?: Partial<KvRouterConfig>;
  replicaSync?: boolean;
  syncComponent?: string;
  announceSync?: boolean;
  /**
   * The process's card feed, shared by every service (a frontend passes its own). Without
   * it the hub starts one on first use and closes it with the hub (the standalone router).
   */
  cards?: ModelCardFeed;
  /** Passed to every service (tick period, test hooks). */
  service?: Pick<KvRouterServiceOptions, 'tickIntervalMs' | 'recoveryTimeoutMs' | 'dropEvent' | 'clock'>;
}

/** Told of every routed request (the dashboard); must be cheap and must not throw. */
export type DecisionListener = (component: string, decision: RouteDecision) => void;

export class KvRouterHub {
  /** Routing-decision listeners; empty (the usual case) costs one size check per request. */
  readonly decisionListeners = new Set<DecisionListener>();
  /**
   * The process's `load_metrics` feed: every service reads it, and so does a frontend's
   * dashboard, so each worker component is subscribed once.
   */
  readonly loads: LoadFeed;
  private readonly services = new Map<string, Promise<KvRouterService>>();
  private readonly ready = new Map<string, KvRouterService>();
  private readonly outbox = new Map<string, ActiveSequenceUpdate[]>();
  private flushScheduled = false;
  private subscription: Subscription | undefined;
  private presence: ServedEndpoint | undefined;
  private ownedFeed: Promise<ModelCardFeed> | undefined;
  private closed = false;

  private constructor(
    readonly runtime: DistributedRuntime,
    readonly options: KvRouterHubOptions,
  ) {
    this.loads = new LoadFeed(runtime, options.namespace);
  }

  static async start(runtime: DistributedRuntime, options: KvRouterHubOptions): Promise<KvRouterHub> {
    const hub = new KvRouterHub(runtime, options);
    if (options.replicaSync) {
      const comp = runtime.namespace(options.namespace).component(hub.syncComponent);
      hub.subscription = await comp.subscribe<unknown>(TOPICS.routerSync, (e) => hub.onSync(e.payload));
      if (options.announceSync) {
        hub.presence = await comp.endpoint(SYNC_PRESENCE_ENDPOINT).serve(async function* () {
          // Presence only: lets direct-plane peers find this process's router_sync stream.
        });
      }
    }
    return hub;
  }

  get syncComponent(): string {
    return this.options.syncComponent ?? DEFAULT_SYNC_COMPONENT;
  }

  /** Replica id used in router_sync (the runtime's instance id unless configured). */
  get replicaId(): string {
    return this.options.router?.replicaId ?? this.runtime.instanceId;
  }

  /** The router for `component`, started on first use. The first caller's block size wins. */
  service(component: string, blockSize: number): Promise<KvRouterService> {
    let pending = this.services.get(component);
    if (pending === undefined) {
      pending = this.cards().then((cards) => KvRouterService.start(this.runtime, {
        namespace: this.options.namespace,
        component,
        blockSize,
        cards,
        loads: this.loads,
        router: { ...this.options.router, replicaId: this.replicaId },
        ...this.options.service,
        ...(this.options.replicaSync ? { publishSync: (u: ActiveSequenceUpdate[]) => this.enqueue(component, u) } : {}),
      })).then((s) => {
        this.ready.set(component, s);
        return s;
      });
      // A failed start is retried by the next caller.
      pending.catch(() => this.services.delete(component));
      this.services.set(component, pending);
    }
    return pending;
  }

  /** Called by whoever routes through a service of this hub (local backend, router server). */
  reportDecision(component: string, decision: RouteDecision): void {
    if (this.decisionListeners.size === 0) return;
    for (const l of this.decisionListeners) l(component, decision);
  }

  /** Index size and recovered event gaps, summed over the started services (dashboard). */
  indexStats(): { indexBlocks: number; gapRecoveries: number } {
    let indexBlocks = 0;
    let gapRecoveries = 0;
    for (const s of this.ready.values()) {
      const st = s.router.stats();
      indexBlocks += st.index.entries;
      gapRecoveries += st.sequencer.gapsRecovered;
    }
    return { indexBlocks, gapRecoveries };
  }

  /** The router for `component` if it has started (no waiting). */
  started(component: string): KvRouterService | undefined {
    return this.ready.get(component);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.flush();
    await this.presence?.stop().catch(() => undefined);
    await this.subscription?.close().catch(() => undefined);
    const all = await Promise.allSettled([...this.services.values()]);
    await Promise.all(all.map((r) => (r.status === 'fulfilled' ? r.value.close() : undefined)));
    (await this.ownedFeed?.catch(() => undefined))?.close();
    await this.loads.close();
  }

  /** The shared card feed: the given one, or one started here on first use. */
  private cards(): Promise<ModelCardFeed> {
    if (this.options.cards !== undefined) return Promise.resolve(this.options.cards);
    if (this.ownedFeed === undefined) {
      const started = ModelCardFeed.start(this.runtime.discovery, this.options.namespace, this.runtime.logger);
      // A failed start is retried by the next service.
      started.catch(() => {
        if (this.ownedFeed === started) this.ownedFeed = undefined;
      });
      this.ownedFeed = started;
    }
    return this.ownedFeed;
  }

  private enqueue(component: string, updates: ActiveSequenceUpdate[]): void {
    let box = this.outbox.get(component);
    if (box === undefined) this.outbox.set(component, (box = []));
    for (const u of updates) box.push(u);
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(() => this.flush());
  }

  private flush(): void {
    this.flushScheduled = false;
    const comp = this.runtime.namespace(this.options.namespace).component(this.syncComponent);
    for (const [component, updates] of this.outbox) {
      const service = this.ready.get(component);
      if (service === undefined || updates.length === 0) continue;
      const envelope: RouterSyncEnvelope = { component, blockSize: service.options.blockSize, message: service.router.syncMessage(updates) };
      void comp.publish(TOPICS.routerSync, envelope).catch((err: unknown) => this.runtime.logger.debug({ err }, 'router_sync publish failed'));
    }
    this.outbox.clear();
  }

  private onSync(payload: unknown): void {
    if (this.closed) return;
    const env = payload as Partial<RouterSyncEnvelope> | null;
    if (typeof env !== 'object' || env === null || typeof env.component !== 'string' || typeof env.message !== 'object' || env.message === null) return;
    if (env.message.replicaId === this.replicaId) return;
    const message = env.message;
    const ready = this.ready.get(env.component);
    if (ready !== undefined) {
      ready.applySync(message);
      return;
    }
    const blockSize = Number.isInteger(env.blockSize) && env.blockSize! > 0 ? env.blockSize! : 16;
    this.service(env.component, blockSize).then(
      (s) => s.applySync(message),
      () => undefined,
    );
  }
}
