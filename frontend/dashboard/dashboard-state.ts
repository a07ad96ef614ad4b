/**
 * DashboardState: the pure aggregator behind `/dashboard`. Adapters feed it events (card
 * added/removed, load_metrics, request start / first token / end, routing decisions, disagg
 * hand-offs, planner status); it keeps them in three parts, each in its own file:
 *   fleet.ts        workers per model and pool, their load and state
 *   request-log.ts  running and finished requests (the inspector), routing decisions
 *   traffic.ts      counters and samples: rates, percentiles, errors, hand-offs
 *
 * Two calls read it, and only one of them changes it:
 *   - `advance(now)`: the stream's timer alone calls it, once per tick. It moves the rate
 *     window and commits time-driven fleet changes (a silent draining worker is gone, old
 *     gone workers are forgotten).
 *   - `view(now)`: builds a `DashboardSnapshot` and changes nothing. The stream's frames, a
 *     new client's first frame and `/dashboard/api/snapshot` all read it, so a page load never
 *     shortens the window the streamed clients see.
 *
 * Cost: a request costs three calls (start, first token, end), each O(1). Nothing is per token.
 * Every collection is bounded (see each part). Percentiles are computed only in `view`.
 */
import type { PlannerStatusEvent, RouterDecisionEvent, WorkerRole } from '../../proto/wire.js';
import { Fleet, type CardExtras, type LoadSample } from './fleet.js';
import { Ring } from './ring.js';
import { RequestLog, type RequestEnd, type RequestStart } from './request-log.js';
import { PLANNER_DECISIONS_KEPT, type DashboardSnapshot, type PlannerDecisionView, type RequestRecord, type RoutingCandidate } from './snapshot.js';
import { Traffic } from './traffic.js';

export { DRAIN_SILENCE_MS, GONE_RETENTION_MS, type LoadSample } from './fleet.js';
export { PERCENTILE_WINDOW_MS } from './traffic.js';
export type { RequestEnd, RequestStart } from './request-log.js';

export interface FrontendInfo {
  instanceId: string;
  startedAt: number;
  routerMode: string;
  draining(): boolean;
  inflight(): number;
  /** Embedded kv router stats, when there is one. */
  routerStats?(): { indexBlocks: number; gapRecoveries: number } | undefined;
}

export class DashboardState {
  private readonly fleet = new Fleet();
  private readonly requests = new RequestLog();
  private readonly traffic = new Traffic();
  private readonly plannerDecisions = new Ring<PlannerDecisionView>(PLANNER_DECISIONS_KEPT);
  private planner: (PlannerStatusEvent & { source: string; lastSeen: number }) | undefined;
  clients = 0;

  constructor(private readonly info: FrontendInfo) {}

  // ---- fleet ----

  cardAdded(model: string, role: WorkerRole, instanceId: string, totalBlocks: number, now: number, card?: CardExtras): void {
    this.fleet.cardAdded(model, role, instanceId, totalBlocks, now, card);
  }

  cardRemoved(instanceId: string, now: number): void {
    this.fleet.cardRemoved(instanceId, now);
  }

  load(m: LoadSample, now: number): void {
    this.fleet.load(m, now);
  }

  // ---- requests ----

  routingDecided(requestId: string, winner: string, candidates: RoutingCandidate[], promptBlocks: number, decidedBy: string): void {
    this.requests.routingDecided(requestId, winner, candidates, promptBlocks, decidedBy);
  }

  remoteDecision(source: string, e: RouterDecisionEvent): void {
    this.requests.remoteDecision(source, e);
  }

  requestStarted(s: RequestStart, now: number): void {
    this.requests.started(s, now);
    this.traffic.started(now);
  }

  firstToken(requestId: string, now: number): void {
    const ttftMs = this.requests.firstToken(requestId, now);
    if (ttftMs !== undefined) this.traffic.firstToken(now, ttftMs);
  }

  /** A generation request refused before it was routed (bad request, overload, draining…). */
  rejected(code: string): void {
    this.traffic.error(code);
  }

  migrated(): void {
    this.traffic.migrated();
  }

  requestEnded(requestId: string, end: RequestEnd, now: number): void {
    const done = this.requests.ended(requestId, end, now);
    if (!done) return;
    if (end.error !== undefined) this.traffic.error(end.error);
    this.traffic.ended(now, done.firstTokenAt, end.completionTokens, end.disagg);
    this.fleet.prefixUsage(done.servedBy, end.cachedTokens, end.promptTokens);
  }

  request(requestId: string): RequestRecord | undefined {
    return this.requests.request(requestId);
  }

  // ---- planner ----

  plannerStatus(source: string, e: PlannerStatusEvent, now: number): void {
    this.planner = { ...e, source, lastSeen: now };
    for (const d of e.decisions ?? []) this.plannerDecisions.push({ t: e.timestampMs || now, pool: d.pool, from: d.from, to: d.to, reason: d.reason });
  }

  // ---- reading ----

  /** The stream's tick (and nothing else): move the rate window, commit fleet transitions. */
  advance(now: number): void {
    this.traffic.advance(now);
    this.fleet.advance(now);
  }

  /** The snapshot at `now`; changes nothing. */
  view(now: number): DashboardSnapshot {
    const models = this.fleet.view(now);
    let queued = 0;
    for (const m of models) for (const p of m.pools) for (const w of p.workers) queued += w.waiting;
    const { traffic, disagg } = this.traffic.view(now, this.info.inflight(), queued);
    const stats = this.info.routerStats?.();
    const snap: DashboardSnapshot = {
      t: now,
      frontend: { instanceId: this.info.instanceId, startedAt: this.info.startedAt, dashboardClients: this.clients, draining: this.info.draining() },
      models,
      traffic,
      routing: {
        mode: this.info.routerMode,
        ...(stats ? { indexBlocks: stats.indexBlocks, gapRecoveries: stats.gapRecoveries } : {}),
        decisions: this.requests.decisions(),
      },
      disagg,
    };
    if (this.planner) {
      const p = this.planner;
      snap.planner = {
        source: p.source,
        lastSeen: p.lastSeen,
        predicted: p.predicted ?? null,
        observed: p.observed ?? null,
        pools: p.pools.map((x) => ({ ...x })),
        decisions: this.plannerDecisions.toArray(),
      };
    }
    return snap;
  }
}
