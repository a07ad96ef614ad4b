/**
 * Continuous-batching scheduler (pure: no I/O, no timers). One step at a time:
 *
 *   schedule()          → a plan (StepBatch) under the token budget; blocks are reserved
 *   engine.step(batch)  → sampled tokens (done by the caller)
 *   applyStepResult(r)  → computed counters advance, full blocks enter the prefix cache,
 *                         tokens are appended, stop conditions end sequences
 *
 * Order inside a step: running decodes first, then running (chunked) prefills, then waiting
 * sequences FCFS. When a running sequence cannot get a block, the newest running sequence is
 * preempted by recompute: its blocks are freed and it goes back to the front of the waiting
 * queue with 0 computed tokens; on resume its prefix is usually still cached.
 *
 * Which waiting sequences join, and how each gets its blocks (prefix hit, remote import,
 * onboarding from the KV tiers, deferral behind a running sequence computing the same prefix:
 * shared-prefill.ts), is admission.ts.
 */
import type { StepResult, StepSequence } from '../engines/engine.js';
import { BlockManager } from '../block-manager/block-manager.js';
import { SEQUENCE_STATUS, Sequence, type SequenceInit } from '../sequence.js';
import { SharedPrefillGate } from './shared-prefill.js';
import { Admission, refuseSequence, type AdmissionQueues } from './admission.js';
import {
  SCHEDULER_DEFAULTS,
  type AddSequenceResult,
  type CompleteTransferResult,
  type KvImportStart,
  type KvOnboardStart,
  type FinishedSequence,
  type SchedulePlan,
  type SchedulerConfig,
  type SchedulerLoad,
  type SequenceOutput,
  type StepOutcome,
} from './types.js';
import type { FinishReason } from '../../proto/wire.js';
import type { Speculator } from '../speculative/speculator.js';
import { draftBlocksFit, planDrafts } from './draft-plan.js';

interface PlannedSeq {
  seq: Sequence;
  /** Tokens computed this step: a prefill chunk, or the last token plus numDrafts drafts. */
  numNewTokens: number;
  sample: boolean;
  /** Speculative decoding: drafts verified after the last token (part of numNewTokens). */
  numDrafts: number;
  /** Unscheduled again because a later sequence in the same step preempted it. */
  dropped: boolean;
  /** Its inline onboard's copy failed: this step's output for it is void; it recomputes from here. */
  redoFrom?: number;
}

export class Scheduler {
  readonly blockManager: BlockManager;
  readonly blockSize: number;
  readonly maxNumBatchedTokens: number;
  readonly maxNumSeqs: number;
  readonly maxLoras: number | undefined;
  readonly maxModelLen: number;
  numPreemptions = 0;
  numSteps = 0;
  /** Sequence-steps spent deferred behind a running sequence computing the same prefix. */
  numDeferrals = 0;

  private readonly waiting: Sequence[] = [];
  private readonly running: Sequence[] = [];
  private readonly pinned = new Map<number, Sequence>();
  /** Admitted remote-prefill sequences whose KV import is in flight (not in running). */
  private readonly transferring = new Map<number, Sequence>();
  private readonly bySeqId = new Map<number, Sequence>();
  private inFlight: PlannedSeq[] | undefined;
  private nextSeqId = 1;
  /** Which waiting sequences join a step (admission.ts), over the queues above. */
  private readonly admission: Admission;
  private readonly queues: AdmissionQueues = { waiting: this.waiting, running: this.running, transferring: this.transferring };
  /** Prefix tokens onboarded from the KV tiers, and their blocks per tier (counters). */
  numOnboardedTokens = 0;
  /** The plan in flight's inline onboards: sequence → tokens it had from the pool itself. */
  private readonly inlineOnboardFrom = new Map<number, number>();
  /** Speculative decoding's policy and counters; undefined when off. */
  readonly speculator: Speculator | undefined;

