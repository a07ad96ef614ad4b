/**
 * `--router-mode kv`: a `WorkerSelector` over the KV router (router/adapters), embedded in
 * this process or delegated to standalone `runtime router` replicas (`--router-endpoint`).
 *
 *   select(route)        → backend.route: pick AND book in one step, so a burst of concurrent
 *                          requests sees each other's bookings (the hot-prefix case)
 *   onRouted(route, id)  → confirms that booking; a request dispatched elsewhere (pinned by
 *                          header, or a migration target) is booked on the worker it went to
 *   onFirstToken         → prefill done
 *   onFinished           → free (also the rollback of a failed dispatch)
 *
 * A booking never confirmed within `unconfirmedTimeoutMs` (the HTTP exchange died between
 * prepare and dispatch) is released.
 *
 * Backpressure (docs/design.md "Router"): by default the router never refuses: with every
 * worker over its load threshold the least-bad one gets the request and queues it, as
 * round-robin's would. Only under the opt-in refusal (`--router-busy-threshold`,
 * `--router-max-waiting`) may it answer all busy; then a request waits, at most `busyWaitMs` and
 * with at most `maxQueued` waiting, for a booking to end (or for load reports to drop), and then
 * fails with `AllWorkersBusyError` (429 + Retry-After), counted in
 * `tandem_router_refused_requests_total{reason}`. Each model is routed by the component and
 * block size of its model card, read from the process's card feed
 * (runtime/discovery/model-card-feed.ts).
 */
import { cardLoras } from './lora/served-adapters.js';
import { ROUTE_ENDPOINT, servesGeneration, type InstanceId, type RouteTarget } from '../proto/wire.js';
import { KvRouterHub } from '../router/adapters/index.js';
import { loadKvRouterConfig, type KvRouterFlags } from '../router/adapters/index.js';
import { LocalKvBackend, RemoteKvBackend, RouterMetrics, type KvRoutingBackend } from '../router/adapters/index.js';
import { AllWorkersBusyError } from '../router/index.js';
import type { Discovery } from '../runtime/index.js';
import { ModelCardFeed } from '../runtime/index.js';
import type { DistributedRuntime } from '../runtime/index.js';
import { ConfigError } from '../runtime/errors.js';
import { RoundRobinSelector, type RouteRequest, type WorkerSelector } from './routing.js';

export interface KvSelectorOptions {
  backend: KvRoutingBackend;
  /** The process's card feed. Without it, `discovery` and `namespace` start one owned here. */
  cards?: ModelCardFeed;
  discovery?: Discovery;
  namespace?: string;
  unconfirmedTimeoutMs?: number;
  /** How long a request may wait for a worker below its load threshold. */
  busyWaitMs?: number;
  /** Requests that may wait at once; more are refused at once. */
  maxQueued?: number;
  clock?: () => number;
  /** Where refusals are counted (`tandem_router_refused_requests_total`); none: not counted. */
  metrics?: RouterMetrics;
}

/** A worker to load an adapter on ahead of need (the router's `loraPrefetch`), with what to load. */
export interface LoraPrefetch {
  model: string;
  instanceId: InstanceId;
  lora: string;
  path: string;
}

/** One prefetch per (adapter, worker) in this long: the worker's card lists it well before. */
const LORA_PREFETCH_COOLDOWN_MS = 30_000;

interface Booking {
  target: RouteTarget;
  instanceId: InstanceId;
  /** Leading blocks of the prompt the router counted as cached on the worker. */
  overlapBlocks: number;
  confirmed: boolean;
  atMs: number;
}

const DEFAULT_UNCONFIRMED_TIMEOUT_MS = 30_000;
const DEFAULT_BUSY_WAIT_MS = 10_000;
const DEFAULT_MAX_QUEUED = 1024;
/** Re-check while waiting even if no booking ends: load reports may change on their own. */
const BUSY_RECHECK_MS = 50;

export class KvSelector implements WorkerSelector {
  readonly mode = 'kv' as const;
  private readonly bookings = new Map<string, Booking>();
  /** model → card key → routing target. */
  private readonly targets = new Map<string, Map<string, RouteTarget>>();
  /** Models whose cards are not known here yet (a moment after start): plain round-robin. */
  private readonly fallback = new RoundRobinSelector();
  private readonly clock: () => number;
  /** Requests waiting for a worker below threshold; woken when a booking ends. */
  private readonly waiters = new Set<() => void>();
  private unsubscribe: (() => void) | undefined;
  /** A feed this selector started itself (no shared one given), closed with it. */
  private ownedFeed: ModelCardFeed | undefined;
  private sweeper: NodeJS.Timeout | undefined;
  /** Multi-LoRA: instance → adapters its card lists (the router charges the others a load). */
  private readonly loraHolders = new Map<InstanceId, Set<string>>();
  /**
   * Multi-LoRA: asked to load an adapter on a worker ahead of need (the frontend wires it to the
   * workers' `lora_admin` endpoint); unset, prefetches are dropped.
   */
  onLoraPrefetch: ((p: LoraPrefetch) => void) | undefined;
  /** `${lora}\0${instance}` → when it was last asked for. */
  private readonly prefetched = new Map<string, number>();

