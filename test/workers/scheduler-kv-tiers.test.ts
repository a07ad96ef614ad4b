/**
 * The scheduler with KV tiers, stepped by hand: an evicted prefix is offered to the host tier,
 * and a later prompt with that prefix is admitted with it onboarded. Inline (the default for
 * host sources): the sequence is in the same step's batch, computed from after the onboarded
 * blocks, and a failed copy (failInlineOnboards) drops that step's output and recomputes.
 * Deferred (`inlineHostOnboards: false`, and any disk source): transferring, not in the batch,
 * and completeTransfer makes the onboarded tokens computed and cached; a failed onboard
 * recomputes and stops counting them as cached. Copy-vs-recompute gates the onboard.
 */
import { describe, expect, it } from 'vitest';
import { KvTierPolicy, type OnboardCosts } from '../../workers/block-manager/kv-tier-policy.js';
import { Scheduler } from '../../workers/scheduler/scheduler.js';
import { addSeq, mockResult, range } from './builders.js';

const BS = 4;
const CHEAP: OnboardCosts = { hostMsPerBlock: 0.01, diskMsPerBlock: 0.1, prefillMs: (t) => 10 + t };
const DEAR: OnboardCosts = { hostMsPerBlock: 100, diskMsPerBlock: 100, prefillMs: (t) => 10 + t };

function runToEnd(s: Scheduler): void {
  for (let i = 0; i < 100 && s.hasWork; i++) s.applyStepResult(mockResult(s.schedule()));
}

function setup(costs: OnboardCosts, inlineHostOnboards = false) {
  const policy = new KvTierPolicy({ hostBlocks: 32, diskBlocks: 0 });
  const s = new Scheduler({ numBlocks: 8, blockSize: BS, kvTiers: { policy, costs, inlineHostOnboards } });
  const prompt = range(1, 4 * BS + 1); // 4 full blocks + 1
  addSeq(s, prompt, 1, 1);
  runToEnd(s);
  // Another prompt that needs the whole pool evicts the first one's blocks.
  addSeq(s, range(500, 8 * BS - 1), 1, 2);
  const plan = s.schedule();
  const evicted = s.blockManager.drainEvicted();
  expect(evicted.map((e) => e.reuse)).toEqual(evicted.map(() => 0));
  policy.offload(evicted);
  s.applyStepResult(mockResult(plan));
  runToEnd(s);
  return { s, policy, prompt };
}

describe('Scheduler with KV tiers', () => {
  it('onboards a prefix found in the host tier and counts it as cached', () => {
    const { s, policy, prompt } = setup(CHEAP);
    expect(policy.host.size).toBeGreaterThanOrEqual(4);
    const id = addSeq(s, prompt, 2, 3);
    const plan = s.schedule();
    expect(plan.batch.sequences).toEqual([]);
    expect(plan.onboards).toHaveLength(1);
    expect(plan.onboards[0]!.sources.map((x) => x.tier)).toEqual(['host', 'host', 'host', 'host']);
    expect(plan.onboards[0]!.localBlockIds).toHaveLength(4);
    s.applyStepResult(mockResult(plan));
    expect(s.completeTransfer(id, true)).toBe('running');
    const next = s.schedule();
    expect(next.batch.sequences[0]).toMatchObject({ seqId: id, startPos: 4 * BS });
    expect(next.batch.sequences[0]!.tokenIds).toHaveLength(1);
    const out = s.applyStepResult(mockResult(next));
    expect(out.outputs).toHaveLength(1);
    expect(s.getSequence(id)!.numCachedTokens).toBe(4 * BS);
  });

  it('a failed onboard recomputes the prompt and does not count it as cached', () => {
    const { s, prompt } = setup(CHEAP);
    const id = addSeq(s, prompt, 2, 3);
    s.applyStepResult(mockResult(s.schedule()));
    expect(s.completeTransfer(id, false)).toBe('recompute');
    const next = s.schedule();
    expect(next.batch.sequences[0]).toMatchObject({ seqId: id, startPos: 0 });
    expect(s.getSequence(id)!.numCachedTokens).toBe(0);
  });

  it('inline: the onboarded sequence prefills its rest in the same step, the prefix counted as cached', () => {
    const { s, prompt } = setup(CHEAP, true);
    const id = addSeq(s, prompt, 2, 3);
    const plan = s.schedule();
    expect(plan.onboards).toHaveLength(1);
    expect(plan.onboards[0]).toMatchObject({ seqId: id, firstBlock: 0, inline: true });
    expect(plan.onboards[0]!.localBlockIds).toHaveLength(4);
    // In this step's batch, from after the 4 onboarded blocks: one token left to compute.
    expect(plan.batch.sequences).toHaveLength(1);
    expect(plan.batch.sequences[0]).toMatchObject({ seqId: id, startPos: 4 * BS, sample: true });
    expect(plan.numPrefillTokens).toBe(1);
    const out = s.applyStepResult(mockResult(plan));
    expect(out.outputs.map((o) => o.seqId)).toEqual([id]);
    expect(s.getSequence(id)!.numCachedTokens).toBe(4 * BS);
    expect(s.getSequence(id)!.numComputedTokens).toBe(4 * BS + 1);
    // The onboarded blocks are in the pool's prefix cache now.
    expect(s.blockManager.findPrefixHit(s.getSequence(id)!).numTokens).toBe(4 * BS);
  });

  it('inline: a failed copy drops that step output and recomputes from the pool hit, not counted as cached', () => {
    const { s, prompt } = setup(CHEAP, true);
    const id = addSeq(s, prompt, 2, 3);
    const plan = s.schedule();
    s.failInlineOnboards([id]);
    const out = s.applyStepResult(mockResult(plan));
    expect(out.outputs).toEqual([]);
    expect(s.getSequence(id)!.numCachedTokens).toBe(0);
    const next = s.schedule();
    expect(next.batch.sequences[0]).toMatchObject({ seqId: id, startPos: 0 });
    expect(next.batch.sequences[0]!.tokenIds).toHaveLength(4 * BS + 1);
  });

  it('does not onboard when copying costs more than recomputing', () => {
    const { s, prompt } = setup(DEAR);
    addSeq(s, prompt, 2, 3);
    const plan = s.schedule();
    expect(plan.onboards).toEqual([]);
    expect(plan.batch.sequences[0]!.startPos).toBe(0);
  });
});