  constructor(config: SchedulerConfig) {
    this.blockSize = config.blockSize ?? SCHEDULER_DEFAULTS.blockSize;
    this.maxNumBatchedTokens = config.maxNumBatchedTokens ?? SCHEDULER_DEFAULTS.maxNumBatchedTokens;
    this.maxNumSeqs = config.maxNumSeqs ?? SCHEDULER_DEFAULTS.maxNumSeqs;
    this.maxLoras = config.maxLoras;
    this.maxModelLen = config.maxModelLen ?? Number.POSITIVE_INFINITY;
    this.blockManager = new BlockManager({
      numBlocks: config.numBlocks,
      blockSize: this.blockSize,
      enablePrefixCaching: config.enablePrefixCaching ?? true,
      trackEvictions: config.kvTiers?.policy.enabled ?? false,
    });
    const maxDeferSteps = config.maxDeferSteps ?? SCHEDULER_DEFAULTS.maxDeferSteps;
    if (!Number.isInteger(maxDeferSteps) || maxDeferSteps < 0) throw new RangeError('maxDeferSteps must be a non-negative integer');
    const defer = (config.deferSharedPrefill ?? SCHEDULER_DEFAULTS.deferSharedPrefill) && this.blockManager.enablePrefixCaching;
    this.admission = new Admission({
      blockManager: this.blockManager,
      blockSize: this.blockSize,
      maxNumSeqs: this.maxNumSeqs,
      maxLoras: this.maxLoras,
      // Undefined when deferral is off (by config, or without prefix caching).
      sharedPrefill: defer && maxDeferSteps > 0 ? new SharedPrefillGate(this.blockManager, maxDeferSteps) : undefined,
      kvTiers: config.kvTiers?.policy.enabled ? config.kvTiers : undefined,
    });
    this.speculator = config.speculative;
  }

  get numRunning(): number {
    return this.running.length;
  }
  /** Sequences holding blocks while their KV import is in flight. */
  get numTransferring(): number {
    return this.transferring.size;
  }
  /** Sequences finished with pinOnFinish whose blocks are still kept. */
  get numPinned(): number {
    return this.pinned.size;
  }
  get numWaiting(): number {
    return this.waiting.length;
  }
  get hasWork(): boolean {
    return this.running.length > 0 || this.waiting.length > 0;
  }
  get isStepInFlight(): boolean {
    return this.inFlight !== undefined;
  }

  getSequence(seqId: number): Sequence | undefined {
    return this.bySeqId.get(seqId);
  }

  addSequence(init: Omit<SequenceInit, 'seqId'>): AddSequenceResult {
    const refused = refuseSequence(init, this);
    if (refused !== undefined) return refused;
    const seq = new Sequence({ ...init, seqId: this.nextSeqId++ });
    this.bySeqId.set(seq.seqId, seq);
    this.waiting.push(seq);
    return { type: 'added', seqId: seq.seqId };
  }

  /** Builds the next step. Throws if the previous plan's result was not applied (a caller bug). */
  schedule(): SchedulePlan {
    if (this.inFlight !== undefined) throw new Error('schedule() called while a step is in flight');
    const bm = this.blockManager;
    const planned: PlannedSeq[] = [];
    const plannedBySeq = new Map<Sequence, PlannedSeq>();
    const preemptedSeqIds: number[] = [];
    let budget = this.maxNumBatchedTokens;

    const plan = (seq: Sequence, numNewTokens: number, numDrafts = 0): void => {
      const entry: PlannedSeq = {
        seq,
        numNewTokens,
        sample: seq.numComputedTokens + numNewTokens - numDrafts === seq.numTokens,
        numDrafts,
        dropped: false,
      };
      planned.push(entry);
      plannedBySeq.set(seq, entry);
      budget -= numNewTokens;
    };

    /** Makes room for `seq` by preempting the newest running sequences; false if seq itself went. */
    const reserve = (seq: Sequence, numNewTokens: number): boolean => {
      while (!bm.canAppend(seq, numNewTokens)) {
        const victim = this.running.pop()!;
        const entry = plannedBySeq.get(victim);
        if (entry !== undefined) {
          entry.dropped = true;
          budget += entry.numNewTokens;
        }
        this.preempt(victim);
        preemptedSeqIds.push(victim.seqId);
        if (victim === seq) return false;
      }
      return bm.appendSlots(seq, numNewTokens);
    };

    // Speculative decoding: how many drafts each decoding sequence verifies (the policy's call).
    // The budget goes to the decodes' own tokens, then to the prompts waiting for it; drafts
    // take only what is left, so they never slow a prefill down.
    const drafts = this.speculator !== undefined ? planDrafts(this.speculator, this.running, this.waiting, bm, this.maxModelLen, budget) : undefined;
    let draftBudget = drafts !== undefined ? Math.max(0, budget - drafts.numDecodes - drafts.prefillTokens) : 0;

    // Pass 1: decodes; pass 2: running prefills (chunked, or recompute after a resume).
    for (const decoding of [true, false]) {
      for (let i = 0; i < this.running.length && budget > 0; i++) {
        const seq = this.running[i]!;
        if ((seq.numUncomputedTokens === 1 && !seq.isPrefilling) !== decoding) continue;
        if (plannedBySeq.has(seq)) continue;
        let k = decoding ? Math.min(drafts?.lengths.get(seq) ?? 0, draftBudget, budget - 1) : 0;
        while (k > 0 && !draftBlocksFit(bm, seq, k, this.waiting.length, this.running.length)) k--;
        draftBudget -= k;
        const numNew = Math.min(seq.numUncomputedTokens + k, budget);
        if (reserve(seq, numNew)) plan(seq, numNew, k);
      }
    }

    // Waiting sequences, FCFS (admission.ts); none if this step had to preempt (the pool is full).
    let deferredSeqIds: number[] = [];
    let transfers: KvImportStart[] = [];
    let onboards: KvOnboardStart[] = [];
    if (preemptedSeqIds.length === 0 && this.waiting.length > 0) {
      const admission = this.admission.admitWaiting(this.queues, budget);
      for (const a of admission.admitted) plan(a.seq, a.numNewTokens);
      ({ deferredSeqIds, transfers, onboards } = admission);
      for (const ob of onboards) if (ob.inline) this.inlineOnboardFrom.set(ob.seqId, ob.firstBlock * this.blockSize);
      this.numDeferrals += deferredSeqIds.length;
      this.numOnboardedTokens += admission.numOnboardedTokens;
    }

    const live = planned.filter((p) => !p.dropped);
    this.inFlight = live;
    this.numSteps++;
    return this.toPlan(live, preemptedSeqIds, deferredSeqIds, transfers, onboards, drafts?.propose ?? 0);
  }

