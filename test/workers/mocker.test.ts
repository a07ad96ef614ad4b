import { describe, expect, it, vi } from 'vitest';
import type { StepBatch, StepSequence } from '../../workers/engines/engine.js';
import { MOCKER_EOS_SEED_BASE, MockerEngine, mockTokenAt } from '../../workers/engines/mocker/index.js';

function stepSeq(over: Partial<StepSequence> & { seqId: number }): StepSequence {
  const history = over.history ?? [1, 2, 3, 4];
  return {
    tokenIds: Int32Array.of(4),
    startPos: 3,
    blockTable: Int32Array.of(0),
    sample: true,
    sampling: {},
    history,
    numPromptTokens: 4,
    requestSeed: 5,
    ...over,
  };
}

describe('MockerEngine', () => {
  it('tokens are a deterministic function of (seed, request seed, position), in the vocab', async () => {
    const e1 = new MockerEngine({ numBlocks: 10, vocabSize: 50, speedupRatio: 1e6 });
    const e2 = new MockerEngine({ numBlocks: 10, vocabSize: 50, speedupRatio: 1e6 });
    const batch: StepBatch = { sequences: [stepSeq({ seqId: 1 }), stepSeq({ seqId: 2, requestSeed: 6 }), stepSeq({ seqId: 3, startPos: 0, tokenIds: Int32Array.of(1, 2, 3, 4) })] };
    const r1 = await e1.step(batch);
    const r2 = await e2.step(batch);
    expect(r1).toEqual(r2);
    // seq 3 is the same request position (4) reached by a 4-token prefill: same token as seq 1.
    expect(r1.sampled[2]!.tokenId).toBe(r1.sampled[0]!.tokenId);
    expect(r1.sampled[0]!.tokenId).toBe(mockTokenAt(0, 5, 4, 50, []));
    const differentSeed = await new MockerEngine({ numBlocks: 10, vocabSize: 50, seed: 9, speedupRatio: 1e6 }).step(batch);
    expect(differentSeed.sampled.map((s) => s.tokenId)).not.toEqual(r1.sampled.map((s) => s.tokenId));
    for (const s of r1.sampled) expect(s.tokenId).toBeGreaterThanOrEqual(0);
  });

  it('skips sequences with sample=false and returns one entry per sampling sequence, in order', async () => {
    const e = new MockerEngine({ numBlocks: 10, speedupRatio: 1e6 });
    const r = await e.step({ sequences: [stepSeq({ seqId: 1, sample: false }), stepSeq({ seqId: 2 })] });
    expect(r.sampled.map((s) => s.seqId)).toEqual([2]);
  });

  it('never emits EOS by chance, and emits it exactly where asked', async () => {
    // Vocab of 4 with EOS ids 0 and 1: chance would hit them half the time.
    const e = new MockerEngine({ numBlocks: 10, vocabSize: 4, eosTokenIds: [1, 0], speedupRatio: 1e6 });
    const plain: number[] = [];
    const asked: number[] = [];
    for (let pos = 4; pos < 60; pos++) {
      const r = await e.step({
        sequences: [
          stepSeq({ seqId: 1, startPos: pos - 1, requestSeed: pos }),
          stepSeq({ seqId: 2, startPos: pos - 1, sampling: { seed: MOCKER_EOS_SEED_BASE + 3 } }),
        ],
      });
      plain.push(r.sampled[0]!.tokenId);
      asked.push(r.sampled[1]!.tokenId);
    }
    expect(plain.every((t) => t === 2 || t === 3)).toBe(true);
    expect(asked[3]).toBe(1); // output index 3 = position 7 (prompt of 4)
    expect(asked.filter((t) => t === 1 || t === 0)).toHaveLength(1);
    const global = new MockerEngine({ numBlocks: 10, vocabSize: 4, eosTokenIds: [1], eosAfterTokens: 0, speedupRatio: 1e6 });
    expect((await global.step({ sequences: [stepSeq({ seqId: 1 })] })).sampled[0]!.tokenId).toBe(1);
  });

  it('returns logprobs and top alternatives when asked', async () => {
    const e = new MockerEngine({ numBlocks: 10, vocabSize: 100, speedupRatio: 1e6 });
    const r = await e.step({ sequences: [stepSeq({ seqId: 1, logprobs: 3 }), stepSeq({ seqId: 2 })] });
    const s = r.sampled[0]!;
    expect(s.logprob).toBeLessThanOrEqual(0);
    expect(s.topLogprobs).toHaveLength(3);
    expect(s.topLogprobs![0]!.tokenId).toBe(s.tokenId);
    expect(r.sampled[1]!.logprob).toBeUndefined();
  });

  it('classifies the batch for the perf model: single tokens past the prompt are decodes', () => {
    const e = new MockerEngine({ numBlocks: 10 });
    const shape = e.shapeOf({
      kvUsage: 0.25,
      sequences: [stepSeq({ seqId: 1 }), stepSeq({ seqId: 2, startPos: 4, history: [1, 2, 3, 4, 5] }), stepSeq({ seqId: 3, startPos: 0, tokenIds: new Int32Array(100) })],
    });
    expect(shape).toEqual({ prefillTokens: 101, numDecodeSeqs: 1, kvUsage: 0.25 });
  });

  it('spends the predicted time divided by the speedup ratio', async () => {
    // 1000-token prefill = 32.106 ms simulated; speedup 4 → ~8 ms real.
    const e = new MockerEngine({ numBlocks: 10, speedupRatio: 4 });
    const batch: StepBatch = { sequences: [stepSeq({ seqId: 1, startPos: 0, tokenIds: new Int32Array(1000), history: new Int32Array(1000), numPromptTokens: 1000 })] };
    const t0 = performance.now();
    for (let i = 0; i < 5; i++) await e.step(batch);
    const elapsed = performance.now() - t0;
    expect(e.simulatedMs).toBeCloseTo(5 * 32.106, 1);
    expect(elapsed).toBeGreaterThanOrEqual(5 * 8 - 2);
    expect(elapsed).toBeLessThan(5 * 8 + 150); // generous: CI shares its 2 cores
  });

  it('at a huge speedup a step only yields (no timer)', async () => {
    const e = new MockerEngine({ numBlocks: 10, speedupRatio: 1e6 });
    const timers = vi.spyOn(globalThis, 'setTimeout');
    try {
      const decode = stepSeq({ seqId: 1, startPos: 4, history: [1, 2, 3, 4, 5] });
      for (let i = 0; i < 200; i++) await e.step({ kvUsage: 0.5, sequences: [decode] });
      // 200 × 26.31 ms simulated / 1e6 ≈ 5 µs in all: below a millisecond, so never a timer.
      expect(timers).not.toHaveBeenCalled();
    } finally {
      timers.mockRestore();
    }
    expect(e.numSteps).toBe(200);
    expect(e.simulatedMs).toBeCloseTo(200 * 26.31, 6);
  });
});
