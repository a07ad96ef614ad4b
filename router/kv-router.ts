/**
 * `KvRouter`: the pure facade the adapters (frontend `--router-mode kv`, `runtime router`)
 * drive. It owns one prefix index (event-fed `RadixIndexer`, or `ApproxIndexer` with
 * `useKvEvents: false`), the `EventSequencer`, and `ActiveSequences`. Every input is an
 * argument (events, candidates, loads, `nowMs`) and every output is data (decisions, recovery
 * requests, sync updates): no I/O, timers or globals.
 *
 * One admission path:  select (pure) → admit (books) → caller dispatches;
 * if dispatch fails the caller rolls back with onFinished(requestId).
 */
import type { InstanceId, KvEvent, LoadMetrics } from '../proto/wire.js';
import { ActiveSequences, type ActiveSequenceUpdate, type WorkerActiveLoad } from './active-sequences.js';
import { ApproxIndexer } from './approx-indexer.js';
import { DEFAULT_COST_WEIGHTS, requestBlocksOf, workerCost, type CostRow, type CostWeights } from './cost.js';
import { EventSequencer, type EventSequencerOptions, type SequencerStats } from './event-sequencer.js';
import { BlockHasher } from './block-hasher.js';
import type { IndexStats, KvIndexer } from './indexer.js';
import { DEFAULT_OVERLOAD_POLICY, overloadReason, type OverloadPolicy } from './overload.js';
import { RadixIndexer } from './radix-indexer.js';
import { SeededRandom, type Rng } from '../runtime/random.js';
import type { KvDumpResponse, KvReplayResponse, RouterSyncMessage } from '../proto/wire.js';
import type { RecoveryAction } from './recovery-protocol.js';
import { updateFromWire, updateToWire } from './router-sync.js';
import { selectIndex } from './selector.js';

export interface KvRouterConfig {
  blockSize: number;
  /** `--kv-overlap-score-credit` and `--router-prefill-load-scale`. */
  weights: CostWeights;
  /** `--router-temperature`: 0 = argmin with random tie-break. */
  temperature: number;
  /** False (`--no-kv-events`): learn cache contents from our own decisions instead. */
  useKvEvents: boolean;
  /** Approximate mode: how long a routed prefix is assumed cached. */
  approxTtlMs: number;
  /** Active sequences with no update for this long are presumed lost. */
  activeSequenceTtlMs: number;
  overload: OverloadPolicy;
  /** Retry-After hint when every worker is over threshold. */
  busyRetryAfterMs: number;
  seed: number;
  /** Identifies this replica in `router_sync` messages. */
  replicaId: string;
  sequencer: Partial<EventSequencerOptions>;
  /** Multi-LoRA: cost (in blocks) added for a worker that would have to load the request's adapter first. */
  loraLoadPenaltyBlocks?: number;
}

/** About what loading a rank-16 adapter costs next to prefilling blocks (docs/lora.md). */
export const DEFAULT_LORA_LOAD_PENALTY_BLOCKS = 32;

export const DEFAULT_KV_ROUTER_CONFIG: KvRouterConfig = {
  blockSize: 16,
  weights: DEFAULT_COST_WEIGHTS,
  temperature: 0,
  useKvEvents: true,
  approxTtlMs: 120_000,
  activeSequenceTtlMs: 600_000,
  overload: DEFAULT_OVERLOAD_POLICY,
  busyRetryAfterMs: 1_000,
  seed: 0x5eed,
  replicaId: 'router-0',
  sequencer: {},
};

export interface RouteRequest {
  requestId: string;
  /** Prompt token ids. Or pass `localHashes` (and `promptTokens`) when already hashed. */
  tokens?: ArrayLike<number>;
  localHashes?: readonly bigint[];
  /** Sequence hashes matching `localHashes`; computed when absent. */
  seqHashes?: readonly bigint[];
  /** Defaults to tokens.length, else localHashes.length × blockSize. */
  promptTokens?: number;
  /** Decode leg after a remote prefill: routed with no overlap credit (docs/design.md step 3). */
  noOverlapCredit?: boolean;
  /** Multi-LoRA: the adapter's lora_id; tokens are hashed under it, so only its blocks match. */
  loraId?: number;
  /** Multi-LoRA: the candidates that hold the adapter; the others pay `loraLoadPenaltyBlocks`. */
  loraResident?: readonly InstanceId[];
}

export interface WorkerCandidate {
  instanceId: InstanceId;
  /** From the model card; used to turn booked blocks into KV usage. */
  totalBlocks?: number;
  /** Latest `load_metrics` from this worker, when any. */
  load?: LoadMetrics;
}

export interface RouteDecision {
  requestId: string;
  instanceId: InstanceId;
  /** Leading prompt blocks the chosen worker already caches. */
  overlapBlocks: number;
  requestBlocks: number;
  promptTokens: number;
  /** Every candidate's cost line, chosen one included. */
  costs: CostRow[];
  localHashes: readonly bigint[];
  seqHashes: readonly bigint[];
}