  /**
   * Ends a sequence's KV import. ok: its imported tokens count as computed (full blocks enter
   * the prefix cache) and it runs on from there. Not ok: it keeps its blocks and computes the
   * prompt itself (recompute fallback). A sequence aborted during the import is freed now,
   * never earlier: the import may have been writing into its blocks until this call.
   */
  completeTransfer(seqId: number, ok: boolean): CompleteTransferResult {
    const seq = this.transferring.get(seqId);
    if (seq === undefined) return 'unknown';
    this.transferring.delete(seqId);
    const numRemote = seq.numRemoteTokens;
    seq.numRemoteTokens = 0;
    if (seq.isAbortedInTransfer) {
      this.blockManager.free(seq);
      return 'freed';
    }
    seq.status = SEQUENCE_STATUS.running;
    this.running.push(seq);
    if (!ok) {
      // An onboard that failed is recomputed: its blocks were not cached after all.
      seq.numCachedTokens = Math.min(seq.numCachedTokens, seq.numComputedTokens);
      return 'recompute';
    }
    seq.numComputedTokens = Math.max(seq.numComputedTokens, numRemote);
    this.blockManager.commitComputed(seq);
    return 'running';
  }

  /**
   * The copies of these sequences' inline onboards (plan.onboards with `inline`) failed: call
   * before applying the step's result. Their output of this step is dropped and they compute
   * their prompt from the pool's own prefix hit on, as a failed transfer does; the onboarded
   * tokens no longer count as cached.
   */
  failInlineOnboards(seqIds: readonly number[]): void {
    const planned = this.inFlight;
    if (planned === undefined || seqIds.length === 0) return;
    for (const p of planned) {
      if (!seqIds.includes(p.seq.seqId)) continue;
      const from = this.inlineOnboardFrom.get(p.seq.seqId);
      if (from !== undefined) p.redoFrom = from;
    }
  }

