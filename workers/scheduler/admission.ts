/**
 * Admission (pure): which waiting sequences join a step, and with what. The scheduler plans
 * the running work first; what budget and sequence slots are left go to the waiting queue, in
 * FCFS order, through this file. Kept apart from the step loop as vLLM v1 keeps its scheduler
 * apart from its KV cache manager: the scheduler orders and budgets, admission decides per
 * sequence how it gets its blocks.
 *
 *   waiting[next] ── --max-loras: a further adapter waits; behind it no adapter sequence is admitted
 *        │
 *        ├─ remote prefill (numRemoteTokens) ─▶ blocks for the imported tokens, no budget ─▶ transferring (transfers)
 *        ├─ G2 (host) holds the next blocks ───▶ blocks for them + the rest's prefill ─────▶ running (admitted + inline onboards:
 *        │                                        the copy lands before this step reads them)
 *        ├─ G3 (disk) holds some of them ──────▶ blocks for them, no budget ───────────────▶ transferring (onboards)
 *        ├─ a running sequence computes its next prefix block ─▶ deferred (keeps its place; shared-prefill.ts)
 *        └─ otherwise ────────────────────────▶ blocks for min(uncached, budget) tokens ──▶ running (admitted)
 *   stops at: budget spent, no block (running out of blocks is a result: it waits), maxNumSeqs,
 *   or MAX_DEFERRED_PER_STEP deferrals.
 *
 * `refuseSequence` is admission's other half: what can never run is refused when it is added.
 */
import type { BlockManager, PrefixHit } from '../block-manager/block-manager.js';
import { onboardCount, type OnboardSource } from '../block-manager/kv-tier-policy.js';
import { SEQUENCE_STATUS, type Sequence, type SequenceInit } from '../sequence.js';
import { MAX_DEFERRED_PER_STEP, type SharedPrefillGate } from './shared-prefill.js';
import type { AddSequenceResult, KvImportStart, KvOnboardStart, SchedulerConfig } from './types.js';

/** The scheduler's queues, which admission moves sequences between. */
export interface AdmissionQueues {
  readonly waiting: Sequence[];
  readonly running: Sequence[];
  readonly transferring: Map<number, Sequence>;
}

export interface AdmissionOptions {
  blockManager: BlockManager;
  blockSize: number;
  maxNumSeqs: number;
  maxLoras: number | undefined;
  /** Undefined when deferral is off. */
  sharedPrefill: SharedPrefillGate | undefined;
  /** Undefined without KV tiers (or with them disabled). */
  kvTiers: SchedulerConfig['kvTiers'];
}

/** A sequence admitted to run in this step: the scheduler plans `numNewTokens` of it. */
export interface Admitted {
  seq: Sequence;
  numNewTokens: number;
}

export interface AdmissionResult {
  /** Now running, in admission order. */
  admitted: Admitted[];
  deferredSeqIds: number[];
  transfers: KvImportStart[];
  onboards: KvOnboardStart[];
  /** Prefix tokens onboarded from the KV tiers by this admission. */
  numOnboardedTokens: number;
}

export class Admission {
  constructor(private readonly o: AdmissionOptions) {}

