/**
 * Embedding goldens: the native pooling step and the frontend's tokenizer against fixtures that
 * sentence-transformers wrote (scripts/goldens/make_embedding_goldens.py, run where it is
 * installed: scripts/device/embedding-goldens.sh on the GPU machine). Each fixture names the
 * make-tiny command and the sha256 of the weights; the test rebuilds the model and checks the
 * hash first. Without fixtures the check is skipped, saying so.
 */
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createNativeEngine, type NativeEngine } from '../../workers/engines/native/index.js';
import { makeTinyModel } from '../../workers/models/index.js';
import { createHfCodecLoader } from '../../frontend/hf-codec.js';
import type { ModelCard } from '../../proto/wire.js';
import { maxAbsDiff } from './embedding-reference.js';
import { withTempDir } from './helpers.js';

interface EmbeddingGolden {
  label: string;
  pooling: 'mean' | 'last';
  make_tiny: string;
  weights_sha256: string;
  cases: Array<{ token_ids: number[]; embedding: number[] }>;
  texts: Array<{ text: string; token_ids: number[]; embedding: number[] }>;
}

const FIXTURES = join(import.meta.dirname, '../fixtures/embedding-goldens');
const files = existsSync(FIXTURES) ? readdirSync(FIXTURES).filter((f) => f.endsWith('.json')).sort() : [];

it.skipIf(files.length === 0)('embedding goldens: fixtures present (skipped: none yet; scripts/device/embedding-goldens.sh makes them where sentence-transformers is installed)', () => {
  expect(files.length).toBeGreaterThan(0);
});

let tmp: Awaited<ReturnType<typeof withTempDir>>;
beforeAll(async () => {
  tmp = await withTempDir();
});
afterAll(async () => {
  await tmp.cleanup();
});

describe.each(files)('embedding goldens %s', (file) => {
  const golden = JSON.parse(readFileSync(join(FIXTURES, file), 'utf8')) as EmbeddingGolden;
  let engine: NativeEngine;
  let dir: string;

  beforeAll(async () => {
    const seed = Number(/--seed (\d+)/.exec(golden.make_tiny)![1]);
    dir = join(tmp.dir, golden.label);
    await makeTinyModel({ arch: 'qwen3', outDir: dir, dtype: 'f32', seed, embedding: golden.pooling });
    engine = await createNativeEngine({ modelDir: dir, numBlocks: 16, threads: 2 });
  }, 60_000);
  afterAll(async () => {
    await engine?.close();
  });

  it('the weights are the ones the fixture was made from', async () => {
    const sha = createHash('sha256').update(await readFile(join(dir, 'model.safetensors'))).digest('hex');
    expect(sha).toBe(golden.weights_sha256);
  });

  it('token-id inputs embed as sentence-transformers does', async () => {
    const inputs = golden.cases.map((c) => c.token_ids);
    const got = await engine.embed(Int32Array.from(inputs.flat()), Int32Array.from(inputs.map((i) => i.length)), golden.pooling, true);
    const d = engine.model.hiddenSize;
    golden.cases.forEach((c, i) => expect(maxAbsDiff(got.subarray(i * d, (i + 1) * d), c.embedding)).toBeLessThan(1e-4));
  });

  it("texts: the frontend's tokenizer gives sentence-transformers' ids, and the same vectors", async () => {
    const codec = await createHfCodecLoader({})({ name: golden.label, modelPath: dir, tokenizerSource: dir, chatTemplateSource: dir } as ModelCard);
    for (const t of golden.texts) {
      const ids = await codec.tokenize({ kind: 'text', text: t.text, addSpecialTokens: true }, { maxPromptTokens: 2048 });
      expect(ids.type === 'tokens' ? Array.from(ids.ids) : ids).toEqual(t.token_ids);
      const got = await engine.embed(Int32Array.from(t.token_ids), Int32Array.of(t.token_ids.length), golden.pooling, true);
      expect(maxAbsDiff(got, t.embedding)).toBeLessThan(1e-4);
    }
  });
});
