import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import type { StepBatch, StepSequence } from '../../workers/engines/engine.js';
import {
  InterpolatedPerfModel,
  MOCKER_EOS_SEED_BASE,
  MockerEngine,
  PolynomialPerfModel,
  loadPerfProfile,
  mockTokenAt,
  stepTimeMs,
} from '../../workers/engines/mocker/index.js';

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

describe('mocker perf model', () => {
  const m = new PolynomialPerfModel();

  it('prefill worked numbers: t=1000 → 32.106 ms, t=0 → 16.5 ms intercept', () => {
    // 4.209989e-7·1e6 = 0.421; 1.518344e-2·1000 = 15.183; + 16.501 = 32.106
    expect(m.prefillMs(1000)).toBeCloseTo(32.106, 3);
    expect(m.prefillMs(0)).toBeCloseTo(16.50142, 5);
    // 4.209989e-7·4096² = 7.063; 1.518344e-2·4096 = 62.191; total 85.756
    expect(m.prefillMs(4096)).toBeCloseTo(85.756, 2);
  });

  it('decode worked numbers: p=0 → 5.74 ms, p=0.5 → 26.31 ms, p=1 → 34.01 ms', () => {
    expect(m.decodeMs(0, 1)).toBeCloseTo(5.74, 6);
    // −25.74·0.25 + 54.01·0.5 + 5.74 = −6.435 + 27.005 + 5.74
    expect(m.decodeMs(0.5, 8)).toBeCloseTo(26.31, 6);
    expect(m.decodeMs(1, 8)).toBeCloseTo(34.01, 6);
  });

  it('decode is floored at 1 ms', () => {
    const steep = new PolynomialPerfModel(undefined, [0, -100, 2]);
    expect(steep.decodeMs(0.5, 1)).toBe(1);
  });

  it('a mixed step pays prefill plus decode; an empty step costs nothing', () => {
    expect(stepTimeMs(m, { prefillTokens: 1000, numDecodeSeqs: 4, kvUsage: 0.5 })).toBeCloseTo(32.106 + 26.31, 2);
    expect(stepTimeMs(m, { prefillTokens: 0, numDecodeSeqs: 0, kvUsage: 0.5 })).toBe(0);
  });

  it('profile mode interpolates measured points linearly', () => {
    const p = new InterpolatedPerfModel({
      prefill: { tokens: [1000, 100], ms: [50, 14] },
      decode: { kvUsage: [0, 1], ms: [4, 24] },
    });
    expect(p.prefillMs(550)).toBeCloseTo(32, 6); // halfway between 14 and 50
    expect(p.prefillMs(1900)).toBeCloseTo(86, 6); // last segment extended: +36 ms per 900 tokens
    expect(p.prefillMs(10)).toBe(14); // clamped below
    expect(p.decodeMs(0.25, 1)).toBeCloseTo(9, 6);
    expect(p.decodeMs(3, 1)).toBe(24); // clamped
  });

  it('profile mode with a kvUsage × batchSize grid interpolates bilinearly', () => {
    const p = new InterpolatedPerfModel({
      prefill: { tokens: [1], ms: [1] },
      decode: { kvUsage: [0, 1], batchSize: [1, 101], ms: [[2, 12], [22, 42]] },
    });
    // at kv 0.5: batch 1 → 12, batch 101 → 27; batch 51 → 19.5
    expect(p.decodeMs(0.5, 51)).toBeCloseTo(19.5, 6);
  });

  it('loads a profile file and rejects a malformed one with a config error', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tandem-profile-'));
    try {
      const good = join(dir, 'good.json');
      await writeFile(good, JSON.stringify({ prefill: { tokens: [0, 100], ms: [10, 20] }, decode: { kvUsage: [0, 1], ms: [5, 6] } }));
      expect((await loadPerfProfile(good)).prefillMs(50)).toBeCloseTo(15, 6);
      const bad = join(dir, 'bad.json');
      await writeFile(bad, JSON.stringify({ prefill: { tokens: [1, 2], ms: [1] }, decode: { kvUsage: [0], ms: [1] } }));
      await expect(loadPerfProfile(bad)).rejects.toMatchObject({ code: 'config_invalid' });
      await expect(loadPerfProfile(join(dir, 'missing.json'))).rejects.toMatchObject({ code: 'config_invalid' });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

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
