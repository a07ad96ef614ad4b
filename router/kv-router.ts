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
import type { InstanceId, KvEvent } from '../proto/wire.js';
import { ActiveSequences, type ActiveSequenceUpdate, type WorkerActiveLoad } from './active-sequences.js';
import { ApproxIndexer } from './approx-indexer.js';
import { DEFAULT_DISK_HIT_WEIGHT, DEFAULT_HOST_HIT_WEIGHT, recomputeMsPerBlock, requestBlocksOf, tierHitWeight, workerCost, type CostRow, type CostWeights } from './cost.js';
import { LoraDemand, LORA_SLOT_WAIT_SHARE, loraPrefetchTarget, loraSlotWaits } from './lora-affinity.js';
import { DEFAULT_LATENCY_COST, LatencyCost } from './latency-cost.js';
import type { TierHit } from './latency-estimator.js';
import { stepTimeModel, type ParameterCounts, type PerfModel } from '../perf-model/index.js';
import { EventSequencer } from './event-sequencer.js';
import { BlockHasher } from './block-hasher.js';
import type { KvIndexer } from './indexer.js';
import { overloadReason, refusalReason, refuses } from './overload.js';
import { RadixIndexer } from './radix-indexer.js';
import { LowerTierIndex } from './tier-index.js';
import { isLowerTierEvent } from '../proto/wire.js';
import { SeededRandom, type Rng } from '../runtime/random.js';
import type { KvDumpResponse, KvReplayResponse, RouterSyncMessage } from '../proto/wire.js';
import type { RecoveryAction } from './recovery-protocol.js';
import { updateFromWire, updateToWire } from './router-sync.js';
import { selectIndex } from './selector.js';
import { affinityPool, markHolders, type AffinityView, type PrefixAffinityPolicy } from './prefix-affinity.js';
import { DEFAULT_KV_ROUTER_CONFIG, type KvRouterConfig, type KvRouterStats, type RouteDecision, type RouteRequest, type RouteResult, type WorkerCandidate } from './kv-router-config.js';

export { DEFAULT_KV_ROUTER_CONFIG, type KvRouterConfig, type KvRouterStats, type RouteDecision, type RouteRequest, type RouteResult, type WorkerCandidate } from './kv-router-config.js';

export class KvRouter {
  readonly config: KvRouterConfig;
  private readonly events: RadixIndexer | undefined;
  /** Host/disk tier blocks per worker (event mode). */
  readonly tiers = new LowerTierIndex();
  /** Per worker, its last reported tier costs (`measuredTierWeights`). */
  private readonly tierCosts = new Map<InstanceId, WorkerTierCosts>();
  /** Multi-LoRA: each adapter's share of recent adapter requests (prefetch by popularity). */
  private readonly loraDemand = new LoraDemand();
  private readonly approx: ApproxIndexer | undefined;
  private readonly index: KvIndexer;
  private readonly sequencer: EventSequencer;
  private readonly active: ActiveSequences;
  private readonly rng: Rng;
  private readonly hasher: BlockHasher;
  /** Set with `cost: 'latency'`: re-scores each cost row in ms and calibrates per worker. */
  readonly latency: LatencyCost | undefined;
  private syncSeq = 0;
  /** The latest `nowMs` any call brought: `select` takes no time, the calibration's ageing needs one. */
  private latestMs = 0;
  private readonly counters = { decisions: 0, overlapBlocksRouted: 0, eventsApplied: 0, allBusy: 0, saturated: 0 };

