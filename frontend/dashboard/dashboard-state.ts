/**
 * DashboardState: the pure aggregator behind `/dashboard`. Adapters feed it events (card
 * added/removed, load_metrics, request start / first token / end, routing decisions, disagg
 * hand-offs, planner status); `snapshot(now)` folds them into a `DashboardSnapshot`.
 *
 * Cost: a request costs three calls (start, first token, end), each O(1) (a Map set, a ring
 * push). Nothing is per token. Every collection is bounded: rings of fixed capacity, the pending
 * request map capped at `maxPending` (oldest dropped), gone workers forgotten after
 * `goneRetentionMs`. Percentiles are computed only when a snapshot is taken (1 Hz, only while a
 * dashboard is open).
 */
import type { PlannerStatusEvent, RouterDecisionEvent } from '../../proto/wire.js';
import { percentiles, Ring, SampleRing } from './ring.js';
import {
  PLANNER_DECISIONS_KEPT,
  REQUEST_RING_SIZE,
  ROUTING_DECISIONS_KEPT,
  type DashboardSnapshot,
  type ModelView,
  type PlannerDecisionView,
  type PoolRole,
  type RequestRecord,
  type RoutingCandidate,
  type RoutingDecision,
  type WorkerState,
} from './snapshot.js';

/** Window of the latency percentiles and rates. */
export const PERCENTILE_WINDOW_MS = 60_000;
/** A draining worker silent this long (no load_metrics) is gone. */
export const DRAIN_SILENCE_MS = 3000;
/** Gone workers stay visible this long. */
export const GONE_RETENTION_MS = 60_000;
const SAMPLE_CAPACITY = 8192;
const MAX_PENDING = 8192;
/** Kv-selector candidate lists waiting for their request's start. */
const MAX_PENDING_ROUTES = 1024;

export type CardRole = 'agg' | 'prefill' | 'decode';

const POOL_OF: Record<CardRole, PoolRole> = { agg: 'aggregated', prefill: 'prefill', decode: 'decode' };

interface WorkerEntry {
  instanceId: string;
  model: string;
  role: PoolRole;
  state: WorkerState;
  running: number;
  waiting: number;
  kvUsedBlocks: number;
  kvTotalBlocks: number;
  cachedTokens: number;
  promptTokens: number;
  lastSeen: number;
  lastLoadAt: number;
  goneAt?: number;
}

interface Pending {
  requestId: string;
  model: string;
  startedAt: number;
  routedAt: number;
  workers: string[];
  prefillWorker?: string;
  firstTokenAt?: number;
  transferMs?: number;
  prefillMs?: number;
  routing?: RoutingDecision;
}

export interface RequestStart {
  requestId: string;
  model: string;
  /** Arrival, ms since epoch. */
  arrivedAt: number;
  /** The worker the request went to (decode worker when disaggregated). */
  instanceId: string;
  prefillInstanceId?: string;
}

export interface RequestEnd {
  finishReason: string | null;
  error?: string;
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
  /** Disaggregated: remote prefill seconds, KV hand-off seconds and bytes, and whether it fell back. */
  disagg?: { prefillSeconds?: number; transferSeconds?: number; transferBytes?: number; fallback: boolean; decodeInstanceId?: string; prefillInstanceId?: string };
}

