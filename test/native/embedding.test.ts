/**
 * The native pooling step (Engine::embed through NativeEngine.embed) against an independent
 * TypeScript forward pass (embedding-reference.ts) on tiny Qwen2/Qwen3 f32 models: mean and
 * last-token pooling, normalization, and a batch equal to its inputs run one by one, across
 * forward passes split by a small KV pool; an abort stops a call between its passes.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { createNativeEngine, type NativeEngine } from '../../workers/engines/native/index.js';
import { makeTinyModel } from '../../workers/models/index.js';
import { SeededRandom } from '../../runtime/random.js';
import { maxAbsDiff, ReferenceEmbedder } from './embedding-reference.js';
import { withTempDir } from './helpers.js';

const TOL = 2e-5;
let tmp: Awaited<ReturnType<typeof withTempDir>>;
beforeAll(async () => {
  tmp = await withTempDir();
});
afterAll(async () => {
  await tmp.cleanup();
});

function prompts(seed: number, lengths: number[], vocab: number): number[][] {
  const rng = new SeededRandom(seed);
  return lengths.map((n) => Array.from({ length: n }, () => rng.int(0, vocab)));
}

function pack(inputs: number[][]): { tokens: Int32Array; lengths: Int32Array } {
  return { tokens: Int32Array.from(inputs.flat()), lengths: Int32Array.from(inputs.map((i) => i.length)) };
}

describe.each(['qwen3', 'qwen2'] as const)('native embed (%s, f32)', (arch) => {
  let engine: NativeEngine;
  let ref: ReferenceEmbedder;
  // 1, 7, 16 (one full block), 33 tokens (three blocks, the last partial)
  const inputs = prompts(5, [1, 7, 16, 33], 512);

  beforeAll(async () => {
    const dir = join(tmp.dir, arch);
    await makeTinyModel({ arch, outDir: dir, dtype: 'f32', seed: 21, embedding: 'mean' });
    // 4 blocks of 16: the 57-token batch needs 6, so it runs as several forward passes.
    engine = await createNativeEngine({ modelDir: dir, numBlocks: 4, blockSize: 16, threads: 2 });
    ref = await ReferenceEmbedder.load(dir);
  }, 60_000);
  afterAll(async () => {
    await engine?.close();
  });

  for (const pooling of ['mean', 'last'] as const) {
    it(`${pooling} pooling equals the reference forward, normalized`, async () => {
      const { tokens, lengths } = pack(inputs);
      const got = await engine.embed(tokens, lengths, pooling, true);
      const d = engine.model.hiddenSize;
      expect(got.length).toBe(inputs.length * d);
      inputs.forEach((input, i) => {
        const want = ref.embed(input, pooling);
        const row = got.subarray(i * d, (i + 1) * d);
        expect(maxAbsDiff(row, want)).toBeLessThan(TOL);
        expect(Math.hypot(...row)).toBeCloseTo(1, 5);
      });
    });
  }

  it('mean and last pooling differ (the pooling mode is applied)', async () => {
    const { tokens, lengths } = pack([inputs[3]!]);
    const mean = await engine.embed(tokens, lengths, 'mean', true);
    const last = await engine.embed(tokens, lengths, 'last', true);
    expect(maxAbsDiff(mean, last)).toBeGreaterThan(0.05);
  });

  it('a batch equals its inputs embedded one by one', async () => {
    const { tokens, lengths } = pack(inputs);
    const batch = await engine.embed(tokens, lengths, 'mean', true);
    const d = engine.model.hiddenSize;
    for (const [i, input] of inputs.entries()) {
      const one = await engine.embed(Int32Array.from(input), Int32Array.of(input.length), 'mean', true);
      expect(maxAbsDiff(batch.subarray(i * d, (i + 1) * d), one)).toBeLessThan(1e-6);
    }
  });

  it('an abort stops the call between forward passes (code cancelled), and the next call runs as before', async () => {
    // 2,000 inputs of 64 tokens: each fills the 4-block pool, so 2,000 passes.
    const many = prompts(9, Array.from({ length: 2000 }, () => 64), 512);
    const { tokens, lengths } = pack(many);
    const stop = new AbortController();
    const call = engine.embed(tokens, lengths, 'mean', true, stop.signal);
    setImmediate(() => stop.abort()); // once the native call is under way
    await expect(call).rejects.toMatchObject({ code: 'cancelled' });
    const before = new AbortController();
    before.abort();
    await expect(engine.embed(tokens, lengths, 'mean', true, before.signal)).rejects.toMatchObject({ code: 'cancelled' });
    const { tokens: t, lengths: l } = pack(inputs);
    const got = await engine.embed(t, l, 'mean', true, new AbortController().signal);
    const d = engine.model.hiddenSize;
    inputs.forEach((input, i) => expect(maxAbsDiff(got.subarray(i * d, (i + 1) * d), ref.embed(input, 'mean'))).toBeLessThan(TOL));
  });

  it('refuses a token outside the vocabulary and an input longer than the pool, naming the sequence', async () => {
    await expect(engine.embed(Int32Array.of(1, 99999), Int32Array.of(2), 'mean', true)).rejects.toMatchObject({ code: 'invalid_argument', message: expect.stringContaining('99999') });
    const long = new Int32Array(65).fill(3);
    await expect(engine.embed(long, Int32Array.of(65), 'last', true)).rejects.toMatchObject({ code: 'invalid_argument', message: expect.stringContaining('sequence 0') });
  });
});

describe('native embed on the CUDA backend, SIMT harness (bf16 weights, 48 tokens per pass: 1 + 9 + 40 runs as two passes)', () => {
  let engine: NativeEngine;
  let ref: ReferenceEmbedder;
  const inputs = prompts(6, [1, 9, 40], 512);

  beforeAll(async () => {
    const dir = join(tmp.dir, 'simt');
    await makeTinyModel({ arch: 'qwen3', outDir: dir, dtype: 'f32', seed: 21, embedding: 'mean' });
    engine = await createNativeEngine({ modelDir: dir, device: 'simt', numBlocks: 8, blockSize: 16, threads: 2, maxBatchTokens: 48, maxSeqs: 8 });
    ref = await ReferenceEmbedder.load(dir);
  }, 60_000);
  afterAll(async () => {
    await engine?.close();
  });

  for (const pooling of ['mean', 'last'] as const) {
    it(`${pooling} pooling equals the reference within bf16 rounding`, async () => {
      const { tokens, lengths } = pack(inputs);
      const got = await engine.embed(tokens, lengths, pooling, true);
      inputs.forEach((input, i) => expect(maxAbsDiff(got.subarray(i * 64, (i + 1) * 64), ref.embed(input, pooling))).toBeLessThan(2e-2));
    });
  }

  it('refuses an input longer than the tokens per pass, naming both', async () => {
    await expect(engine.embed(new Int32Array(49).fill(2), Int32Array.of(49), 'mean', true)).rejects.toMatchObject({ code: 'invalid_argument', message: expect.stringContaining('maxBatchTokens 48') });
  });

  it('an abort stops the call between forward passes here too (the loop is the engine\'s, not the backend\'s)', async () => {
    // 400 inputs of 40 tokens, one per 48-token pass: 400 passes.
    const { tokens, lengths } = pack(prompts(10, Array.from({ length: 400 }, () => 40), 512));
    const stop = new AbortController();
    const call = engine.embed(tokens, lengths, 'mean', true, stop.signal);
    setImmediate(() => stop.abort());
    await expect(call).rejects.toMatchObject({ code: 'cancelled' });
    const { tokens: t, lengths: l } = pack(inputs);
    const got = await engine.embed(t, l, 'mean', true);
    inputs.forEach((input, i) => expect(maxAbsDiff(got.subarray(i * 64, (i + 1) * 64), ref.embed(input, 'mean'))).toBeLessThan(2e-2));
  });
});