  constructor(config: Partial<KvRouterConfig> = {}, rng?: Rng) {
    this.config = { ...DEFAULT_KV_ROUTER_CONFIG, ...config };
    if (this.config.useKvEvents) this.index = this.events = new RadixIndexer();
    else this.index = this.approx = new ApproxIndexer({ ttlMs: this.config.approxTtlMs });
    this.sequencer = new EventSequencer(this.config.sequencer);
    this.active = new ActiveSequences({ blockSize: this.config.blockSize, ttlMs: this.config.activeSequenceTtlMs });
    this.rng = rng ?? new SeededRandom(this.config.seed);
    this.hasher = new BlockHasher(this.config.blockSize);
    if (this.config.cost === 'latency') {
      const perfModel = this.config.latency.perfModel ?? DEFAULT_LATENCY_COST.perfModel;
      this.latency = new LatencyCost({
        ...this.config.latency,
        estimator: { blockSize: this.config.blockSize, maxBatchedTokens: 8192, onboardMsPerToken: tierOnboardMsPerToken(perfModel, this.config.weights), ...this.config.latency.estimator },
      });
    }
  }

  /**
   * Pick a worker. No booking: follow with `admit`, or use `route` for both. `pinned`: the
   * request goes to the one candidate whatever its load (never `all_busy`; booking a request
   * routed elsewhere).
   */
  select(req: RouteRequest, candidates: readonly WorkerCandidate[], opts: { pinned?: boolean } = {}): RouteResult {
    if (candidates.length === 0) return { kind: 'no_candidates' };
    const { local, seq, promptTokens } = this.prepare(req);
    const requestBlocks = requestBlocksOf(promptTokens, this.config.blockSize);
    const overlap = this.index.findMatches(local);
    const weights = req.noOverlapCredit ? { ...this.config.weights, overlapScoreCredit: 0 } : this.config.weights;
    const costs: CostRow[] = new Array(candidates.length);
    const views: AffinityView[] = new Array(candidates.length);
    const loraPenalties: number[] | undefined = req.loraResident !== undefined ? new Array(candidates.length) : undefined;
    let slotCharges: number[] | undefined;
    const eligible: number[] = [];
    for (let i = 0; i < candidates.length; i++) {
      const c = candidates[i]!;
      const booked = this.active.load(c.instanceId);
      const busy = overloadReason(c.load, booked, c.totalBlocks, this.config.overload) !== undefined || refusalReason(c.load, booked, c.totalBlocks, this.config.refusal) !== undefined;
      const indexed = overlap.depths.get(c.instanceId) ?? 0;
      // A prefix still being prefilled there is not in the index yet (events follow the
      // prefill), but it will be cached by the time this request is scheduled.
      const inflight = booked.activeSequences > 0 ? this.active.sharedPrefixBlocks(c.instanceId, seq) : 0;
      const cachedBlocks = Math.min(Math.max(indexed, inflight), requestBlocks);
      // The prefix continues in the worker's host / disk tier: it onboards those blocks.
      const lower = this.events !== undefined && !req.noOverlapCredit ? this.tiers.hits(c.instanceId, seq, cachedBlocks) : undefined;
      const tierCost = lower !== undefined && lower.hostBlocks + lower.diskBlocks > 0 ? this.tierCostsOf(c) : undefined;
      const input = {
        instanceId: c.instanceId,
        cachedBlocks,
        pendingPrefillBlocks: booked.pendingPrefillBlocks,
        activeDecodeBlocks: booked.activeBlocks,
        ...(lower !== undefined && lower.hostBlocks + lower.diskBlocks > 0 ? { hostBlocks: lower.hostBlocks, diskBlocks: lower.diskBlocks } : {}),
        ...(tierCost !== undefined ? { hostHitWeight: tierCost.hostHitWeight, diskHitWeight: tierCost.diskHitWeight } : {}),
      };
      const row = workerCost(requestBlocks, input, weights, busy);
      row.indexedBlocks = indexed;
      row.inflightBlocks = inflight;
      if (this.latency !== undefined) this.scoreLatency(row, c, booked, promptTokens, tierCost);
      if (loraPenalties !== undefined) {
        const penalty = req.loraResident!.includes(c.instanceId) ? 0 : this.loraPenalty(c);
        loraPenalties[i] = penalty;
        row.cost += penalty;
      }
      if (req.loraId !== undefined) {
        const waits = loraSlotWaits(this.active.adaptersWith(c.instanceId, req.loraId), c.load?.maxLoras);
        if (waits > 0) {
          row.loraSlotWaits = waits;
          const charge = waits * LORA_SLOT_WAIT_SHARE * this.loraPenalty(c);
          row.cost += charge;
          (slotCharges ??= new Array<number>(candidates.length).fill(0))[i] = charge;
        }
      }
      costs[i] = row;
      views[i] = { totalBlocks: c.totalBlocks ?? c.load?.totalBlocks, usedBlocks: Math.max(booked.activeBlocks, c.load?.activeBlocks ?? 0) };
      if (!busy) eligible.push(i);
    }
    // A decode leg after a remote prefill holds nothing worth sticking to (it gets the KV sent).
    if (!req.noOverlapCredit) markHolders(costs, views, requestBlocks, this.config.prefixAffinity);
    const saturated = eligible.length === 0;
    if (saturated) {
      // Refused only by the opt-in policy, and only when it finds every candidate busy.
      const refusal = this.config.refusal;
      if (opts.pinned !== true && refuses(refusal) && candidates.every((c) => refusalReason(c.load, this.active.load(c.instanceId), c.totalBlocks, refusal) !== undefined)) {
        return { kind: 'all_busy', retryAfterMs: this.config.busyRetryAfterMs, costs };
      }
      for (let i = 0; i < candidates.length; i++) eligible.push(i);
    }
    const within = this.latency === undefined ? eligible : withinTargets(eligible, costs);
    const pool = affinityPool(within, costs, this.latency === undefined ? this.config.prefixAffinity : latencyAffinity(this.config.prefixAffinity), saturated);
    const pick = pool[selectIndex(pool.map((i) => costs[i]!.cost), this.config.temperature, this.rng)]!;
    const chosen = costs[pick]!;
    let loraPrefetch: InstanceId | undefined;
    if (loraPenalties !== undefined && req.loraId !== undefined) {
      this.loraDemand.note(req.loraId);
      // Slot waits pass; they are no reason to load the adapter on another worker.
      const rows = slotCharges === undefined ? costs : costs.map((r, i) => (slotCharges![i]! > 0 ? { ...r, cost: r.cost - slotCharges![i]! } : r));
      loraPrefetch = loraPrefetchTarget(rows, loraPenalties, pick, req.loraResident!.length, this.loraDemand.share(req.loraId));
    }
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
        ...(saturated ? { saturated: true } : {}),
        ...(pool !== within ? { affinity: true } : {}),
        ...(loraPrefetch !== undefined ? { loraPrefetch } : {}),
        ...(req.loraId !== undefined ? { loraId: req.loraId } : {}),
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
      ...(decision.loraId !== undefined ? { loraId: decision.loraId } : {}),
    };
    if (!this.active.apply(update, nowMs)) return undefined;
    const row = this.latency === undefined ? undefined : decision.costs.find((c) => c.instanceId === decision.instanceId);
    if (row !== undefined) this.latency!.admitted(decision.requestId, row, nowMs);
    this.approx?.record(decision.instanceId, decision.localHashes, nowMs);
    this.counters.decisions++;
    if (decision.saturated === true) this.counters.saturated++;
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
    if (nowMs > this.latestMs) this.latestMs = nowMs;
    this.latency?.firstToken(requestId, nowMs);
    const u: ActiveSequenceUpdate = { type: 'prefill_done', requestId };
    return this.active.apply(u, nowMs) ? u : undefined;
  }

  /**
   * Stream ended, was cancelled, or dispatch failed (rollback of `admit`). `outputTokens`, when
   * known, calibrates the worker's ITL (latency cost).
   */
  onFinished(requestId: string, nowMs: number, outputTokens?: number): ActiveSequenceUpdate | undefined {
    this.latency?.finished(requestId, nowMs, outputTokens);
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

  /**
   * The served model's parameter counts (its workers' model card, `parameters`). A latency cost
   * without a measured profile (`--router-perf-profile`) then predicts from the default fit
   * charged the model's active share (perf-model `stepTimeModel`: what the mocker sleeps and the
   * planner sizes with), and tier onboarding costs follow unless configured.
   */
  useModelParameters(params: ParameterCounts): void {
    if (this.latency === undefined || this.config.latency.perfModel !== undefined) return;
    const model = stepTimeModel(params);
    const onboardGiven = this.config.latency.estimator?.onboardMsPerToken !== undefined;
    this.latency.setPerfModel(model, onboardGiven ? undefined : tierOnboardMsPerToken(model, this.config.weights));
  }

  /** A worker's instance went away: drop its blocks and bookings. */
  removeWorker(workerId: InstanceId): void {
    this.index.removeWorker(workerId);
    this.tiers.removeWorker(workerId);
    this.tierCosts.delete(workerId);
    this.sequencer.forget(workerId);
    this.active.removeWorker(workerId);
    this.latency?.removeWorker(workerId);
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
    this.tiers.removeWorker(dump.workerId);
    for (const e of dump.events) if (isLowerTierEvent(e)) this.tiers.applyEvent(dump.workerId, e);
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
    if (nowMs > this.latestMs) this.latestMs = nowMs;
    this.approx?.expire(nowMs);
    this.latency?.expire(nowMs, this.config.activeSequenceTtlMs);
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

  /**
   * The latency cost's live view of a worker: the router's bookings (what it sent and has not
   * seen prefilled or finished), or the worker's own load report where that says more (another
   * router's traffic), and this request's cached prefix.
   */
  private scoreLatency(row: CostRow, c: WorkerCandidate, booked: WorkerActiveLoad, promptTokens: number, tierCost: WorkerTierCosts | undefined): void {
    const load = c.load;
    const total = c.totalBlocks ?? load?.totalBlocks;
    const bookedUsage = total !== undefined && total > 0 ? booked.activeBlocks / total : 0;
    this.latency!.score(
      row,
      {
        queuedPrefillTokens: Math.max(booked.pendingPrefillTokens, load?.queuedPrefillTokens ?? 0),
        runningSequences: Math.max(booked.activeSequences, load !== undefined ? load.numRunning + load.numWaiting : 0),
        kvUsage: Math.max(bookedUsage, load?.kvUsage ?? 0),
        ...(total !== undefined ? { totalBlocks: total, usedBlocks: Math.max(booked.activeBlocks, load?.activeBlocks ?? 0) } : {}),
      },
      { promptTokens, cachedTokens: Math.min(promptTokens, row.cachedBlocks * this.config.blockSize), tierHits: tierHitsOf(row, this.config.blockSize, tierCost) },
      this.latestMs,
    );
  }

  /**
   * What a worker without the request's adapter pays: its reported load time (else
   * `loraLoadMs`), in ms for the latency cost, in blocks the perf model recomputes in that time
   * for the block cost; or the fixed `loraLoadPenaltyBlocks` when set.
   */
  private loraPenalty(c: WorkerCandidate): number {
    const model = this.latency?.config.perfModel ?? DEFAULT_LATENCY_COST.perfModel;
    const bs = this.config.blockSize;
    const fixed = this.config.loraLoadPenaltyBlocks;
    if (fixed !== undefined) return this.latency !== undefined ? model.prefillMs(fixed * bs) : fixed;
    const ms = c.load?.loraLoadMs ?? this.config.loraLoadMs;
    return this.latency !== undefined ? ms : ms / recomputeMsPerBlock((t) => model.prefillMs(t), bs);
  }

  /**
   * The tier costs a worker reported (kept from its last report that had them, so a stale
   * report does not lose them), when `measuredTierWeights`; else undefined (the flags' weights).
   */
  private tierCostsOf(c: WorkerCandidate): WorkerTierCosts | undefined {
    if (!this.config.measuredTierWeights) return undefined;
    const t = c.load?.tiers;
    if (t?.onboardMsPerBlock !== undefined && t.recomputeMsPerBlock !== undefined) {
      const { host, disk } = t.onboardMsPerBlock;
      this.tierCosts.set(c.instanceId, {
        hostOnboardMsPerBlock: host,
        diskOnboardMsPerBlock: disk,
        hostHitWeight: tierHitWeight(host, t.recomputeMsPerBlock),
        diskHitWeight: tierHitWeight(disk, t.recomputeMsPerBlock),
      });
    }
    return this.tierCosts.get(c.instanceId);
  }

  private applyReady(ready: readonly KvEvent[]): void {
    for (const e of ready) {
      if (isLowerTierEvent(e.data)) this.tiers.applyEvent(e.workerId, e.data);
      else this.events!.applyEvent(e.workerId, e.data);
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

/**
 * Latency cost: candidates within the SLA targets, and among those the ones with room in their
 * KV pool for this request (no predicted KV wait); each filter applies only while it leaves
 * someone (latency-cost.ts).
 */
function withinTargets(eligible: number[], costs: readonly CostRow[]): number[] {
  const within = eligible.filter((i) => costs[i]!.latency?.overTarget !== true);
  return within.length > 0 ? within : eligible;
}

/**
 * Onboarding cost per token of each lower KV tier for the latency cost, read off the same
 * weights the block cost uses: a hit saves `weight` of the block's prefill, so copying it up
 * costs the rest (docs/kv-tiers.md).
 */
function tierOnboardMsPerToken(model: PerfModel, weights: CostWeights): Record<string, number> {
  const prefillMsPerToken = model.prefillMs(1024) / 1024;
  return {
    cpu: (1 - (weights.hostHitWeight ?? DEFAULT_HOST_HIT_WEIGHT)) * prefillMsPerToken,
    disk: (1 - (weights.diskHitWeight ?? DEFAULT_DISK_HIT_WEIGHT)) * prefillMsPerToken,
  };
}

const NO_TIER_HITS: readonly TierHit[] = [];

function tierHitsOf(row: CostRow, blockSize: number, tierCost: WorkerTierCosts | undefined): readonly TierHit[] {
  const host = row.hostBlocks ?? 0;
  const disk = row.diskBlocks ?? 0;
  if (host + disk === 0) return NO_TIER_HITS;
  const perToken = (ms: number | undefined) => (ms !== undefined ? { msPerToken: ms / blockSize } : {});
  return [
    ...(host > 0 ? [{ tier: 'cpu', tokens: host * blockSize, ...perToken(tierCost?.hostOnboardMsPerBlock) }] : []),
    ...(disk > 0 ? [{ tier: 'disk', tokens: disk * blockSize, ...perToken(tierCost?.diskOnboardMsPerBlock) }] : []),
  ];
}

/**
 * Prefix affinity under the latency cost: a holder is overloaded past 1.5× the others' mean
 * predicted cost (ms, calibrated per worker), not their block load, which cannot tell a
 * half-speed worker from a fast one (bench/latency-routing-virtual.ts: the block load made the
 * latency cost no better than blocks on a heterogeneous fleet).
 */
function latencyAffinity(policy: PrefixAffinityPolicy): PrefixAffinityPolicy {
  return { ...policy, maxLoadRatio: LATENCY_AFFINITY_LOAD_RATIO, load: 'cost' };
}

const LATENCY_AFFINITY_LOAD_RATIO = 1.5;

/** One worker's tier costs as it reported them, and the hit weights they give. */
interface WorkerTierCosts {
  hostOnboardMsPerBlock: number;
  diskOnboardMsPerBlock: number;
  hostHitWeight: number;
  diskHitWeight: number;
}