  private constructor(private readonly options: KvSelectorOptions) {
    this.clock = options.clock ?? Date.now;
  }

  static async start(options: KvSelectorOptions): Promise<KvSelector> {
    const selector = new KvSelector(options);
    let cards = options.cards;
    if (cards === undefined) {
      if (options.discovery === undefined || options.namespace === undefined) throw new ConfigError('KvSelector needs a card feed, or a discovery and a namespace');
      cards = selector.ownedFeed = await ModelCardFeed.start(options.discovery, options.namespace);
    }
    // Prefill cards are routed by the prefill router, not here.
    selector.unsubscribe = cards.subscribe(
      (e) => {
        const { key, model } = e.entry;
        if (e.type === 'removed') selector.loraHolders.delete(e.entry.instanceId);
        else selector.loraHolders.set(e.entry.instanceId, new Set(cardLoras(e.entry.card).map((l) => l.name)));
        let targets = selector.targets.get(model);
        if (e.type === 'removed' || e.type === 'changed') {
          const previous = e.type === 'removed' ? e.entry : e.previous;
          const old = selector.targets.get(previous.model);
          old?.delete(key);
          if (old?.size === 0) selector.targets.delete(previous.model);
          if (e.type === 'removed') return;
          targets = selector.targets.get(model);
        }
        // Embedding workers share the model name but route nothing here (frontend/embeddings/).
        if (!servesGeneration(e.entry.card)) return;
        if (targets === undefined) selector.targets.set(model, (targets = new Map()));
        targets.set(key, { component: e.entry.card.component, blockSize: e.entry.card.kvBlockSize });
      },
      { roles: ['agg', 'decode'] },
    );
    const timeout = options.unconfirmedTimeoutMs ?? DEFAULT_UNCONFIRMED_TIMEOUT_MS;
    selector.sweeper = setInterval(() => selector.releaseUnconfirmed(timeout), Math.max(100, Math.floor(timeout / 4)));
    selector.sweeper.unref();
    return selector;
  }

  get backend(): KvRoutingBackend {
    return this.options.backend;
  }

  async select(route: RouteRequest, candidates: readonly InstanceId[]): Promise<InstanceId | undefined> {
    const target = this.targetOf(route.model);
    if (target === undefined) return this.fallback.select(route, candidates);
    const { requestId, tokenIds } = route.request;
    // A second select for the same request is a migration: the failed attempt's booking goes.
    this.release(requestId);
    const routeOptions = {
      ...(route.noOverlapCredit ? { noOverlapCredit: true } : {}),
      ...(route.request.loraId !== undefined ? { loraId: route.request.loraId } : {}),
      ...(route.request.lora !== undefined ? { loraResident: candidates.filter((id) => this.loraHolders.get(id)?.has(route.request.lora!) === true) } : {}),
    };
    let outcome = await this.options.backend.route(target, requestId, tokenIds, candidates, routeOptions);
    if (outcome.kind === 'all_busy') {
      const deadline = this.clock() + (this.options.busyWaitMs ?? DEFAULT_BUSY_WAIT_MS);
      if (this.waiters.size >= (this.options.maxQueued ?? DEFAULT_MAX_QUEUED)) throw this.refused(target, 'queue_full', outcome.retryAfterMs);
      while (outcome.kind === 'all_busy') {
        const left = deadline - this.clock();
        if (left <= 0) throw this.refused(target, 'busy_wait', outcome.retryAfterMs);
        await this.waitForCapacity(Math.min(left, BUSY_RECHECK_MS));
        outcome = await this.options.backend.route(target, requestId, tokenIds, candidates, routeOptions);
      }
    }
    if (outcome.kind === 'no_candidates') return undefined;
    this.bookings.set(requestId, { target, instanceId: outcome.instanceId, overlapBlocks: outcome.overlapBlocks, confirmed: false, atMs: this.clock() });
    if (outcome.loraPrefetch !== undefined) this.prefetchLora(route, target, outcome.loraPrefetch);
    return outcome.instanceId;
  }

  onRouted(route: RouteRequest, instanceId: InstanceId): void {
    const { requestId, tokenIds } = route.request;
    const booking = this.bookings.get(requestId);
    if (booking !== undefined && booking.instanceId === instanceId) {
      booking.confirmed = true;
      return;
    }
    const target = booking?.target ?? this.targetOf(route.model);
    if (target === undefined) return;
    this.release(requestId);
    this.options.backend.book(target, requestId, tokenIds, instanceId);
    this.bookings.set(requestId, { target, instanceId, overlapBlocks: 0, confirmed: true, atMs: this.clock() });
  }

  /**
   * Prompt tokens the router counted as already cached on `instanceId` for this request (the
   * prefill router's "uncached part"); undefined when this request was not routed there here.
   */
  overlapTokens(route: RouteRequest, instanceId: InstanceId): number | undefined {
    const booking = this.bookings.get(route.request.requestId);
    if (booking === undefined || booking.instanceId !== instanceId) return undefined;
    return Math.min(booking.overlapBlocks * booking.target.blockSize, route.request.tokenIds.length);
  }