  /**
   * Admits waiting sequences within `budget` tokens. A deferred sequence keeps its place:
   * `next` walks past it and admissions behind it are compacted out of the queue.
   */
  admitWaiting(q: AdmissionQueues, budget: number): AdmissionResult {
    const bm = this.o.blockManager;
    const result: AdmissionResult = { admitted: [], deferredSeqIds: [], transfers: [], onboards: [], numOnboardedTokens: 0 };
    const gate = this.o.sharedPrefill;
    gate?.reset(q.running);
    let next = 0;
    let admittedPastDeferred = false;
    // --max-loras: adapters of the running and transferring sequences; once one waiting
    // sequence is held for a further adapter, no adapter sequence behind it is admitted.
    const maxLoras = this.o.maxLoras;
    const activeLoras = maxLoras !== undefined ? activeLoraIds(q) : undefined;
    let loraBlocked = false;
    const takeWaiting = (): void => {
      if (next === 0) {
        q.waiting.shift();
      } else {
        admittedPastDeferred = true;
        next++;
      }
    };
    /** Admitted with `numOnboard` tokens from the tiers: off the queue, counted cached (once), committed. */
    const claimOnboard = (seq: Sequence, numPoolHit: number, fromTiers: readonly OnboardSource[], numOnboard: number): void => {
      takeWaiting();
      const firstAdmission = !seq.hasBeenAdmitted;
      startCounters(seq, numPoolHit);
      if (firstAdmission) seq.numCachedTokens += numOnboard;
      this.o.kvTiers!.policy.commitOnboard(fromTiers);
      result.numOnboardedTokens += numOnboard;
    };
    while (budget > 0 && next < q.waiting.length && q.running.length + q.transferring.size < this.o.maxNumSeqs) {
      const seq = q.waiting[next]!;
      if (activeLoras !== undefined && seq.loraId !== undefined && !activeLoras.has(seq.loraId) ? loraBlocked || activeLoras.size >= maxLoras! : loraBlocked && seq.loraId !== undefined) {
        loraBlocked = true;
        next++;
        continue;
      }
      if (seq.loraId !== undefined) activeLoras?.add(seq.loraId);
      const hit = bm.findPrefixHit(seq);
      if (seq.numRemoteTokens > 0) {
        // Blocks for the imported tokens only; the import costs no compute budget.
        const numImport = Math.max(0, seq.numRemoteTokens - hit.numTokens);
        if (!bm.allocate(seq, hit, numImport)) break;
        takeWaiting();
        startCounters(seq, hit.numTokens);
        seq.status = SEQUENCE_STATUS.transferring;
        q.transferring.set(seq.seqId, seq);
        const first = hit.blockIds.length;
        result.transfers.push({
          seqId: seq.seqId,
          requestId: seq.requestId,
          localBlockIds: seq.blockTableView().slice(first, bm.blocksFor(seq.numRemoteTokens)),
          firstBlock: first,
          numTokens: seq.numRemoteTokens,
        });
        continue;
      }
      const fromTiers = this.onboardSources(seq, hit);
      if (fromTiers.length > 0 && this.o.kvTiers!.inlineHostOnboards !== false && fromTiers.every((f) => f.tier === 'host')) {
        // Host copies land before this step reads them (the loop's contract, kv-tier-manager.ts):
        // the sequence prefills its new tokens in this very step, beside the copy, instead of
        // waiting a whole step in `transferring` first.
        const numOnboard = fromTiers.length * this.o.blockSize;
        const numAfter = hit.numTokens + numOnboard;
        const numNew = Math.min(seq.numTokens - numAfter, budget);
        if (!bm.allocate(seq, hit, numOnboard + numNew)) break;
        claimOnboard(seq, hit.numTokens, fromTiers, numOnboard);
        seq.numComputedTokens = numAfter;
        seq.status = SEQUENCE_STATUS.running;
        q.running.push(seq);
        gate?.track(seq);
        const first = hit.blockIds.length;
        result.onboards.push({ seqId: seq.seqId, localBlockIds: seq.blockTableView().slice(first, first + fromTiers.length), firstBlock: first, sources: fromTiers, inline: true });
        result.admitted.push({ seq, numNewTokens: numNew });
        budget -= numNew;
        continue;
      }
      if (fromTiers.length > 0) {
        const numOnboard = fromTiers.length * this.o.blockSize;
        if (!bm.allocate(seq, hit, numOnboard)) break;
        claimOnboard(seq, hit.numTokens, fromTiers, numOnboard);
        seq.numRemoteTokens = hit.numTokens + numOnboard;
        seq.status = SEQUENCE_STATUS.transferring;
        q.transferring.set(seq.seqId, seq);
        const first = hit.blockIds.length;
        result.onboards.push({ seqId: seq.seqId, localBlockIds: seq.blockTableView().slice(first, first + fromTiers.length), firstBlock: first, sources: fromTiers });
        continue;
      }
      if (gate?.leaderFor(seq, hit) !== undefined) {
        seq.numDeferredSteps++;
        result.deferredSeqIds.push(seq.seqId);
        if (result.deferredSeqIds.length >= MAX_DEFERRED_PER_STEP) break;
        next++;
        continue;
      }
      const numNew = Math.min(seq.numTokens - hit.numTokens, budget);
      if (!bm.allocate(seq, hit, numNew)) break;
      takeWaiting();
      startCounters(seq, hit.numTokens);
      seq.status = SEQUENCE_STATUS.running;
      q.running.push(seq);
      gate?.track(seq);
      result.admitted.push({ seq, numNewTokens: numNew });
      budget -= numNew;
    }
    if (admittedPastDeferred) removeAdmitted(q.waiting);
    return result;
  }

