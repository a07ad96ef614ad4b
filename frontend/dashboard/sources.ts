/**
 * Adapters that feed `DashboardState` from outside the request path:
 *   - the process's `ModelCardFeed`: a card added → worker 'ready'; removed → 'draining' or
 *     'gone' (dashboard-state.ts says which);
 *   - `load_metrics` on the event plane, for each worker component the cards name, through the
 *     embedded KV router's `LoadFeed` when there is one (one subscription per component in this
 *     process, shared with the router), else through a feed of its own;
 *   - routing decisions: the embedded KV router's hub listener, or, with `--router-endpoint`,
 *     `router_decisions` published by the standalone router on its component;
 *   - `planner_status` published by a planner on component `planner`.
 * Everything here is I/O glue; the state it feeds is pure.
 */
import { cardLoras } from '../lora/served-adapters.js';
import type { Logger } from 'pino';
import { DASHBOARD_TOPICS, PLANNER_COMPONENT, type PlannerStatusEvent, type RouterDecisionEvent } from '../../proto/wire.js';
import { LoadFeed, decisionCandidates, type DecisionListener, type KvRouterHub } from '../../router/adapters/index.js';
import type { DistributedRuntime, ModelCardFeed, Subscription } from '../../runtime/index.js';
import type { DashboardState } from './dashboard-state.js';
import { readSpecReport, readTierReport } from './fleet.js';

export interface DashboardSourcesOptions {
  state: DashboardState;
  cards: ModelCardFeed;
  namespace: string;
  /** Absent: no event plane (tests with an in-memory discovery): fleet from cards only. */
  runtime?: DistributedRuntime;
  /** The embedded KV router, when the frontend routes in kv mode itself. */
  hub?: KvRouterHub;
  /** `--router-endpoint`'s component, when a standalone router decides. */
  routerComponent?: string;
  log: Logger;
  clock?: () => number;
}

export class DashboardSources {
  private readonly subs: Promise<Subscription | undefined>[] = [];
  private readonly loadListeners: Promise<(() => void) | undefined>[] = [];
  private ownedLoads: LoadFeed | undefined;
  private readonly components = new Set<string>();
  private unsubscribeCards: (() => void) | undefined;
  private readonly onDecision: DecisionListener;
  private closed = false;

  private constructor(private readonly o: DashboardSourcesOptions) {
    const clock = o.clock ?? Date.now;
    this.onDecision = (_component, d) =>
      o.state.routingDecided(
        d.requestId,
        d.instanceId,
        decisionCandidates(d.costs),
        d.requestBlocks,
        'frontend',
      );
    this.unsubscribeCards = o.cards.subscribe((e) => {
      const { entry } = e;
      if (e.type === 'removed') return o.state.cardRemoved(entry.instanceId, clock());
      o.state.cardAdded(entry.model, entry.card.role, entry.instanceId, entry.card.totalKvBlocks, clock(), {
        loras: cardLoras(entry.card).map((l) => l.name),
        ...(entry.card.workerName !== undefined ? { name: entry.card.workerName } : {}),
        info: {
          ...(entry.card.architecture !== undefined ? { architecture: entry.card.architecture } : {}),
          ...(entry.card.parameters !== undefined ? { parameters: entry.card.parameters } : {}),
        },
      });
      this.follow(entry.card.component);
    });
  }

  static start(o: DashboardSourcesOptions): DashboardSources {
    const s = new DashboardSources(o);
    o.hub?.decisionListeners.add(s.onDecision);
    if (o.runtime && o.routerComponent !== undefined) {
      s.subscribe<RouterDecisionEvent>(o.routerComponent, DASHBOARD_TOPICS.routerDecisions, (source, p) => {
        if (typeof p?.requestId === 'string' && typeof p.instanceId === 'string' && Array.isArray(p.candidates)) o.state.remoteDecision(source, p);
      });
    }
    if (o.runtime) {
      s.subscribe<PlannerStatusEvent>(PLANNER_COMPONENT, DASHBOARD_TOPICS.plannerStatus, (source, p) => {
        if (typeof p === 'object' && p !== null && Array.isArray(p.pools)) o.state.plannerStatus(source, { ...p, decisions: Array.isArray(p.decisions) ? p.decisions : [] }, Date.now());
      });
    }
    return s;
  }

  async close(): Promise<void> {
    this.closed = true;
    this.unsubscribeCards?.();
    this.o.hub?.decisionListeners.delete(this.onDecision);
    for (const stop of await Promise.all(this.loadListeners)) stop?.();
    await this.ownedLoads?.close();
    const subs = await Promise.all(this.subs);
    await Promise.all(subs.map((s) => s?.close().catch(() => undefined)));
  }

  /** Start hearing `load_metrics` from a worker component the first time a card names it. */
  private follow(component: string): void {
    if (!this.o.runtime || this.components.has(component)) return;
    this.components.add(component);
    const clock = this.o.clock ?? Date.now;
    const feed = this.o.hub?.loads ?? (this.ownedLoads ??= new LoadFeed(this.o.runtime, this.o.namespace, this.o.log));
    const listening = feed
      .listen(component, (m) => {
        if (this.closed) return;
        this.o.state.load(
          { workerId: m.workerId, numRunning: Number(m.numRunning) || 0, numWaiting: Number(m.numWaiting) || 0, activeBlocks: Number(m.activeBlocks) || 0, totalBlocks: Number(m.totalBlocks) || 0, tiers: readTierReport(m.tiers), spec: readSpecReport(m.spec) },
          clock(),
        );
      })
      .catch((err: unknown) => {
        this.o.log.warn({ err, component }, 'dashboard: could not hear load_metrics');
        return undefined;
      });
    this.loadListeners.push(listening);
  }

  private subscribe<T>(component: string, topic: string, onEvent: (source: string, payload: T) => void): void {
    const runtime = this.o.runtime!;
    const sub = runtime
      .namespace(this.o.namespace)
      .component(component)
      .subscribe<T>(topic, (e) => {
        if (!this.closed) onEvent(e.source, e.payload);
      })
      .then(
        async (s) => {
          if (this.closed) {
            await s.close().catch(() => undefined);
            return undefined;
          }
          return s;
        },
        (err: unknown) => {
          this.o.log.warn({ err, component, topic }, 'dashboard: could not subscribe');
          return undefined;
        },
      );
    this.subs.push(sub);
  }
}