export type RouteResult =
  | { kind: 'routed'; decision: RouteDecision }
  /** Every candidate is over its load threshold: the frontend answers 429/503 + Retry-After. */
  | { kind: 'all_busy'; retryAfterMs: number; costs: CostRow[] }
  | { kind: 'no_candidates' };

export interface KvRouterStats {
  decisions: number;
  overlapBlocksRouted: number;
  eventsApplied: number;
  allBusy: number;
  index: IndexStats;
  sequencer: SequencerStats;
  activeSequences: number;
}

export class KvRouter {
  readonly config: KvRouterConfig;
  private readonly events: RadixIndexer | undefined;
  private readonly approx: ApproxIndexer | undefined;
  private readonly index: KvIndexer;
  private readonly sequencer: EventSequencer;
  private readonly active: ActiveSequences;
  private readonly rng: Rng;
  private readonly hasher: BlockHasher;
  private syncSeq = 0;
  private readonly counters = { decisions: 0, overlapBlocksRouted: 0, eventsApplied: 0, allBusy: 0 };

  constructor(config: Partial<KvRouterConfig> = {}, rng?: Rng) {
    this.config = { ...DEFAULT_KV_ROUTER_CONFIG, ...config };
    if (this.config.useKvEvents) this.index = this.events = new RadixIndexer();
    else this.index = this.approx = new ApproxIndexer({ ttlMs: this.config.approxTtlMs });
    this.sequencer = new EventSequencer(this.config.sequencer);
    this.active = new ActiveSequences({ blockSize: this.config.blockSize, ttlMs: this.config.activeSequenceTtlMs });
    this.rng = rng ?? new SeededRandom(this.config.seed);
    this.hasher = new BlockHasher(this.config.blockSize);
  }

  /** Pick a worker. No booking: follow with `admit`, or use `route` for both. */
  select(req: RouteRequest, candidates: readonly WorkerCandidate[]): RouteResult {
    if (candidates.length === 0) return { kind: 'no_candidates' };
    const { local, seq, promptTokens } = this.prepare(req);
    const requestBlocks = requestBlocksOf(promptTokens, this.config.blockSize);
    const overlap = this.index.findMatches(local);
    const weights = req.noOverlapCredit ? { ...this.config.weights, overlapScoreCredit: 0 } : this.config.weights;
    const costs: CostRow[] = new Array(candidates.length);
    const eligible: number[] = [];
    for (let i = 0; i < candidates.length; i++) {
      const c = candidates[i]!;
      const booked = this.active.load(c.instanceId);
      const busy = overloadReason(c.load, booked, c.totalBlocks, this.config.overload) !== undefined;
      const indexed = overlap.depths.get(c.instanceId) ?? 0;
      // A prefix still being prefilled there is not in the index yet (events follow the
      // prefill), but it will be cached by the time this request is scheduled.
      const inflight = booked.activeSequences > 0 ? this.active.sharedPrefixBlocks(c.instanceId, seq) : 0;
      const input = {
        instanceId: c.instanceId,
        cachedBlocks: Math.min(Math.max(indexed, inflight), requestBlocks),
        pendingPrefillBlocks: booked.pendingPrefillBlocks,
        activeDecodeBlocks: booked.activeBlocks,
      };
      const row = workerCost(requestBlocks, input, weights, busy);
      if (req.loraResident !== undefined && !req.loraResident.includes(c.instanceId)) {
        row.cost += this.config.loraLoadPenaltyBlocks ?? DEFAULT_LORA_LOAD_PENALTY_BLOCKS;
      }
      row.indexedBlocks = indexed;
      row.inflightBlocks = inflight;
      costs[i] = row;
      if (!busy) eligible.push(i);
    }
    if (eligible.length === 0) return { kind: 'all_busy', retryAfterMs: this.config.busyRetryAfterMs, costs };
    const pick = eligible[selectIndex(eligible.map((i) => costs[i]!.cost), this.config.temperature, this.rng)]!;
    const chosen = costs[pick]!;
    return {
      kind: 'routed',
      decision: {
        requestId: req.requestId,
        instanceId: chosen.instanceId,
        overlapBlocks: chosen.cachedBlocks,
        requestBlocks,
        promptTokens,
        costs,
        localHashes: local,
        seqHashes: seq,
      },
    };
  }

  /** Book a selected decision. Returns the update to publish on `router_sync`, if it booked. */
  admit(decision: RouteDecision, nowMs: number): ActiveSequenceUpdate | undefined {
    const update: ActiveSequenceUpdate = {
      type: 'add',
      requestId: decision.requestId,
      workerId: decision.instanceId,
      blockHashes: decision.seqHashes,
      promptTokens: decision.promptTokens,
      overlapBlocks: decision.overlapBlocks,
    };
    if (!this.active.apply(update, nowMs)) return undefined;
    this.approx?.record(decision.instanceId, decision.localHashes, nowMs);
    this.counters.decisions++;
    this.counters.overlapBlocksRouted += decision.overlapBlocks;
    return update;
  }

