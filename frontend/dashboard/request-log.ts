/**
 * RequestLog: requests while they run (pending), their routing decisions, and the finished
 * records the inspector serves. Pure and bounded: at most `MAX_PENDING` running requests and
 * `MAX_PENDING_ROUTES` decisions waiting for their request (oldest dropped), the last
 * `REQUEST_RING_SIZE` finished records, the last `ROUTING_DECISIONS_KEPT` decisions.
 *
 * All three maps are `LruMap`s read with `peek`, so reads do not refresh: the oldest entry
 * goes first when a bound is reached.
 */
import type { RouterDecisionEvent } from '../../proto/wire.js';
import { LruMap } from '../../runtime/lru.js';
import { Ring } from './ring.js';
import { REQUEST_RING_SIZE, ROUTING_DECISIONS_KEPT, type RequestRecord as SnapshotRequestRecord, type RoutingCandidate, type RoutingDecision } from './snapshot.js';

/**
 * What `GET /dashboard/api/requests/{id}` answers: snapshot.ts's record plus `inputs`, the
 * number of sequences of an embeddings request (its batched `input`; absent for generation).
 * Declared here rather than in snapshot.ts while that file is being changed elsewhere.
 */
export type RequestRecord = SnapshotRequestRecord & { inputs?: number };

const MAX_PENDING = 8192;
/** Kv-selector candidate lists waiting for their request's start. */
const MAX_PENDING_ROUTES = 1024;

export interface RequestStart {
  requestId: string;
  model: string;
  /** The API (the codec's metrics label). */
  endpoint?: string;
  /** Arrival, ms since epoch. */
  arrivedAt: number;
  /** The worker the request went to (decode worker when disaggregated). */
  instanceId: string;
  prefillInstanceId?: string;
  /** Embeddings: how many inputs the request carried. */
  inputs?: number;
}

export interface RequestEnd {
  finishReason: string | null;
  error?: string;
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
  /** Times the request moved to another worker (`PreparedGeneration.migrations`). */
  migrations?: number;
  /** Disaggregated: remote prefill seconds, KV hand-off seconds and bytes, and whether it fell back. */
  disagg?: { prefillSeconds?: number; transferSeconds?: number; transferBytes?: number; fallback: boolean; decodeInstanceId?: string; prefillInstanceId?: string };
}

interface Pending {
  requestId: string;
  model: string;
  endpoint?: string;
  inputs?: number;
  startedAt: number;
  routedAt: number;
  workers: string[];
  prefillWorker?: string;
  firstTokenAt?: number;
  routing?: RoutingDecision;
}

/** What a finished request tells the traffic counters and the fleet. */
export interface Finished {
  record: RequestRecord;
  firstTokenAt: number | undefined;
  /** The worker that served it last (prefix-hit accounting). */
  servedBy: string;
}

export class RequestLog {
  private readonly pending = new LruMap<string, Pending>({ maxEntries: MAX_PENDING });
  private readonly routeCandidates = new LruMap<string, { candidates: RoutingCandidate[]; promptBlocks: number; decidedBy: string; winner: string }>({ maxEntries: MAX_PENDING_ROUTES });
  private readonly finished = new LruMap<string, RequestRecord>({ maxEntries: REQUEST_RING_SIZE });
  private readonly decisionRing = new Ring<RoutingDecision>(ROUTING_DECISIONS_KEPT);

  /** The kv selector's view of a routing decision; joined with the request at its start. */
  routingDecided(requestId: string, winner: string, candidates: RoutingCandidate[], promptBlocks: number, decidedBy: string): void {
    // A standalone router's decision may arrive over the event plane after the request started.
    const known = this.pending.peek(requestId)?.routing ?? this.finished.peek(requestId)?.routing;
    if (known !== undefined) {
      known.winner = winner;
      known.candidates = candidates;
      known.promptBlocks = promptBlocks;
      known.decidedBy = decidedBy;
      return;
    }
    this.routeCandidates.set(requestId, { candidates, promptBlocks, decidedBy, winner });
  }

  /** A standalone router's decision from the event plane. */
  remoteDecision(source: string, e: RouterDecisionEvent): void {
    this.routingDecided(e.requestId, e.instanceId, e.candidates.map((c) => ({ ...c })), e.promptBlocks, source);
  }

  started(s: RequestStart, now: number): void {
    const p: Pending = { requestId: s.requestId, model: s.model, startedAt: s.arrivedAt, routedAt: now, workers: [s.instanceId] };
    if (s.prefillInstanceId !== undefined) p.prefillWorker = s.prefillInstanceId;
    if (s.endpoint !== undefined) p.endpoint = s.endpoint;
    if (s.inputs !== undefined) p.inputs = s.inputs;
    const route = this.routeCandidates.peek(s.requestId);
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
    this.decisionRing.push(decision);
    this.pending.set(s.requestId, p);
  }

  /** The request's TTFT (ms) the first time it is called for it; undefined after, or when unknown. */
  firstToken(requestId: string, now: number): number | undefined {
    const p = this.pending.peek(requestId);
    if (!p || p.firstTokenAt !== undefined) return undefined;
    p.firstTokenAt = now;
    // From the moment it was routed, as the router's prediction counts it.
    if (p.routing !== undefined) p.routing.measuredTtftMs = now - p.routedAt;
    return now - p.startedAt;
  }

  ended(requestId: string, end: RequestEnd, now: number): Finished | undefined {
    const p = this.pending.peek(requestId);
    if (!p) return undefined;
    this.pending.delete(requestId);
    const d = end.disagg;
    if (d && !d.fallback) {
      if (d.prefillInstanceId !== undefined) p.prefillWorker = d.prefillInstanceId;
      if (d.decodeInstanceId !== undefined && p.workers[p.workers.length - 1] !== d.decodeInstanceId) p.workers.push(d.decodeInstanceId);
    }
    const record: RequestRecord = {
      requestId,
      model: p.model,
      ...(p.endpoint !== undefined ? { endpoint: p.endpoint } : {}),
      ...(p.inputs !== undefined ? { inputs: p.inputs } : {}),
      workers: p.workers,
      promptTokens: end.promptTokens,
      completionTokens: end.completionTokens,
      cachedTokens: end.cachedTokens,
      timings: {
        queueMs: p.routedAt - p.startedAt,
        prefillMs: d?.prefillSeconds !== undefined ? d.prefillSeconds * 1000 : null,
        transferMs: d?.transferSeconds !== undefined ? d.transferSeconds * 1000 : null,
        decodeMs: p.firstTokenAt !== undefined ? now - p.firstTokenAt : null,
        ttftMs: p.firstTokenAt !== undefined ? p.firstTokenAt - p.startedAt : null,
        totalMs: now - p.startedAt,
      },
      finishReason: end.finishReason,
      migrations: end.migrations ?? 0,
      startedAt: p.startedAt,
    };
    if (p.prefillWorker !== undefined) record.prefillWorker = p.prefillWorker;
    if (p.routing) record.routing = p.routing;
    if (end.error !== undefined) record.error = end.error;
    // A Map iterates in insertion order: its first key is the oldest record.
    this.finished.set(requestId, record);
    return { record, firstTokenAt: p.firstTokenAt, servedBy: p.workers[p.workers.length - 1]! };
  }

  request(requestId: string): RequestRecord | undefined {
    return this.finished.peek(requestId);
  }

  /** Newest last. */
  decisions(): RoutingDecision[] {
    return this.decisionRing.toArray();
  }
}