  onFirstToken(route: RouteRequest, instanceId: InstanceId): void {
    const booking = this.bookings.get(route.request.requestId);
    if (booking?.instanceId === instanceId) this.options.backend.firstToken(booking.target, route.request.requestId);
  }

  onFinished(route: RouteRequest, instanceId: InstanceId, outputTokens?: number): void {
    const booking = this.bookings.get(route.request.requestId);
    // After a migration the request is already booked elsewhere: the old attempt has nothing left.
    if (booking?.instanceId === instanceId) this.release(route.request.requestId, outputTokens);
  }

  /** Requests booked and not finished, as this frontend sees them. */
  get inflight(): number {
    return this.bookings.size;
  }

  /** Requests waiting for capacity now. */
  get queued(): number {
    return this.waiters.size;
  }

  async close(): Promise<void> {
    for (const wake of [...this.waiters]) wake();
    if (this.sweeper) clearInterval(this.sweeper);
    this.unsubscribe?.();
    this.ownedFeed?.close();
    await this.options.backend.close();
  }

  /** Passes a router's prefetch on, at most once per (adapter, worker) per cooldown, and never to a holder. */
  private prefetchLora(route: RouteRequest, target: RouteTarget, instanceId: InstanceId): void {
    const { lora, loraPath } = route.request;
    if (this.onLoraPrefetch === undefined || lora === undefined || loraPath === undefined) return;
    if (this.loraHolders.get(instanceId)?.has(lora) === true) return;
    const key = `${lora}\0${instanceId}`;
    const now = this.clock();
    const last = this.prefetched.get(key);
    if (last !== undefined && now - last < LORA_PREFETCH_COOLDOWN_MS) return;
    this.prefetched.set(key, now);
    if (this.prefetched.size > 4096) for (const [k, at] of this.prefetched) if (now - at >= LORA_PREFETCH_COOLDOWN_MS) this.prefetched.delete(k);
    this.options.metrics?.loraPrefetches.inc({ component: target.component });
    this.onLoraPrefetch({ model: route.model, instanceId, lora, path: loraPath });
  }

  private refused(target: RouteTarget, reason: 'busy_wait' | 'queue_full', retryAfterMs: number): AllWorkersBusyError {
    this.options.metrics?.refused.inc({ component: target.component, reason });
    return new AllWorkersBusyError(retryAfterMs);
  }

  private targetOf(model: string): RouteTarget | undefined {
    const cards = this.targets.get(model);
    return cards === undefined ? undefined : cards.values().next().value;
  }

  private release(requestId: string, outputTokens?: number): void {
    const booking = this.bookings.get(requestId);
    if (booking === undefined) return;
    this.bookings.delete(requestId);
    this.options.backend.finished(booking.target, requestId, outputTokens);
    // One booking ended: the oldest waiter tries again first.
    const first = this.waiters.values().next().value;
    first?.();
  }

  private waitForCapacity(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.waiters.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.waiters.add(wake);
    });
  }

  private releaseUnconfirmed(timeoutMs: number): void {
    const cutoff = this.clock() - timeoutMs;
    for (const [id, b] of this.bookings) if (!b.confirmed && b.atMs <= cutoff) this.release(id);
  }
}

export interface KvSelectorConfig extends Partial<KvRouterFlags> {
  /** `--router-endpoint`: delegate to standalone replicas at `component` or `component/endpoint`. */
  routerEndpoint?: string;
}

/** Shared parts of the process the selector (and its embedded router) should reuse. */
export interface KvSelectorDeps {
  /** The process's one card feed; started (and closed) here when absent. */
  cards?: ModelCardFeed;
}

/** The selector `--router-mode kv` runs: embedded router, or a client of router replicas. */
export async function createKvSelector(runtime: DistributedRuntime, namespace: string, config: KvSelectorConfig = {}, deps: KvSelectorDeps = {}): Promise<KvSelector> {
  let backend: KvRoutingBackend;
  if (config.routerEndpoint !== undefined && config.routerEndpoint !== '') {
    const [component, endpoint] = config.routerEndpoint.split('/', 2) as [string, string | undefined];
    backend = await RemoteKvBackend.open(runtime, namespace, component, endpoint ?? ROUTE_ENDPOINT);
  } else {
    const hub = await KvRouterHub.start(runtime, {
      namespace,
      router: await loadKvRouterConfig(config, runtime.instanceId),
      ...(config.routerReplicaSync ? { replicaSync: true, announceSync: true } : {}),
      ...(deps.cards ? { cards: deps.cards } : {}),
    });
    backend = new LocalKvBackend(hub);
  }
  return KvSelector.start({ backend, discovery: runtime.discovery, namespace, metrics: RouterMetrics.for(runtime.metrics), ...(deps.cards ? { cards: deps.cards } : {}) });
}