  /** Expire, select and admit in one step. */
  route(req: RouteRequest, candidates: readonly WorkerCandidate[], nowMs: number): RouteResult {
    this.expire(nowMs);
    const result = this.select(req, candidates);
    if (result.kind === 'routed') this.admit(result.decision, nowMs);
    else if (result.kind === 'all_busy') this.counters.allBusy++;
    return result;
  }

  onFirstToken(requestId: string, nowMs: number): ActiveSequenceUpdate | undefined {
    const u: ActiveSequenceUpdate = { type: 'prefill_done', requestId };
    return this.active.apply(u, nowMs) ? u : undefined;
  }

  /** Stream ended, was cancelled, or dispatch failed (rollback of `admit`). */
  onFinished(requestId: string, nowMs: number): ActiveSequenceUpdate | undefined {
    const u: ActiveSequenceUpdate = { type: 'free', requestId };
    return this.active.apply(u, nowMs) ? u : undefined;
  }

  /** Wrap local updates for publishing on `router_sync`. */
  syncMessage(updates: readonly ActiveSequenceUpdate[]): RouterSyncMessage {
    return { replicaId: this.config.replicaId, seq: this.syncSeq++, updates: updates.map(updateToWire) };
  }

  /** Apply another replica's updates; returns how many changed our view. */
  applySync(message: RouterSyncMessage, nowMs: number): number {
    if (message.replicaId === this.config.replicaId || !Array.isArray(message.updates)) return 0;
    let applied = 0;
    for (const w of message.updates) {
      const u = updateFromWire(w);
      if (u !== undefined && this.active.apply(u, nowMs)) applied++;
    }
    return applied;
  }

  /** A worker appeared in discovery. Event mode asks for its full block set. */
  addWorker(workerId: InstanceId, nowMs: number): RecoveryAction[] {
    return this.events === undefined ? [] : this.sequencer.discover(workerId, nowMs);
  }

  /** A worker's instance went away: drop its blocks and bookings. */
  removeWorker(workerId: InstanceId): void {
    this.index.removeWorker(workerId);
    this.sequencer.forget(workerId);
    this.active.removeWorker(workerId);
  }

  /** One KV event (live or replayed). Returns recovery requests to send. */
  applyEvent(event: KvEvent, nowMs: number): RecoveryAction[] {
    if (this.events === undefined) return [];
    const step = this.sequencer.accept(event, nowMs);
    this.applyReady(step.ready);
    return step.actions;
  }

  applyDump(dump: KvDumpResponse, nowMs: number): RecoveryAction[] {
    if (this.events === undefined) return [];
    const verdict = this.sequencer.acceptDump(dump.workerId, dump.nextEventId, nowMs);
    if (!verdict.accepted) return verdict.actions;
    this.events.loadWorker(dump.workerId, dump.events);
    this.applyReady(verdict.ready);
    return verdict.actions;
  }

  applyReplay(response: KvReplayResponse, nowMs: number): RecoveryAction[] {
    if (this.events === undefined) return [];
    if (response.type === 'too_old') return this.sequencer.replayTooOld(response.workerId, nowMs);
    const actions: RecoveryAction[] = [];
    for (const e of response.events) actions.push(...this.applyEvent(e, nowMs));
    return actions;
  }

  /** Housekeeping by time: expiry, and re-asking for unanswered recovery requests. */
  tick(nowMs: number): RecoveryAction[] {
    this.expire(nowMs);
    return this.events === undefined ? [] : this.sequencer.tick(nowMs);
  }

  /** Drop stale active sequences and approximate-mode entries; returns expired request ids. */
  expire(nowMs: number): string[] {
    this.approx?.expire(nowMs);
    return this.active.expire(nowMs);
  }

  workerLoad(workerId: InstanceId): WorkerActiveLoad {
    return this.active.load(workerId);
  }

  /** The event-fed index (event mode only): dump/load, blocksOf, anomalies. */
  get eventIndex(): RadixIndexer | undefined {
    return this.events;
  }

  get indexer(): KvIndexer {
    return this.index;
  }

  stats(): KvRouterStats {
    return {
      ...this.counters,
      index: this.index.stats(),
      sequencer: this.sequencer.stats(),
      activeSequences: this.active.size,
    };
  }

  private applyReady(ready: readonly KvEvent[]): void {
    for (const e of ready) {
      this.events!.applyEvent(e.workerId, e.data);
      this.counters.eventsApplied++;
    }
  }

  private prepare(req: RouteRequest): { local: readonly bigint[]; seq: readonly bigint[]; promptTokens: number } {
    if (req.localHashes !== undefined) {
      const seq = req.seqHashes ?? this.hasher.sequence(req.localHashes);
      const promptTokens = req.promptTokens ?? req.tokens?.length ?? req.localHashes.length * this.config.blockSize;
      return { local: req.localHashes, seq, promptTokens };
    }
    const tokens = req.tokens ?? [];
    const { local, seq } = this.hasher.both(tokens, req.loraId);
    return { local, seq, promptTokens: req.promptTokens ?? tokens.length };
  }
}
