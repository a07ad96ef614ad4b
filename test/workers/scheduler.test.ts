import { describe, expect, it } from 'vitest';
import { Scheduler } from '../../workers/scheduler/scheduler.js';
import { addSeq, drive, mockResult, range } from './builders.js';

/** Sampled tokens chosen by the test, in batch order. */
function sampleWith(s: Scheduler, tokenId: number) {
  const plan = s.schedule();
  return s.applyStepResult({
    sampled: plan.batch.sequences.filter((q) => q.sample).map((q) => ({ seqId: q.seqId, tokenId })),
  });
}

describe('Scheduler', () => {
  it('chunked prefill: a long prompt is split across steps within the token budget', () => {
    const s = new Scheduler({ numBlocks: 64, blockSize: 4, maxNumBatchedTokens: 16 });
    const id = addSeq(s, range(1, 40), 2);
    const shapes = [];
    for (let i = 0; i < 3; i++) {
      const plan = s.schedule();
      const q = plan.batch.sequences[0]!;
      shapes.push([q.startPos, q.tokenIds.length, q.sample, q.blockTable.length]);
      s.applyStepResult(mockResult(plan));
    }
    expect(shapes).toEqual([
      [0, 16, false, 4],
      [16, 16, false, 8],
      [32, 8, true, 10],
    ]);
    expect(s.getSequence(id)!.numOutputTokens).toBe(1);
    expect(s.load().queuedPrefillTokens).toBe(0);
  });

  it('decodes are scheduled first; a prefill takes what is left of the budget', () => {
    const s = new Scheduler({ numBlocks: 64, blockSize: 4, maxNumBatchedTokens: 16 });
    const a = addSeq(s, range(1, 5), 10, 1);
    s.applyStepResult(mockResult(s.schedule())); // a prefilled, now decoding
    const b = addSeq(s, range(100, 40), 4, 2);
    const plan = s.schedule();
    expect(plan.batch.sequences.map((q) => [q.seqId, q.tokenIds.length])).toEqual([
      [a, 1],
      [b, 15],
    ]);
    expect(plan.numDecodeSeqs).toBe(1);
    expect(plan.numPrefillTokens).toBe(15);
    expect(s.load().queuedPrefillTokens).toBe(40);
    s.applyStepResult(mockResult(plan));
    expect(s.load().queuedPrefillTokens).toBe(25);
  });

  it('admits waiting sequences FCFS up to maxNumSeqs', () => {
    const s = new Scheduler({ numBlocks: 64, blockSize: 4, maxNumSeqs: 2 });
    const ids = [1, 2, 3].map((i) => addSeq(s, range(i * 10, 3), 5, i));
    const plan = s.schedule();
    expect(plan.batch.sequences.map((q) => q.seqId)).toEqual(ids.slice(0, 2));
    expect(s.load()).toMatchObject({ numRunning: 2, numWaiting: 1 });
  });

  it('reports prefix-cache hits per sequence as cachedTokens', () => {
    const s = new Scheduler({ numBlocks: 64, blockSize: 4 });
    const a = addSeq(s, range(1, 13), 2, 1);
    const first = drive(s);
    expect(first.finished.get(a)!.usage).toEqual({ promptTokens: 13, completionTokens: 2, cachedTokens: 0 });
    const b = addSeq(s, [...range(1, 12), 77, 78], 2, 2);
    const second = drive(s);
    expect(second.finished.get(b)!.usage).toEqual({ promptTokens: 14, completionTokens: 2, cachedTokens: 12 });
    // The hit is skipped: the first step of b computes only the 2 new tokens.
    expect(second.plans[0]!.batch.sequences[0]).toMatchObject({ startPos: 12 });
    expect(second.plans[0]!.batch.sequences[0]!.tokenIds.length).toBe(2);
  });

  it('preemption by recompute: when blocks run out the newest sequence yields, and its output is unchanged', () => {
    const solo = (prompt: number[], seed: number): number[] => {
      const s = new Scheduler({ numBlocks: 64, blockSize: 4 });
      const id = addSeq(s, prompt, 12, seed);
      return drive(s).outputs.get(id)!;
    };
    const pa = range(1, 8);
    const pb = range(50, 8);
    // Each needs 5 blocks (20 tokens); the pool has 8, so both cannot finish together.
    const s = new Scheduler({ numBlocks: 8, blockSize: 4 });
    const a = addSeq(s, pa, 12, 1);
    const b = addSeq(s, pb, 12, 2);
    const log = drive(s);
    expect(s.numPreemptions).toBeGreaterThan(0);
    expect(log.plans.some((p) => p.preemptedSeqIds.includes(b))).toBe(true);
    expect(log.plans.some((p) => p.preemptedSeqIds.includes(a))).toBe(false);
    expect(log.outputs.get(a)).toEqual(solo(pa, 1));
    expect(log.outputs.get(b)).toEqual(solo(pb, 2));
    expect(log.finished.get(b)!.reason).toBe('length');
    expect(s.blockManager.numActiveBlocks).toBe(0);
  });

  it('a preempted sequence goes to the front of waiting with computed tokens reset, then resumes from the prefix cache', () => {
    const s = new Scheduler({ numBlocks: 8, blockSize: 4 });
    const a = addSeq(s, range(1, 8), 12, 1);
    const b = addSeq(s, range(50, 8), 12, 2);
    const c = addSeq(s, range(90, 3), 1, 3);
    let preemptedAt = -1;
    for (let i = 0; i < 40 && preemptedAt < 0; i++) {
      const plan = s.schedule();
      if (plan.preemptedSeqIds.length > 0) preemptedAt = i;
      s.applyStepResult(mockResult(plan));
    }
    expect(preemptedAt).toBeGreaterThan(0);
    const seqB = s.getSequence(b)!;
    expect(seqB.status).toBe('waiting');
    expect(seqB.numComputedTokens).toBe(0);
    expect(seqB.numBlocks).toBe(0);
    expect(seqB.numOutputTokens).toBeGreaterThan(0);
    expect(s.getSequence(c)).toBeUndefined(); // c (1 token) finished before
    expect(s.getSequence(a)!.status).toBe('running');
    const hitsBefore = s.blockManager.prefixCacheHits;
    drive(s);
    expect(s.blockManager.prefixCacheHits).toBeGreaterThan(hitsBefore);
  });

  it('stop conditions: maxTokens, stop token ids, ignoreEos and minTokens', () => {
    const s = new Scheduler({ numBlocks: 64, blockSize: 4 });
    const plain = addSeq(s, [1, 2, 3], 5, 1, { stopTokenIds: [9] });
    const ignore = addSeq(s, [1, 2, 3], 5, 2, { stopTokenIds: [9], ignoreEos: true });
    const min = addSeq(s, [1, 2, 3], 5, 3, { stopTokenIds: [9], minTokens: 3 });
    const finishedAt = new Map<number, [number, string]>();
    while (s.hasWork) {
      for (const f of sampleWith(s, 9).finished) finishedAt.set(f.seqId, [f.usage.completionTokens, f.reason]);
    }
    expect(finishedAt.get(plain)).toEqual([1, 'stop']);
    expect(finishedAt.get(ignore)).toEqual([5, 'length']);
    expect(finishedAt.get(min)).toEqual([3, 'stop']);
  });

  it('abort frees blocks at once, wherever the sequence is', () => {
    const s = new Scheduler({ numBlocks: 16, blockSize: 4 });
    const a = addSeq(s, range(1, 10), 50, 1);
    const b = addSeq(s, range(20, 10), 50, 2);
    s.applyStepResult(mockResult(s.schedule()));
    expect(s.blockManager.numActiveBlocks).toBe(6);
    const w = addSeq(s, range(40, 5), 5, 3);
    expect(s.abort(w)).toBe(true); // waiting
    expect(s.abort(a)).toBe(true); // running
    expect(s.blockManager.numActiveBlocks).toBe(3);
    // Abort while a step is in flight: the result for b is ignored.
    s.schedule();
    expect(s.abort(b)).toBe(true);
    expect(s.blockManager.numActiveBlocks).toBe(0);
    const out = s.applyStepResult({ sampled: [{ seqId: b, tokenId: 1 }] });
    expect(out.outputs).toEqual([]);
    expect(s.hasWork).toBe(false);
    expect(s.abort(b)).toBe(false);
  });

  it('rejects what can never fit and empty prompts, as results', () => {
    const s = new Scheduler({ numBlocks: 4, blockSize: 4, maxModelLen: 12 });
    const stop = { maxTokens: 3, stopTokenIds: [], ignoreEos: false };
    expect(s.addSequence({ requestId: 'x', promptTokenIds: range(1, 10), sampling: {}, stop, requestSeed: 1 })).toMatchObject({ type: 'rejected', code: 'invalid_argument' });
    const roomy = new Scheduler({ numBlocks: 4, blockSize: 4 });
    expect(roomy.addSequence({ requestId: 'x', promptTokenIds: range(1, 15), sampling: {}, stop, requestSeed: 1 })).toMatchObject({ type: 'rejected', code: 'resource_exhausted' });
    expect(roomy.addSequence({ requestId: 'x', promptTokenIds: range(1, 13), sampling: {}, stop, requestSeed: 1 })).toMatchObject({ type: 'added' });
    expect(s.addSequence({ requestId: 'y', promptTokenIds: [], sampling: {}, stop: { maxTokens: 1, stopTokenIds: [], ignoreEos: false }, requestSeed: 1 })).toMatchObject({ type: 'rejected' });
    expect(s.hasWork).toBe(false);
  });

  it('pinOnFinish keeps the blocks after the last token until released', () => {
    const s = new Scheduler({ numBlocks: 16, blockSize: 4 });
    const r = s.addSequence({ requestId: 'p', promptTokenIds: range(1, 9), sampling: {}, stop: { maxTokens: 1, stopTokenIds: [], ignoreEos: false }, requestSeed: 1, pinOnFinish: true });
    if (r.type !== 'added') throw new Error('rejected');
    const out = s.applyStepResult(mockResult(s.schedule()));
    expect(out.finished.map((f) => f.seqId)).toEqual([r.seqId]);
    expect(s.pinnedBlockTable(r.seqId)!.length).toBe(3);
    expect(s.blockManager.numActiveBlocks).toBe(3);
    expect(s.releasePinned(r.seqId)).toBe(true);
    expect(s.blockManager.numActiveBlocks).toBe(0);
  });

  it('load snapshot per step: running, waiting, usage, blocks', () => {
    const s = new Scheduler({ numBlocks: 10, blockSize: 4, maxNumSeqs: 1 });
    addSeq(s, range(1, 6), 3, 1);
    addSeq(s, range(10, 7), 3, 2);
    s.applyStepResult(mockResult(s.schedule()));
    expect(s.load()).toEqual({ numRunning: 1, numWaiting: 1, kvUsage: 0.2, activeBlocks: 2, totalBlocks: 10, queuedPrefillTokens: 7 });
  });

  it('refuses to schedule twice without applying the result', () => {
    const s = new Scheduler({ numBlocks: 10, blockSize: 4 });
    addSeq(s, range(1, 6), 3, 1);
    s.schedule();
    expect(() => s.schedule()).toThrow(/in flight/);
  });
});
