/**
 * The same logits come out however the scheduler slices the work: with or without prefix
 * hits, chunked or whole, alone or in a mixed prefill/decode batch. Tables are chosen by
 * hand so the tests control which blocks are shared.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createNativeEngine, type NativeEngine } from '../../workers/engines/native/index.js';
import { blocks, maxAbsDiff, seq, tinyModel, tokens, withTempDir } from './helpers.js';

const TOL = 1e-4;

describe.each(['llama', 'qwen2', 'qwen3'] as const)('native engine consistency (%s)', (arch) => {
  let tmp: Awaited<ReturnType<typeof withTempDir>>;
  let engine: NativeEngine;
  let prompt: number[];

  beforeAll(async () => {
    tmp = await withTempDir();
    const dir = await tinyModel(tmp.dir, arch, 'f32', 5);
    // block size 4 so a 37-token prompt spans ten blocks with a partial last one.
    engine = await createNativeEngine({ modelDir: dir, numBlocks: 128, blockSize: 4, threads: 2 });
    prompt = tokens(37, engine.info.vocabSize);
  });
  afterAll(async () => {
    await engine.close();
    await tmp.cleanup();
  });

  it('chunked prefill (16 + 16 + 5) gives the unchunked logits', async () => {
    const whole = await engine.stepWithLogits({ sequences: [seq({ tokens: prompt, blockTable: blocks(0, 10) })] });
    const table = blocks(10, 10);
    await engine.step({ sequences: [seq({ tokens: prompt.slice(0, 16), blockTable: table.subarray(0, 4), sample: false })] });
    await engine.step({ sequences: [seq({ tokens: prompt.slice(16, 32), startPos: 16, blockTable: table.subarray(0, 8), sample: false })] });
    const last = await engine.stepWithLogits({ sequences: [seq({ tokens: prompt.slice(32), startPos: 32, blockTable: table })] });
    expect(maxAbsDiff(last.logits, whole.logits)).toBeLessThan(TOL);
    expect(last.sampled[0]!.tokenId).toBe(whole.sampled[0]!.tokenId);
  });

  it('a prefix hit (6 cached blocks reused, 13 new tokens) gives the full-prompt logits', async () => {
    const whole = await engine.stepWithLogits({ sequences: [seq({ tokens: prompt, blockTable: blocks(20, 10) })] });
    // Blocks 20..25 already hold positions 0..23 of this prompt; only 24..36 are computed.
    const hitTable = Int32Array.from([20, 21, 22, 23, 24, 25, 30, 31, 32, 33]);
    const hit = await engine.stepWithLogits({ sequences: [seq({ tokens: prompt.slice(24), startPos: 24, blockTable: hitTable })] });
    expect(maxAbsDiff(hit.logits, whole.logits)).toBeLessThan(TOL);
  });

  it('a mixed batch (decode + prefill + non-sampling chunk) matches each sequence alone', async () => {
    const other = tokens(21, engine.info.vocabSize, 9);
    const aTable = blocks(40, 10);
    const first = await engine.stepWithLogits({ sequences: [seq({ seqId: 1, tokens: prompt, blockTable: aTable })] });
    const next = first.sampled[0]!.tokenId;
    const decodeAlone = await engine.stepWithLogits({ sequences: [seq({ seqId: 1, tokens: [next], startPos: 37, blockTable: aTable })] });
    const otherAlone = await engine.stepWithLogits({ sequences: [seq({ seqId: 2, tokens: other, blockTable: blocks(50, 6) })] });

    // Same decode again on a copy of the sequence's KV (recomputed into 60..69) to keep the pool coherent.
    const bTable = blocks(60, 10);
    await engine.step({ sequences: [seq({ tokens: prompt, blockTable: bTable, sample: false })] });
    const mixed = await engine.stepWithLogits({
      sequences: [
        seq({ seqId: 1, tokens: [next], startPos: 37, blockTable: bTable }),
        seq({ seqId: 3, tokens: prompt.slice(0, 8), blockTable: blocks(70, 2), sample: false }),
        seq({ seqId: 2, tokens: other, blockTable: blocks(80, 6) }),
      ],
    });
    const v = engine.info.vocabSize;
    expect(mixed.sampled.map((s) => s.seqId)).toEqual([1, 2]);
    expect(maxAbsDiff(mixed.logits.subarray(0, v), decodeAlone.logits)).toBeLessThan(TOL);
    expect(maxAbsDiff(mixed.logits.subarray(v, 2 * v), otherAlone.logits)).toBeLessThan(TOL);
    expect(mixed.sampled[1]!.tokenId).toBe(otherAlone.sampled[0]!.tokenId);
  });
});
