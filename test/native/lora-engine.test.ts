/**
 * Multi-LoRA on the native CPU engine: each adapter's greedy output equals the base engine
 * run on a model with that adapter merged into its weights, and one batch mixing three
 * adapters and the base model gives every sequence the tokens it gets alone.
 */
import { join } from 'node:path';
import { writeFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createNativeEngine, type NativeEngine } from '../../workers/engines/native/index.js';
import type { StepSequence } from '../../workers/engines/engine.js';
import { TINY_DIMS } from '../../workers/models/index.js';
import { makeTinyLora, mergeLoraIntoModel, readPeftAdapter, type LoraAdapterSpec } from '../../workers/lora/index.js';
import { blocks, maxAbsDiff, seq, tinyModel, tokens, withTempDir } from './helpers.js';

const STEPS = 12;
const BLOCK = 4;
const TABLE = 12;  // blocks per sequence: prompt 19 + 12 generated < 48 positions

interface Run {
  prompt: number[];
  slot?: number;
  first: number;  // first block id
}

/** Greedy-generates STEPS tokens for each run, all in one batch per step. */
async function generate(engine: NativeEngine, runs: Run[]): Promise<{ tokens: number[][]; firstLogits: Float32Array }> {
  const out: number[][] = runs.map(() => []);
  let firstLogits = new Float32Array(0);
  for (let step = 0; step < STEPS; step++) {
    const sequences: StepSequence[] = runs.map((r, i) => {
      const prev = out[i]!;
      const s = step === 0
        ? seq({ seqId: i, tokens: r.prompt, blockTable: blocks(r.first, TABLE) })
        : seq({ seqId: i, tokens: [prev[prev.length - 1]!], startPos: r.prompt.length + prev.length - 1, blockTable: blocks(r.first, TABLE) });
      if (r.slot !== undefined) s.loraSlot = r.slot;
      return s;
    });
    const res = await engine.stepWithLogits({ sequences });
    if (step === 0) firstLogits = res.logits;
    res.sampled.forEach((t, i) => out[i]!.push(t.tokenId));
  }
  return { tokens: out, firstLogits };
}

describe.each(['llama', 'qwen2', 'qwen3'] as const)('native multi-LoRA (%s)', (arch) => {
  let tmp: Awaited<ReturnType<typeof withTempDir>>;
  let modelDir: string;
  let engine: NativeEngine;
  const specs: LoraAdapterSpec[] = [];
  let prompt: number[];

  beforeAll(async () => {
    tmp = await withTempDir();
    modelDir = await tinyModel(tmp.dir, arch, 'f32', 3);
    const dims = TINY_DIMS[arch];
    // Three adapters: all seven modules; attention only with rsLoRA; MLP only at another rank.
    const made = [
      await makeTinyLora({ dims, outDir: join(tmp.dir, 'a0'), rank: 8, seed: 11 }),
      await makeTinyLora({ dims, outDir: join(tmp.dir, 'a1'), rank: 4, seed: 12, useRslora: true, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj'] }),
      await makeTinyLora({ dims, outDir: join(tmp.dir, 'a2'), rank: 16, alpha: 16, seed: 13, targets: ['gate_proj', 'up_proj', 'down_proj'], dtype: 'bf16' }),
    ];
    for (const d of made) specs.push(await readPeftAdapter(d));
    engine = await createNativeEngine({ modelDir, numBlocks: 256, blockSize: BLOCK, threads: 2 });
    for (let i = 0; i < specs.length; i++) await engine.loadLora(i, specs[i]!);
    prompt = tokens(19, engine.info.vocabSize, 4);
  });
  afterAll(async () => {
    await engine?.close();
    await tmp?.cleanup();
  });

  it('greedy output per adapter equals the base engine on the merged weights, and differs from the base model', async () => {
    const base = await generate(engine, [{ prompt, first: 0 }]);
    for (let i = 0; i < specs.length; i++) {
      const merged = join(tmp.dir, `merged-${i}`);
      await mergeLoraIntoModel(modelDir, specs[i]!.dir, merged);
      const ref = await createNativeEngine({ modelDir: merged, numBlocks: 64, blockSize: BLOCK, threads: 2 });
      try {
        const want = await generate(ref, [{ prompt, first: 0 }]);
        const got = await generate(engine, [{ prompt, slot: i, first: 0 }]);
        expect(maxAbsDiff(got.firstLogits, want.firstLogits)).toBeLessThan(1e-3);
        expect(got.tokens).toEqual(want.tokens);
        expect(got.tokens).not.toEqual(base.tokens);
      } finally {
        await ref.close();
      }
    }
  });

  it('a batch mixing three adapters and the base model gives each sequence its tokens alone', async () => {
    const runs: Run[] = [
      { prompt, slot: 1, first: 0 },
      { prompt: tokens(19, engine.info.vocabSize, 7), first: TABLE },
      { prompt, slot: 0, first: 2 * TABLE },
      { prompt: tokens(19, engine.info.vocabSize, 9), slot: 2, first: 3 * TABLE },
      { prompt, slot: 0, first: 4 * TABLE },  // same adapter again, adjacent: one segment of two sequences
    ];
    const alone: number[][] = [];
    for (const r of runs) alone.push((await generate(engine, [{ ...r, first: 100 }])).tokens[0]!);
    const mixed = await generate(engine, runs);
    expect(mixed.tokens).toEqual(alone);
    // The same prompt under adapter 1, the base and adapter 0 decodes differently.
    expect(new Set([alone[0], alone[2]].map((t) => t!.join(','))).size).toBe(2);
  });

  it('a step naming an empty slot is refused; an unloaded slot is refused; a corrupt adapter is refused and the engine keeps serving', async () => {
    await expect(engine.step({ sequences: [Object.assign(seq({ tokens: prompt, blockTable: blocks(0, TABLE) }), { loraSlot: 7 })] }))
      .rejects.toMatchObject({ code: 'invalid_argument', message: expect.stringContaining('no adapter in lora slot 7') });
    await engine.loadLora(5, specs[0]!);
    await engine.unloadLora(5);
    await expect(engine.step({ sequences: [Object.assign(seq({ tokens: prompt, blockTable: blocks(0, TABLE) }), { loraSlot: 5 })] }))
      .rejects.toMatchObject({ code: 'invalid_argument' });
    const corrupt = join(tmp.dir, 'corrupt');
    await makeTinyLora({ dims: TINY_DIMS[arch], outDir: corrupt, rank: 8, seed: 1 });
    const spec = await readPeftAdapter(corrupt);
    await writeFile(join(corrupt, 'adapter_model.safetensors'), 'not a safetensors file at all');
    await expect(engine.loadLora(6, spec)).rejects.toMatchObject({ code: expect.stringMatching(/config_invalid|not_found|invalid_argument/) });
    // A rank that does not match the tensors is refused naming the tensor.
    await expect(engine.loadLora(6, { ...specs[0]!, rank: 4 })).rejects.toThrow(/lora_A\.weight/);
    const again = await generate(engine, [{ prompt, slot: 0, first: 0 }]);
    const ref = await generate(engine, [{ prompt, slot: 0, first: 50 }]);
    expect(again.tokens).toEqual(ref.tokens);
  });
});
