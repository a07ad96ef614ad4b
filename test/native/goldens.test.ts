/**
 * Goldens: the engine against fixtures written by scripts/goldens/make_goldens.py (a PyTorch
 * re-implementation of transformers' modeling code) from make-tiny models. Each fixture names
 * the make-tiny command and the sha256 of the weights it was made from; the test rebuilds
 * the same model and checks the hash first, so a drifting generator fails loudly instead of
 * comparing against the wrong weights.
 */
import { createHash } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createNativeEngine, type NativeEngine } from '../../workers/engines/native/index.js';
import type { TinyArch } from '../../workers/models/index.js';
import { blocks, maxAbsDiff, seq, tinyModel, withTempDir } from './helpers.js';

interface GoldenCase {
  prompt: number[];
  greedy: number[];
  first_logits: number[];
  min_greedy_margin: number;
}
interface Golden {
  label: string;
  make_tiny: string;
  weights_sha256: string;
  vocab_size: number;
  cases: GoldenCase[];
}

const FIXTURES = join(import.meta.dirname, '../fixtures/goldens');
const goldenFiles = readdirSync(FIXTURES).filter((f) => f.endsWith('.json')).sort();

function parseMakeTiny(cmd: string): { arch: TinyArch; dtype: 'f32' | 'bf16'; seed: number; ropeScaling?: 'yarn' } {
  const flag = (name: string): string => {
    const m = new RegExp(`--${name} (\\S+)`).exec(cmd);
    if (m === null) throw new Error(`fixture make_tiny lacks --${name}: ${cmd}`);
    return m[1]!;
  };
  const rope = /--rope-scaling (\S+)/.exec(cmd)?.[1];
  return { arch: flag('arch') as TinyArch, dtype: flag('dtype') as 'f32' | 'bf16', seed: Number(flag('seed')), ...(rope === 'yarn' ? { ropeScaling: 'yarn' as const } : {}) };
}

let tmp: Awaited<ReturnType<typeof withTempDir>>;
beforeAll(async () => {
  tmp = await withTempDir();
});
afterAll(async () => {
  await tmp.cleanup();
});

it('goldens: every committed fixture is covered (llama, qwen2, qwen3, bf16; the MoEs and YaRN)', () => {
  expect(goldenFiles).toEqual([
    'llama-bf16.json',
    'llama-f32.json',
    'mixtral-bf16.json',
    'mixtral-f32.json',
    'qwen2-f32.json',
    'qwen2-moe-f32.json',
    'qwen3-f32.json',
    'qwen3-moe-f32.json',
    'qwen3-yarn-f32.json',
  ]);
});

describe.each(goldenFiles)('goldens %s', (file) => {
  const golden = JSON.parse(readFileSync(join(FIXTURES, file), 'utf8')) as Golden;
  let engine: NativeEngine;
  let modelDir: string;

  beforeAll(async () => {
    const { arch, dtype, seed, ropeScaling } = parseMakeTiny(golden.make_tiny);
    modelDir = await tinyModel(tmp.dir, arch, dtype, seed, ropeScaling);
    engine = await createNativeEngine({ modelDir, numBlocks: 64, blockSize: 16, threads: 2 });
  });
  afterAll(async () => {
    await engine?.close();
  });

  it('make-tiny rebuilds the exact weights the fixture was made from', async () => {
    const bytes = await readFile(join(modelDir, 'model.safetensors'));
    expect(createHash('sha256').update(bytes).digest('hex'), 'make-tiny output changed: run sh scripts/goldens/regenerate.sh').toBe(
      golden.weights_sha256,
    );
    expect(engine.info.vocabSize).toBe(golden.vocab_size);
  });

  it.each(golden.cases.map((c, i) => [i, c] as const))('case %i: first-step logits within 1e-3 and 32 greedy tokens identical', async (_i, c) => {
    const table = blocks(0, 64);
    const first = await engine.stepWithLogits({ sequences: [seq({ tokens: c.prompt, blockTable: table })] });
    expect(maxAbsDiff(first.logits, c.first_logits)).toBeLessThan(1e-3);
    const got = [first.sampled[0]!.tokenId];
    for (let i = 1; i < c.greedy.length; i++) {
      const r = await engine.step({
        sequences: [seq({ tokens: [got[i - 1]!], startPos: c.prompt.length + i - 1, blockTable: table })],
      });
      got.push(r.sampled[0]!.tokenId);
    }
    expect(got).toEqual(c.greedy);
    expect(got.length).toBeGreaterThanOrEqual(32);
  });
});
