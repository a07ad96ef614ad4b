/**
 * Prefix-aware admission (pure). A block enters the prefix cache only once it is computed, so
 * two requests of one prefix that are both waiting when a step is built would otherwise be
 * prefilled side by side, the second one recomputing the whole prefix. The gate spots a
 * waiting sequence whose next uncached full block is one a running sequence (the leader) is
 * computing now, and tells the scheduler to leave it waiting; once the leader has computed
 * that block, the follower's prefix hit covers it.
 *
 *   leader   [ b0 b1 b2 b3 | own ]   running, numCommittedBlocks = 1: b1..b3 still computing
 *   follower [ b0 b1 b2 b3 | own ]   hit = [b0]; next block b1 has the leader's chained hash
 *            → deferred this step; admitted later with hit = [b0 b1 b2 b3]
 *
 * Why this never deadlocks or starves:
 * - Only running sequences lead. A running sequence is in every step that has budget left for
 *   waiting ones (running work is planned first), so a step that defers always computes, and
 *   the leader's blocks advance every such step. A preempted leader is waiting again and an
 *   aborted or finished one is gone: either way it leads nothing from then on.
 * - A chained hash fixes the block's position, so the leader computes the block at the same
 *   index; once it has, the follower hits it (or, if it was evicted, nobody is computing it).
 * - Each sequence defers for at most `maxDeferSteps` steps in its life; past that it is
 *   admitted and computes what is missing itself, as without the gate.
 * - A deferred sequence keeps its place in the waiting queue; sequences behind it that share
 *   nothing are admitted in FCFS order, and the deferred one goes first once it is ready.
 */
import type { BlockManager, PrefixHit } from '../block-manager/block-manager.js';
import { SEQUENCE_STATUS, type Sequence } from '../sequence.js';

/**
 * Deferred sequences one step walks past before it stops admitting: each costs a prefix
 * lookup, so a burst of thousands of followers must not make every step scan the whole queue.
 * Sequences behind the cut simply wait for the next step, in order.
 */
export const MAX_DEFERRED_PER_STEP = 256;

export class SharedPrefillGate {
  /** Running sequences with full blocks not yet computed, as of this step. */
  private readonly computing: Sequence[] = [];

  constructor(
    private readonly bm: BlockManager,
    readonly maxDeferSteps: number,
  ) {}

  /** Starts a step: collects the running sequences that still compute full blocks. */
  reset(running: readonly Sequence[]): void {
    this.computing.length = 0;
    for (const seq of running) this.track(seq);
  }

  /** Adds a sequence admitted in this step, if it has full blocks to compute. */
  track(seq: Sequence): void {
    if (seq.numCommittedBlocks < this.numFullBlocks(seq)) this.computing.push(seq);
  }

  /**
   * The running sequence computing `seq`'s next uncached block, when `seq` should wait for it
   * (its deferral budget is not spent); undefined to admit `seq` now.
   */
  leaderFor(seq: Sequence, hit: PrefixHit): Sequence | undefined {
    if (this.computing.length === 0 || seq.numDeferredSteps >= this.maxDeferSteps) return undefined;
    const next = hit.blockIds.length;
    // The last prompt token is never a hit, so a block holding it is not worth waiting for.
    if (next >= Math.floor((seq.numTokens - 1) / this.bm.blockSize)) return undefined;
    const hash = this.bm.seqHashAt(seq, next);
    for (const leader of this.computing) {
      if (leader.status !== SEQUENCE_STATUS.running) continue;
      if (next < leader.numCommittedBlocks || next >= this.numFullBlocks(leader)) continue;
      // Equal chained hashes mean equal prefixes; a 64-bit collision would cost one bounded
      // wait, and the admission's prefix hit still compares token ids.
      if (this.bm.seqHashAt(leader, next) === hash) return leader;
    }
    return undefined;
  }

  private numFullBlocks(seq: Sequence): number {
    return Math.floor(seq.numTokens / this.bm.blockSize);
  }
}