  /**
   * Applies the engine's result for the plan in flight: advances computed counters, caches
   * the blocks that became full, appends sampled tokens and finishes sequences that hit a stop.
   * `grammarStops`: sequences whose structured-output grammar completed with this step's token
   * (finish "stop", whatever the token: no byte may follow it).
   */
  applyStepResult(result: StepResult, grammarStops?: ReadonlySet<number>): StepOutcome {
    const planned = this.inFlight;
    if (planned === undefined) throw new Error('applyStepResult() without a step in flight');
    this.inFlight = undefined;
    this.inlineOnboardFrom.clear();
    const outputs: SequenceOutput[] = [];
    const finished: FinishedSequence[] = [];
    let k = 0;
    for (const p of planned) {
      const sampled = p.sample ? result.sampled[k++] : undefined;
      if (p.sample && (sampled === undefined || sampled.seqId !== p.seq.seqId)) {
        throw new Error(`engine result out of order at seq ${p.seq.seqId}`);
      }
      const seq = p.seq;
      if (seq.status !== SEQUENCE_STATUS.running) continue; // aborted while the step ran
      if (p.redoFrom !== undefined) {
        seq.numComputedTokens = p.redoFrom;
        seq.numCachedTokens = Math.min(seq.numCachedTokens, p.redoFrom);
        continue;
      }
      if (sampled === undefined) {
        seq.numComputedTokens += p.numNewTokens;
        this.blockManager.commitComputed(seq);
        continue;
      }
      const accepted = sampled.following?.length ?? 0;
      if (accepted > p.numDrafts) throw new Error(`engine returned ${accepted + 1} tokens for seq ${seq.seqId} with ${p.numDrafts} drafts`);
      // A decode that had drafts on offer: what the policy did with them, and what was accepted.
      if (p.numDrafts > 0 || seq.draftTokens !== undefined) this.speculator?.record(seq, p.numDrafts, accepted);
      // The tokens, one by one: a stop (EOS, max_tokens, the grammar's end) drops what follows it.
      let reason = this.appendChecked(seq, sampled.tokenId, accepted === 0 && grammarStops?.has(seq.seqId) === true);
      let kept = 0;
      for (; reason === undefined && kept < accepted; kept++) {
        reason = this.appendChecked(seq, sampled.following![kept]!.tokenId, kept === accepted - 1 && grammarStops?.has(seq.seqId) === true);
      }
      // KV is now in place for the step's tokens up to its last accepted draft (not for the
      // token sampled after it, which the next step computes).
      seq.numComputedTokens = Math.min(seq.numComputedTokens + p.numNewTokens - p.numDrafts + accepted, seq.numTokens);
      this.blockManager.commitComputed(seq);
      outputs.push(kept < accepted ? { ...sampled, following: sampled.following!.slice(0, kept) } : sampled);
      seq.draftTokens = sampled.drafts;
      seq.draftScores = sampled.draftScores;
      if (reason !== undefined) {
        finished.push(this.finish(seq, reason));
        continue;
      }
      // Blocks that held only rejected drafts go back to the pool.
      if (p.numDrafts > 0) this.blockManager.trimToTokens(seq, seq.numTokens);
    }
    if (finished.length > 0) this.removeFinishedFromRunning();
    return { outputs, finished };
  }

  /** Appends one returned token; the reason to stop after it, if any. */
  private appendChecked(seq: Sequence, tokenId: number, grammarStop: boolean): FinishReason | undefined {
    seq.appendToken(tokenId);
    return grammarStop ? 'stop' : this.stopReason(seq, tokenId);
  }

  /**
   * Drops the plan in flight without applying it (the engine failed the step). Its sequences
   * keep their blocks and counters; the caller aborts them or schedules them again.
   */
  discardStep(): void {
    this.inFlight = undefined;
    this.inlineOnboardFrom.clear();
  }

  /** Cancels a sequence wherever it is and frees its blocks at once. False if unknown. */
  abort(seqId: number): boolean {
    const seq = this.bySeqId.get(seqId);
    if (seq === undefined) return this.releasePinned(seqId);
    if (seq.status === SEQUENCE_STATUS.transferring) {
      // The import may still be writing into the blocks: completeTransfer frees them.
      seq.isAbortedInTransfer = true;
      seq.status = SEQUENCE_STATUS.finished;
      seq.finishReason = 'cancelled';
      this.bySeqId.delete(seqId);
      return true;
    }
    if (seq.status === SEQUENCE_STATUS.waiting) {
      this.waiting.splice(this.waiting.indexOf(seq), 1);
    } else if (seq.status === SEQUENCE_STATUS.running) {
      this.running.splice(this.running.indexOf(seq), 1);
    }
    this.blockManager.free(seq);
    seq.status = SEQUENCE_STATUS.finished;
    seq.finishReason = 'cancelled';
    this.bySeqId.delete(seqId);
    return true;
  }

  /** Frees the blocks a pinOnFinish sequence kept after finishing. */
  releasePinned(seqId: number): boolean {
    const seq = this.pinned.get(seqId);
    if (seq === undefined) return false;
    this.pinned.delete(seqId);
    this.blockManager.free(seq);
    return true;
  }

  /** Block table of a pinned (finished, kept) sequence, for the KV hand-off. */
  pinnedBlockTable(seqId: number): Int32Array | undefined {
    return this.pinned.get(seqId)?.blockTableView();
  }

