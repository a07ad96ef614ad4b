/**
 * What the dashboard's SSE stream (`GET /dashboard/events`) and its JSON API send: the one
 * contract between the frontend's `DashboardState` and the page (frontend/dashboard/page/).
 *
 * Stream: `text/event-stream`, first a `retry: 2000` line (EventSource reconnects 2 s after the
 * frontend goes away), then one `event: snapshot` frame (`data: <DashboardSnapshot JSON>`) as soon
 * as the client connects and about once a second after that. Every frame is a whole snapshot
 * (no deltas), so a frame skipped for a slow client loses nothing but time resolution. History
 * windows (5/15/60 min) are the page's own: it appends each snapshot's numbers to its series.
 *
 * Times are milliseconds since the epoch (`t`, `lastSeen`) or milliseconds (latencies). Rates
 * are per second over the interval between the stream's last two ticks (the last second when
 * no stream runs); reading a snapshot never moves that interval. Every list is bounded (see the limits below).
 *
 * Request inspector: `GET /dashboard/api/requests/{requestId}` → `RequestRecord` (200) or a
 * 404 `{error:{code:'request_not_found'}}` once it has left the ring (the last
 * `REQUEST_RING_SIZE` finished requests). The id is the response header `x-request-id`.
 * `GET /dashboard/api/snapshot` → the current `DashboardSnapshot` once (tests, curl).
 */

/** SSE event name of a snapshot frame. */
export const SNAPSHOT_EVENT = 'snapshot';
/** `retry:` sent at the stream's start: the browser's reconnect delay. */
export const SSE_RETRY_MS = 2000;
/** How often a snapshot is sent while at least one client is connected. */
export const SNAPSHOT_INTERVAL_MS = 1000;
/** Routing decisions kept (and sent) per snapshot. */
export const ROUTING_DECISIONS_KEPT = 50;
/** Planner decisions kept (and sent). */
export const PLANNER_DECISIONS_KEPT = 50;
/** Finished requests the inspector remembers. */
export const REQUEST_RING_SIZE = 4096;

export type WorkerState = 'ready' | 'draining' | 'gone';
/** How the page names the pool of a card's `WorkerRole` (proto/wire.ts): `agg` → 'aggregated'. */
export type PoolRole = 'aggregated' | 'prefill' | 'decode';

export interface WorkerView {
  /** 16 hex digits. */
  instanceId: string;
  /** The worker's name from its card (`runtime up`'s agg-0, decode-1, embed-0, …), when it has one. */
  name?: string;
  state: WorkerState;
  /**
   * From the worker's latest `load_metrics`: 0 before the first, and 0 once that report is
   * stale (older than `LOAD_REPORT_STALE_MS`, proto/wire.ts: the worker stopped reporting).
   */
  running: number;
  waiting: number;
  kvUsedBlocks: number;
  kvTotalBlocks: number;
  /** Whether running / waiting / kvUsedBlocks come from a current report. */
  loadFresh: boolean;
  /** Cached prompt tokens / prompt tokens over requests this frontend finished on the worker; null before any. */
  prefixHitRate: number | null;
  /** Last `load_metrics` or card sighting, ms since epoch. */
  lastSeen: number;
  /** LoRA adapters resident on the worker (its card's `loras`), when any. */
  loras?: string[];
  /** KV tiers below its engine pool (G2 host, G3 disk), only on workers that have them; not on gone workers. */
  tiers?: WorkerTierView;
  /** Speculative decoding, only on workers that speculate; not on gone workers. */
  spec?: WorkerSpecView;
  /** When state is 'gone': when it went (the page drops it after a while). */
  goneAt?: number;
}

/** A worker's KV tiers (its load report's `tiers`, proto/wire.ts `LoadTierReport`). */
export interface WorkerTierView {
  /** Blocks held now and the tier's size in blocks; disk capacity 0 = no disk tier. */
  hostBlocks: number;
  hostCapacity: number;
  diskBlocks: number;
  diskCapacity: number;
  /**
   * Share of the prompt tokens the worker looked up in its prefix cache since it started that
   * each tier served (device = the engine pool, host/disk = onboarded from G2/G3; they sum to at
   * most 1); null before its first lookup.
   */
  hitRate: { device: number; host: number; disk: number } | null;
}

/** A worker's speculative decoding since it started (its load report's `spec`, proto/wire.ts `LoadSpecReport`). */
export interface WorkerSpecView {
  /** Verify steps of one sequence, and draft tokens verified. */
  drafts: number;
  draftTokens: number;
  /** Accepted draft tokens / draft tokens verified; null before the first verify. */
  acceptanceRate: number | null;
  /** Tokens a verify step returned on average: 1 + accepted / drafts; null before the first. */
  meanAcceptedLength: number | null;
}

export interface PoolView {
  role: PoolRole;
  workers: WorkerView[];
}

/** What the page shows of a model beside its name: its class and parameter counts (from its workers' cards). */
export interface ModelInfo {
  architecture?: string;
  parameters?: { total: number; active: number };
}

export interface ModelView extends ModelInfo {
  name: string;
  pools: PoolView[];
}

