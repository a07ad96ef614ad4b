/**
 * --max-loras in the scheduler: no step runs more distinct adapters than the limit, base-model
 * sequences are not held back by it, and an adapter waiting behind busy ones is not starved by
 * a steady stream of requests for the busy ones.
 */
import { describe, expect, it } from 'vitest';
import { Scheduler } from '../../workers/scheduler/scheduler.js';
import { mockResult, range, stopOpts } from '../workers/builders.js';

function add(s: Scheduler, loraOf: Map<number, number | undefined>, loraId: number | undefined, maxTokens = 6): number {
  const r = s.addSequence({
    requestId: `r${loraOf.size}`,
    promptTokenIds: range(1 + loraOf.size * 7, 20),
    sampling: {},
    stop: stopOpts(maxTokens),
    requestSeed: 1,
    ...(loraId !== undefined ? { loraId } : {}),
  });
  if (r.type !== 'added') throw new Error(r.message);
  loraOf.set(r.seqId, loraId);
  return r.seqId;
}

describe('Scheduler --max-loras', () => {
  it('at most maxLoras adapters per step; base sequences run alongside; a held adapter gets in without starving', () => {
    const s = new Scheduler({ numBlocks: 512, blockSize: 4, maxLoras: 2 });
    const loraOf = new Map<number, number | undefined>();
    add(s, loraOf, 1);
    add(s, loraOf, 2);
    const held = add(s, loraOf, 3);
    const base = add(s, loraOf, undefined);
    let heldRanAt = -1;
    let baseRanAt = -1;
    for (let step = 0; step < 200 && s.hasWork; step++) {
      // A steady stream of new requests for the two busy adapters.
      if (step < 40) add(s, loraOf, 1 + (step % 2));
      const plan = s.schedule();
      const ids = plan.batch.sequences.map((q) => q.seqId);
      const loras = new Set(ids.map((id) => loraOf.get(id)).filter((l) => l !== undefined));
      expect(loras.size).toBeLessThanOrEqual(2);
      if (heldRanAt < 0 && ids.includes(held)) heldRanAt = step;
      if (baseRanAt < 0 && ids.includes(base)) baseRanAt = step;
      s.applyStepResult(mockResult(plan));
    }
    expect(baseRanAt).toBe(0);
    expect(heldRanAt).toBeGreaterThan(0);
    expect(heldRanAt).toBeLessThan(20);
    expect(s.hasWork).toBe(false);
  });

  it('a follower deferred behind its leader (shared prefix) takes no adapter slot of its own: another adapter is admitted beside them', () => {
    // Issue 34 asked whether a deferred sequence holds a --max-loras slot. A follower is only
    // deferred behind a leader computing the same chained block hashes, and those hashes are
    // keyed by lora_id, so its adapter is always its (running) leader's, already counted.
    const s = new Scheduler({ numBlocks: 512, blockSize: 4, maxLoras: 2, maxNumBatchedTokens: 64 });
    const prompt = range(1, 40);
    const ids: number[] = [];
    for (const [i, loraId, tokens] of [[0, 7, prompt], [1, 7, prompt], [2, 8, range(500, 20)]] as const) {
      const r = s.addSequence({ requestId: `d${i}`, promptTokenIds: [...tokens], sampling: {}, stop: stopOpts(4), requestSeed: 1, loraId });
      if (r.type !== 'added') throw new Error(r.message);
      ids.push(r.seqId);
    }
    const plan = s.schedule();
    expect(plan.deferredSeqIds).toEqual([ids[1]]);
    expect(plan.batch.sequences.map((q) => q.seqId)).toEqual([ids[0], ids[2]]);
  });

  it('without the limit every adapter runs in the first step', () => {
    const s = new Scheduler({ numBlocks: 512, blockSize: 4 });
    const loraOf = new Map<number, number | undefined>();
    for (let l = 1; l <= 5; l++) add(s, loraOf, l);
    const plan = s.schedule();
    expect(new Set(plan.batch.sequences.map((q) => loraOf.get(q.seqId))).size).toBe(5);
  });
});