  load(): SchedulerLoad {
    const bm = this.blockManager;
    let queued = 0;
    for (const s of this.waiting) queued += s.numUncomputedTokens;
    for (const s of this.running) if (s.isPrefilling) queued += s.numPromptTokens - s.numComputedTokens;
    return {
      numRunning: this.running.length + this.transferring.size,
      numWaiting: this.waiting.length,
      kvUsage: bm.usage,
      activeBlocks: bm.numActiveBlocks,
      totalBlocks: bm.numBlocks,
      queuedPrefillTokens: queued,
    };
  }

  // ---- internals ----

  private preempt(seq: Sequence): void {
    this.blockManager.free(seq);
    seq.numComputedTokens = 0;
    seq.status = SEQUENCE_STATUS.waiting;
    seq.numPreemptions++;
    this.numPreemptions++;
    this.waiting.unshift(seq);
  }

  private stopReason(seq: Sequence, tokenId: number): FinishReason | undefined {
    const stop = seq.stop;
    const numOut = seq.numNewOutputTokens;
    if (!stop.ignoreEos && numOut >= (stop.minTokens ?? 0) && stop.stopTokenIds.includes(tokenId)) return 'stop';
    if (numOut >= stop.maxTokens || seq.numTokens >= this.maxModelLen) return 'length';
    return undefined;
  }

  private finish(seq: Sequence, reason: FinishReason): FinishedSequence {
    seq.status = SEQUENCE_STATUS.finished;
    seq.finishReason = reason;
    this.bySeqId.delete(seq.seqId);
    if (seq.pinOnFinish) this.pinned.set(seq.seqId, seq);
    else this.blockManager.free(seq);
    return {
      seqId: seq.seqId,
      requestId: seq.requestId,
      reason,
      usage: {
        promptTokens: seq.numPromptTokens,
        completionTokens: seq.numNewOutputTokens,
        cachedTokens: seq.numCachedTokens,
      },
    };
  }

  private removeFinishedFromRunning(): void {
    let w = 0;
    for (const s of this.running) if (s.status === SEQUENCE_STATUS.running) this.running[w++] = s;
    this.running.length = w;
  }

  private toPlan(
    live: PlannedSeq[],
    preemptedSeqIds: number[],
    deferredSeqIds: number[],
    transfers: KvImportStart[],
    onboards: KvOnboardStart[] = [],
    proposeDrafts = 0,
  ): SchedulePlan {
    const sequences: StepSequence[] = new Array(live.length);
    let numScheduledTokens = 0;
    let numPrefillTokens = 0;
    let numDecodeSeqs = 0;
    let numDraftTokens = 0;
    for (let i = 0; i < live.length; i++) {
      const { seq, numNewTokens, sample, numDrafts } = live[i]!;
      const start = seq.numComputedTokens;
      numScheduledTokens += numNewTokens;
      numDraftTokens += numDrafts;
      if (numNewTokens - numDrafts === 1 && !seq.isPrefilling && start === seq.numTokens - 1) numDecodeSeqs++;
      else numPrefillTokens += numNewTokens;
      const step: StepSequence = {
        seqId: seq.seqId,
        tokenIds: numDrafts > 0 ? seq.verifyTokens(numDrafts) : seq.tokenSlice(start, start + numNewTokens),
        startPos: start,
        blockTable: seq.blockTableView(),
        sample,
        sampling: seq.sampling,
        history: seq.tokenView(),
        numPromptTokens: seq.numPromptTokens,
        requestSeed: seq.requestSeed,
      };
      if (seq.logprobs !== undefined) step.logprobs = seq.logprobs;
      if (seq.loraSlot !== undefined) step.loraSlot = seq.loraSlot;
      if (numDrafts > 0) step.numDraftTokens = numDrafts;
      // Drafts are asked for where the next step could still verify one (max_tokens leaves
      // room); 0 still shows the drafter this step's tokens, so its view stays in sync.
      if (sample && this.speculator !== undefined) step.proposeDrafts = proposeDrafts > 0 && seq.stop.maxTokens - seq.numNewOutputTokens >= 3 ? proposeDrafts : 0;
      sequences[i] = step;
    }
    return {
      batch: { sequences, kvUsage: this.blockManager.usage },
      numScheduledTokens,
      numPrefillTokens,
      numDecodeSeqs,
      numDraftTokens,
      preemptedSeqIds,
      deferredSeqIds,
      transfers,
      onboards,
    };
  }
}
