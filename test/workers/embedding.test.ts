/**
 * The embedding worker's parts without processes: the mocker's deterministic vectors, the
 * batcher (requests that arrive while a batch runs go together into the next one), the model
 * card's embedding fields, and the sentence-transformers config reader.
 */
import { mkdtemp, rm, writeFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { EmbedBatcher, MockEmbedder, type Embedder } from '../../workers/embedding/index.js';
import { makeTinyModel, readEmbeddingConfig } from '../../workers/models/index.js';
import { parseModelCard, servesGeneration } from '../../proto/wire.js';
import { PolynomialPerfModel } from '../../perf-model/index.js';

describe('MockEmbedder', () => {
  it('same tokens, same normalized vector, alone or in a batch', async () => {
    const m = new MockEmbedder(16, 'last', true);
    const batch = await m.embed([[1, 2, 3], [4]]);
    const one = await m.embed([[4]]);
    expect(Array.from(batch.subarray(16))).toEqual(Array.from(one));
    expect(Math.hypot(...batch.subarray(0, 16))).toBeCloseTo(1, 6);
    expect(Array.from(batch.subarray(0, 16))).not.toEqual(Array.from(one));
  });

  it('with a perf model it accounts the prefill time of the batch (divided by the speedup when it waits) and returns the same vectors', async () => {
    const perfModel = new PolynomialPerfModel();
    const timed = new MockEmbedder(16, 'mean', true, { perfModel, speedupRatio: 1e6 });
    const got = await timed.embed([[1, 2, 3], [4, 5]]);
    expect(timed.simulatedMs).toBe(perfModel.prefillMs(5));
    expect(Array.from(got)).toEqual(Array.from(await new MockEmbedder(16, 'mean', true).embed([[1, 2, 3], [4, 5]])));
  });

  it('last-token pooling depends on the order of the tokens, mean pooling does not', async () => {
    const last = new MockEmbedder(8, 'last', true);
    const mean = new MockEmbedder(8, 'mean', true);
    expect(Array.from(await last.embed([[1, 2]]))).not.toEqual(Array.from(await last.embed([[2, 1]])));
    const a = await mean.embed([[1, 2]]);
    const b = await mean.embed([[2, 1]]);
    a.forEach((x, i) => expect(x).toBeCloseTo(b[i]!, 6));
  });
});

/** An embedder whose calls the test releases one by one. */
class GatedEmbedder implements Embedder {
  readonly dimensions = 1;
  readonly calls: number[][][] = [];
  private gates: Array<() => void> = [];
  embed(inputs: readonly ArrayLike<number>[]): Promise<Float32Array> {
    this.calls.push(inputs.map((i) => Array.from(i)));
    return new Promise((resolve) => this.gates.push(() => resolve(Float32Array.from(inputs, (i) => i[0]!))));
  }
  release(): void {
    this.gates.shift()!();
  }
  async close(): Promise<void> {}
}

describe('EmbedBatcher', () => {
  it('runs a lone request at once, then everything that queued meanwhile as one batch (within the token budget)', async () => {
    const e = new GatedEmbedder();
    const b = new EmbedBatcher(e, 4);
    const first = b.submit([[1]]);
    const second = b.submit([[2, 2]]);
    const third = b.submit([[3], [4]]);
    const fourth = b.submit([[5]]); // 2 + 2 tokens fill the budget of 4: this one waits for the next batch
    expect(e.calls).toEqual([[[1]]]);
    e.release();
    expect(Array.from(await first)).toEqual([1]);
    await new Promise((r) => setImmediate(r));
    expect(e.calls[1]).toEqual([[2, 2], [3], [4]]);
    e.release();
    expect(Array.from(await second)).toEqual([2]);
    expect(Array.from(await third)).toEqual([3, 4]);
    await new Promise((r) => setImmediate(r));
    e.release();
    expect(Array.from(await fourth)).toEqual([5]);
    expect(b.stats).toMatchObject({ batches: 3, requests: 4, inputs: 5, tokens: 6 });
  });
});

describe('model card: embedding capability', () => {
  const base = {
    name: 'm', modelPath: '/m', tokenizerSource: '/m', chatTemplateSource: '/m', contextLength: 10, kvBlockSize: 16, totalKvBlocks: 0,
    maxNumBatchedTokens: 8, role: 'agg', engine: 'mocker', component: 'embedding', endpoint: 'embed', instanceId: '00000000000000aa', eosTokenIds: [1],
  };
  const embedding = { dimensions: 64, pooling: 'mean', normalize: true, matryoshka: false };

  it("an embed card carries its capability; a card without task serves generation", () => {
    const card = parseModelCard({ ...base, task: 'embed', embedding });
    expect(card.ok).toBe(true);
    expect(servesGeneration(card.ok ? card.card : { task: 'generate' })).toBe(false);
    expect(servesGeneration({})).toBe(true);
  });

  it('refuses an embed card without its capability, and a bad pooling', () => {
    expect(parseModelCard({ ...base, task: 'embed' })).toMatchObject({ ok: false, reason: expect.stringContaining('embedding') });
    expect(parseModelCard({ ...base, task: 'embed', embedding: { ...embedding, pooling: 'cls' } })).toMatchObject({ ok: false, reason: expect.stringContaining('pooling') });
    expect(parseModelCard({ ...base, task: 'rerank' })).toMatchObject({ ok: false });
  });
});

describe('readEmbeddingConfig', () => {
  it('reads make-tiny --embedding mean --matryoshka back: mean pooling, Normalize, Matryoshka', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tandem-embcfg-'));
    try {
      await makeTinyModel({ arch: 'qwen3', outDir: dir, dtype: 'f32', embedding: 'mean', matryoshka: true });
      expect(await readEmbeddingConfig(dir)).toEqual({ pooling: 'mean', normalize: true, matryoshka: true, source: 'sentence-transformers' });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('no modules.json: no pooling (the flag decides), normalized; an unsupported pooling mode is refused by name', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tandem-embcfg-'));
    try {
      await writeFile(join(dir, 'config.json'), JSON.stringify({ matryoshka_dimensions: [32, 64] }));
      expect(await readEmbeddingConfig(dir)).toEqual({ normalize: true, matryoshka: true, matryoshkaDimensions: [32, 64], source: 'none' });
      await writeFile(join(dir, 'modules.json'), JSON.stringify([{ type: 'sentence_transformers.models.Pooling', path: '1_Pooling' }]));
      await mkdir(join(dir, '1_Pooling'));
      await writeFile(join(dir, '1_Pooling', 'config.json'), JSON.stringify({ pooling_mode_cls_token: true }));
      await expect(readEmbeddingConfig(dir)).rejects.toThrow(/pooling_mode_cls_token/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