  /**
   * The blocks after the G1 hit that the KV tiers hold and that are cheaper to copy than to
   * recompute (at least one prompt token is always left to compute).
   */
  private onboardSources(seq: Sequence, hit: PrefixHit): OnboardSource[] {
    const tiers = this.o.kvTiers;
    const numHitBlocks = hit.blockIds.length;
    if (tiers === undefined || seq.numRemoteTokens > 0) return [];
    const bs = this.o.blockSize;
    const maxBlocks = Math.floor((seq.numTokens - 1) / bs);
    if (maxBlocks <= numHitBlocks) return [];
    this.o.blockManager.seqHashAt(seq, maxBlocks - 1);
    const sources = tiers.policy.match(seq.seqHashes.slice(0, maxBlocks), numHitBlocks, (b, tokens) => {
      for (let i = 0; i < bs; i++) if (tokens[i] !== seq.tokenAt(b * bs + i)) return false;
      return true;
    });
    if (sources.length === 0) return sources;
    const rest = seq.numTokens - (numHitBlocks + sources.length) * bs;
    return sources.slice(0, onboardCount(sources, tiers.costs, bs, rest));
  }
}

/**
 * What can never run, refused when it is added (a result, not an exception): an empty prompt,
 * no output asked, remote KV that leaves nothing to compute here, longer than `maxModelLen`, or
 * more blocks than the whole pool (it would preempt itself forever).
 */
export function refuseSequence(
  init: Omit<SequenceInit, 'seqId'>,
  limits: { maxModelLen: number; blockManager: BlockManager },
): Extract<AddSequenceResult, { type: 'rejected' }> | undefined {
  const numPrompt = init.promptTokenIds.length;
  if (numPrompt === 0) return { type: 'rejected', code: 'invalid_argument', message: 'prompt is empty' };
  if (!(init.stop.maxTokens >= 1)) return { type: 'rejected', code: 'invalid_argument', message: 'maxTokens must be at least 1' };
  const numRemote = init.numRemoteTokens ?? 0;
  if (!Number.isInteger(numRemote) || numRemote < 0 || numRemote >= numPrompt) {
    return { type: 'rejected', code: 'invalid_argument', message: `remote KV for ${numRemote} of ${numPrompt} tokens (at least one must be computed here)` };
  }
  const total = numPrompt + init.stop.maxTokens;
  if (total > limits.maxModelLen) {
    return {
      type: 'rejected',
      code: 'invalid_argument',
      message: `prompt (${numPrompt}) + maxTokens (${init.stop.maxTokens}) exceeds the maximum sequence length ${limits.maxModelLen}`,
    };
  }
  const bm = limits.blockManager;
  if (bm.blocksFor(total) > bm.numBlocks) {
    return {
      type: 'rejected',
      code: 'resource_exhausted',
      message: `sequence of ${total} tokens needs more than the ${bm.numBlocks} KV blocks of this worker`,
    };
  }
  return undefined;
}

/** An admitted sequence starts from its prefix hit; its first admission fixes `cachedTokens`. */
function startCounters(seq: Sequence, numHitTokens: number): void {
  seq.numComputedTokens = numHitTokens;
  if (!seq.hasBeenAdmitted) {
    seq.numCachedTokens = numHitTokens;
    seq.hasBeenAdmitted = true;
  }
}

function removeAdmitted(waiting: Sequence[]): void {
  let w = 0;
  for (const s of waiting) if (s.status === SEQUENCE_STATUS.waiting) waiting[w++] = s;
  waiting.length = w;
}

function activeLoraIds(q: AdmissionQueues): Set<number> {
  const ids = new Set<number>();
  for (const s of q.running) if (s.loraId !== undefined) ids.add(s.loraId);
  for (const s of q.transferring.values()) if (s.loraId !== undefined) ids.add(s.loraId);
  return ids;
}