export interface LoadSample {
  workerId: string;
  numRunning: number;
  numWaiting: number;
  activeBlocks: number;
  totalBlocks: number;
}

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
  private readonly workers = new Map<string, WorkerEntry>();
  private readonly pending = new Map<string, Pending>();
  private readonly routeCandidates = new Map<string, { candidates: RoutingCandidate[]; promptBlocks: number; decidedBy: string; winner: string }>();
  private readonly finished = new Map<string, RequestRecord>();
  private readonly decisions = new Ring<RoutingDecision>(ROUTING_DECISIONS_KEPT);
  private readonly plannerDecisions = new Ring<PlannerDecisionView>(PLANNER_DECISIONS_KEPT);
  private planner: (PlannerStatusEvent & { source: string; lastSeen: number }) | undefined;
  private readonly starts = new SampleRing(SAMPLE_CAPACITY);
  private readonly ends = new SampleRing(SAMPLE_CAPACITY);
  private readonly ttft = new SampleRing(SAMPLE_CAPACITY);
  private readonly itl = new SampleRing(SAMPLE_CAPACITY);
  private readonly disaggEnds = new SampleRing(SAMPLE_CAPACITY);
  private readonly transferBytes = new SampleRing(SAMPLE_CAPACITY);
  private readonly transferLatency = new SampleRing(SAMPLE_CAPACITY);
  private readonly errors: Record<string, number> = {};
  private migrations = 0;
  private requestsTotal = 0;
  private disaggTotal = 0;
  private fallbacks = 0;
  private lastSnapshotAt = 0;
  clients = 0;

  constructor(private readonly info: FrontendInfo) {}

  // ---- fleet ----

  cardAdded(model: string, role: CardRole, instanceId: string, totalBlocks: number, now: number): void {
    const existing = this.workers.get(instanceId);
    if (existing && existing.state !== 'gone') {
      existing.state = 'ready';
      existing.kvTotalBlocks ||= totalBlocks;
      existing.lastSeen = now;
      return;
    }
    this.workers.set(instanceId, {
      instanceId, model, role: POOL_OF[role], state: 'ready', running: 0, waiting: 0, kvUsedBlocks: 0, kvTotalBlocks: totalBlocks,
      cachedTokens: existing?.cachedTokens ?? 0, promptTokens: existing?.promptTokens ?? 0, lastSeen: now, lastLoadAt: 0,
    });
  }

  /**
   * A worker deregisters its card first and then drains in-flight streams, so a card that goes
   * while the worker still reports running requests is 'draining'; otherwise it is gone.
   */
  cardRemoved(instanceId: string, now: number): void {
    const w = this.workers.get(instanceId);
    if (!w || w.state === 'gone') return;
    if (w.running > 0 && now - w.lastLoadAt < DRAIN_SILENCE_MS) w.state = 'draining';
    else this.markGone(w, now);
  }

  load(m: LoadSample, now: number): void {
    const w = this.workers.get(m.workerId);
    if (!w || w.state === 'gone') return; // unknown until its card comes: it is not routable yet
    w.running = m.numRunning;
    w.waiting = m.numWaiting;
    w.kvUsedBlocks = m.activeBlocks;
    if (m.totalBlocks > 0) w.kvTotalBlocks = m.totalBlocks;
    w.lastSeen = w.lastLoadAt = now;
  }

  // ---- requests ----

  /** The kv selector's view of a routing decision; joined with the request at its start. */
  routingDecided(requestId: string, winner: string, candidates: RoutingCandidate[], promptBlocks: number, decidedBy: string): void {
    // A standalone router's decision may arrive over the event plane after the request started.
    const known = this.pending.get(requestId)?.routing ?? this.finished.get(requestId)?.routing;
    if (known !== undefined) {
      known.winner = winner;
      known.candidates = candidates;
      known.promptBlocks = promptBlocks;
      known.decidedBy = decidedBy;
      return;
    }
    if (this.routeCandidates.size >= MAX_PENDING_ROUTES) this.routeCandidates.delete(this.routeCandidates.keys().next().value!);
    this.routeCandidates.set(requestId, { candidates, promptBlocks, decidedBy, winner });
  }

  /** A standalone router's decision from the event plane. */
  remoteDecision(source: string, e: RouterDecisionEvent): void {
    this.routingDecided(e.requestId, e.instanceId, e.candidates.map((c) => ({ ...c })), e.promptBlocks, source);
  }

  requestStarted(s: RequestStart, now: number): void {
    if (this.pending.size >= MAX_PENDING) this.pending.delete(this.pending.keys().next().value!);
    const p: Pending = { requestId: s.requestId, model: s.model, startedAt: s.arrivedAt, routedAt: now, workers: [s.instanceId] };
    if (s.prefillInstanceId !== undefined) p.prefillWorker = s.prefillInstanceId;
    const route = this.routeCandidates.get(s.requestId);
    this.routeCandidates.delete(s.requestId);
    const decision: RoutingDecision = {
      t: now,
      requestId: s.requestId,
      model: s.model,
      decidedBy: route?.decidedBy ?? 'frontend',
      promptBlocks: route?.promptBlocks ?? 0,
      candidates: route?.candidates ?? [{ instanceId: s.instanceId, overlapBlocks: 0, cost: null }],
      // The kv selector's pick (the decode leg's when disaggregated: the header's worker).
      winner: route?.winner ?? s.instanceId,
    };
    p.routing = decision;
    this.decisions.push(decision);
    this.pending.set(s.requestId, p);
    this.starts.push(now, 1);
    this.requestsTotal++;
  }

  firstToken(requestId: string, now: number): void {
    const p = this.pending.get(requestId);
    if (!p || p.firstTokenAt !== undefined) return;
    p.firstTokenAt = now;
    this.ttft.push(now, now - p.startedAt);
  }

  /** A generation request refused before it was routed (bad request, overload, draining…). */
  rejected(code: string): void {
    this.errors[code] = (this.errors[code] ?? 0) + 1;
  }

  migrated(): void {
    this.migrations++;
  }

  requestEnded(requestId: string, end: RequestEnd, now: number): void {
    const p = this.pending.get(requestId);
    if (!p) return;
    this.pending.delete(requestId);
    this.ends.push(now, 1);
    if (end.error !== undefined) this.errors[end.error] = (this.errors[end.error] ?? 0) + 1;
    if (p.firstTokenAt !== undefined && end.completionTokens > 1) this.itl.push(now, (now - p.firstTokenAt) / (end.completionTokens - 1));
    const d = end.disagg;
    let prefillMs: number | null = null;
    let transferMs: number | null = null;
    if (d) {
      if (d.fallback) this.fallbacks++;
      else {
        this.disaggTotal++;
        this.disaggEnds.push(now, 1);
        if (d.prefillInstanceId !== undefined) p.prefillWorker = d.prefillInstanceId;
        if (d.decodeInstanceId !== undefined && p.workers[p.workers.length - 1] !== d.decodeInstanceId) p.workers.push(d.decodeInstanceId);
      }
      if (d.prefillSeconds !== undefined) prefillMs = d.prefillSeconds * 1000;
      if (d.transferSeconds !== undefined) {
        transferMs = d.transferSeconds * 1000;
        this.transferLatency.push(now, transferMs);
        this.transferBytes.push(now, d.transferBytes ?? 0);
      }
    }
    const worker = this.workers.get(p.workers[p.workers.length - 1]!);
    if (worker && end.promptTokens > 0) {
      worker.cachedTokens += end.cachedTokens;
      worker.promptTokens += end.promptTokens;
    }
    const ttftMs = p.firstTokenAt !== undefined ? p.firstTokenAt - p.startedAt : null;
    const record: RequestRecord = {
      requestId,
      model: p.model,
      workers: p.workers,
      promptTokens: end.promptTokens,
      completionTokens: end.completionTokens,
      cachedTokens: end.cachedTokens,
      timings: {
        queueMs: p.routedAt - p.startedAt,
        prefillMs,
        transferMs,
        decodeMs: p.firstTokenAt !== undefined ? now - p.firstTokenAt : null,
        ttftMs,
        totalMs: now - p.startedAt,
      },
      finishReason: end.finishReason,
      migrations: 0,
      startedAt: p.startedAt,
    };
    if (p.prefillWorker !== undefined) record.prefillWorker = p.prefillWorker;
    if (p.routing) record.routing = p.routing;
    if (end.error !== undefined) record.error = end.error;
    this.remember(record);
  }

  request(requestId: string): RequestRecord | undefined {
    return this.finished.get(requestId);
  }

  // ---- planner ----

  plannerStatus(source: string, e: PlannerStatusEvent, now: number): void {
    this.planner = { ...e, source, lastSeen: now };
    for (const d of e.decisions ?? []) this.plannerDecisions.push({ t: e.timestampMs || now, pool: d.pool, from: d.from, to: d.to, reason: d.reason });
  }

  // ---- snapshot ----

  snapshot(now: number): DashboardSnapshot {
    const since = now - PERCENTILE_WINDOW_MS;
    const intervalMs = this.lastSnapshotAt > 0 ? Math.max(250, Math.min(10_000, now - this.lastSnapshotAt)) : 1000;
    const intervalStart = now - intervalMs;
    this.lastSnapshotAt = now;
    const models = this.fleet(now);
    let queued = 0;
    for (const m of models) for (const p of m.pools) for (const w of p.workers) if (w.state !== 'gone') queued += w.waiting;
    const finishedInInterval = this.ends.sumSince(intervalStart);
    const disaggInInterval = this.disaggEnds.sumSince(intervalStart);
    const transfer = percentiles(this.transferLatency.valuesSince(since));
    const stats = this.info.routerStats?.();
    const snap: DashboardSnapshot = {
      t: now,
      frontend: { instanceId: this.info.instanceId, startedAt: this.info.startedAt, dashboardClients: this.clients, draining: this.info.draining() },
      models,
      traffic: {
        requestRate: this.starts.sumSince(intervalStart) / (intervalMs / 1000),
        finishRate: finishedInInterval / (intervalMs / 1000),
        ttft: percentiles(this.ttft.valuesSince(since)),
        itl: percentiles(this.itl.valuesSince(since)),
        windowMs: PERCENTILE_WINDOW_MS,
        inflight: this.info.inflight(),
        queued,
        errorsByType: { ...this.errors },
        migrations: this.migrations,
        requestsTotal: this.requestsTotal,
      },
      routing: {
        mode: this.info.routerMode,
        ...(stats ? { indexBlocks: stats.indexBlocks, gapRecoveries: stats.gapRecoveries } : {}),
        decisions: this.decisions.toArray(),
      },
      disagg: {
        share: finishedInInterval > 0 ? disaggInInterval / finishedInInterval : 0,
        disaggregatedTotal: this.disaggTotal,
        transferGBps: this.transferBytes.sumSince(intervalStart) / (intervalMs / 1000) / 1e9,
        transferLatencyMs: { p50: transfer.p50, p99: transfer.p99 },
        fallbacks: this.fallbacks,
      },
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

  private fleet(now: number): ModelView[] {
    const byModel = new Map<string, Map<PoolRole, ModelView['pools'][number]>>();
    for (const [id, w] of this.workers) {
      if (w.state === 'draining' && now - w.lastLoadAt >= DRAIN_SILENCE_MS) this.markGone(w, now);
      if (w.state === 'gone' && now - w.goneAt! > GONE_RETENTION_MS) {
        this.workers.delete(id);
        continue;
      }
      let pools = byModel.get(w.model);
      if (!pools) byModel.set(w.model, (pools = new Map()));
      let pool = pools.get(w.role);
      if (!pool) pools.set(w.role, (pool = { role: w.role, workers: [] }));
      pool.workers.push({
        instanceId: w.instanceId,
        state: w.state,
        running: w.running,
        waiting: w.waiting,
        kvUsedBlocks: w.kvUsedBlocks,
        kvTotalBlocks: w.kvTotalBlocks,
        prefixHitRate: w.promptTokens > 0 ? w.cachedTokens / w.promptTokens : null,
        lastSeen: w.lastSeen,
        ...(w.goneAt !== undefined ? { goneAt: w.goneAt } : {}),
      });
    }
    const order: PoolRole[] = ['aggregated', 'prefill', 'decode'];
    return [...byModel.entries()]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([name, pools]) => ({
        name,
        pools: order.filter((r) => pools.has(r)).map((r) => {
          const pool = pools.get(r)!;
          pool.workers.sort((a, b) => a.instanceId.localeCompare(b.instanceId));
          return pool;
        }),
      }));
  }

  private markGone(w: WorkerEntry, now: number): void {
    w.state = 'gone';
    w.goneAt = now;
    w.running = 0;
    w.waiting = 0;
  }

  private remember(record: RequestRecord): void {
    // A Map iterates in insertion order: its first key is the oldest record.
    if (this.finished.size >= REQUEST_RING_SIZE) this.finished.delete(this.finished.keys().next().value!);
    this.finished.set(record.requestId, record);
  }
}