export interface Percentiles {
  p50: number | null;
  p90: number | null;
  p99: number | null;
}

export interface FrontendView {
  /** 16 hex digits: this frontend's instance id. */
  instanceId: string;
  /** Process start, ms since epoch. */
  startedAt: number;
  /** Connected dashboard clients (this one included). */
  dashboardClients: number;
  draining: boolean;
}

export interface TrafficView {
  /** Requests started per second over the last interval. */
  requestRate: number;
  /** Finished requests per second over the last interval. */
  finishRate: number;
  /** Over requests whose first token came in the last `windowMs` (ms). */
  ttft: Percentiles;
  /** Mean inter-token latency per request (ms), over requests finished in the last `windowMs`. */
  itl: Percentiles;
  /** Percentile window length, ms. */
  windowMs: number;
  /** Generation requests admitted and not finished. */
  inflight: number;
  /** Sum of the workers' waiting queues (load_metrics). */
  queued: number;
  /** Since start, by error code (`unavailable`, `deadline_exceeded`, `cancelled`, …). */
  errorsByType: Record<string, number>;
  /** Since start. */
  migrations: number;
  /** Since start: requests started. */
  requestsTotal: number;
  /** Since start: requests finished (any outcome). */
  finishedTotal: number;
}

export interface RoutingCandidate {
  instanceId: string;
  /** Prompt blocks already cached on the worker (kv mode), else 0. */
  overlapBlocks: number;
  /** The selector's cost (lower wins); null when the mode has none (round-robin, random). */
  cost: number | null;
  /** `--router-cost latency`: the router's predicted TTFT and ITL for this worker (ms). */
  predictedTtftMs?: number;
  predictedItlMs?: number;
}

export interface RoutingDecision {
  t: number;
  requestId: string;
  model: string;
  /** Which router decided: 'frontend' (embedded) or the standalone router's instance id. */
  decidedBy: string;
  promptBlocks: number;
  candidates: RoutingCandidate[];
  winner: string;
  /** Routed → first token, as this frontend measured it (beside the winner's predictedTtftMs). */
  measuredTtftMs?: number;
}

export interface RoutingView {
  mode: string;
  /** Blocks in the KV index (kv mode, embedded router). */
  indexBlocks?: number;
  /** Event gaps recovered by replay (kv mode). */
  gapRecoveries?: number;
  /** Newest last; at most ROUTING_DECISIONS_KEPT. */
  decisions: RoutingDecision[];
}

export interface DisaggView {
  /**
   * Share of the requests finished since start that went prefill → decode (0..1):
   * `disaggregatedTotal / traffic.finishedTotal`, the same population as the count.
   */
  share: number;
  /** Since start. */
  disaggregatedTotal: number;
  /** KV bytes moved per second over the last interval, in GB/s (1e9). */
  transferGBps: number;
  /** Over transfers completed in the window. */
  transferLatencyMs: { p50: number | null; p99: number | null };
  /** Since start: requests that ran aggregated because prefill could not be done remotely. */
  fallbacks: number;
}

export interface PlannerPoolView {
  name: string;
  current: number;
  desired: number;
}

export interface PlannerDecisionView {
  t: number;
  pool: string;
  from: number;
  to: number;
  reason: string;
}

export interface PlannerView {
  /** Instance id of the planner that published last. */
  source: string;
  /** When its last message came. */
  lastSeen: number;
  predicted: { rate: number; isl: number; osl: number } | null;
  observed: { rate: number; isl: number; osl: number } | null;
  pools: PlannerPoolView[];
  /** Newest last; at most PLANNER_DECISIONS_KEPT. */
  decisions: PlannerDecisionView[];
}

export interface DashboardSnapshot {
  t: number;
  frontend: FrontendView;
  models: ModelView[];
  traffic: TrafficView;
  routing: RoutingView;
  disagg: DisaggView;
  /** Absent until a planner has published. */
  planner?: PlannerView;
}

/** `GET /dashboard/api/requests/{id}`. */
export interface RequestRecord {
  requestId: string;
  model: string;
  /** The API it came in through (`chat_completions`, `messages`, …: the metrics' `endpoint` label). */
  endpoint?: string;
  /**
   * The worker the request was routed to (decode worker when disaggregated), then the decode
   * worker that actually served if it differs. Migration targets are not listed yet: the
   * pipeline's migration hook does not name the request.
   */
  workers: string[];
  /** Prefill instance when the request was disaggregated. */
  prefillWorker?: string;
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
  /** Routing decision for the first attempt, when one was recorded. */
  routing?: RoutingDecision;
  timings: {
    /** Arrival → routed (preprocessing, admission). */
    queueMs: number | null;
    /** Remote prefill call (disaggregated), else null. */
    prefillMs: number | null;
    /** KV transfer (disaggregated), else null. */
    transferMs: number | null;
    /** First token → end. */
    decodeMs: number | null;
    ttftMs: number | null;
    totalMs: number;
  };
  finishReason: string | null;
  /** Error code when it failed. */
  error?: string;
  /** Moves of this request to another worker; the fleet-wide count is `traffic.migrations`. */
  migrations: number;
  startedAt: number;
}
