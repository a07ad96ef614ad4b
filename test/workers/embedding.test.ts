/**
 * The embedding worker's parts without processes: the mocker's deterministic vectors, the
 * batcher (bounded batches, inputs taken round-robin over the waiting requests, a caller that
 * goes away cancels its work), the model card's embedding fields, and the sentence-transformers
 * config reader.
 */
import { mkdtemp, rm, writeFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { EmbedBatcher, MockEmbedder, type Embedder } from '../../workers/embedding/index.js';
import { makeTinyModel, readEmbeddingConfig } from '../../workers/models/index.js';
import { parseModelCard, servesGeneration } from '../../proto/wire.js';
import { PolynomialPerfModel } from '../../perf-model/index.js';
import { CancelledError } from '../../runtime/errors.js';

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

/** An embedder whose calls the test releases one by one; an aborted call rejects at once. */
class GatedEmbedder implements Embedder {
  readonly dimensions = 1;
  readonly calls: number[][][] = [];
  readonly aborted: number[][][] = [];
  private gates: Array<() => void> = [];
  embed(inputs: readonly ArrayLike<number>[], signal?: AbortSignal): Promise<Float32Array> {
    const call = inputs.map((i) => Array.from(i));
    this.calls.push(call);
    return new Promise((resolve, reject) => {
      const gate = () => resolve(Float32Array.from(inputs, (i) => i[0]!));
      this.gates.push(gate);
      signal?.addEventListener('abort', () => {
        this.gates = this.gates.filter((g) => g !== gate);
        this.aborted.push(call);
        reject(new CancelledError('aborted'));
      });
    });
  }
  release(): void {
    this.gates.shift()!();
  }
  get pending(): number {
    return this.gates.length;
  }
  async close(): Promise<void> {}
}

const tick = () => new Promise((r) => setImmediate(r));
/** `n` inputs of one token each, valued from `base`. */
const inputs = (base: number, n: number) => Array.from({ length: n }, (_, i) => [base + i]);

describe('EmbedBatcher', () => {
  it('runs a lone request at once, then what queued meanwhile, one input of each request in turn, within the token budget', async () => {
    const e = new GatedEmbedder();
    const b = new EmbedBatcher(e, 4);
    const first = b.submit([[1]]);
    const second = b.submit([[2, 2]]);
    const third = b.submit([[3], [4]]);
    const fourth = b.submit([[5]]);
    expect(e.calls).toEqual([[[1]]]);
    e.release();
    expect(Array.from(await first)).toEqual([1]);
    await tick();
    // Round-robin: [2,2] (2 tokens), [3] (3), [5] (4 = the budget); third's [4] waits.
    expect(e.calls[1]).toEqual([[2, 2], [3], [5]]);
    e.release();
    expect(Array.from(await second)).toEqual([2]);
    expect(Array.from(await fourth)).toEqual([5]);
    await tick();
    expect(e.calls[2]).toEqual([[4]]);
    e.release();
    expect(Array.from(await third)).toEqual([3, 4]);
    expect(b.stats).toMatchObject({ batches: 3, requests: 4, inputs: 5, tokens: 6, cancelledRequests: 0, cancelledInputs: 0 });
  });

  it('a request of 100 inputs does not hold the endpoint: one of 2 that arrives behind it shares the next batch and is answered after it', async () => {
    const e = new GatedEmbedder();
    const b = new EmbedBatcher(e, 4);
    let smallDone = false;
    const big = b.submit(inputs(1000, 100));
    const small = b.submit(inputs(1, 2)).then((v) => {
      smallDone = true;
      return v;
    });
    expect(e.calls[0]).toEqual([[1000], [1001], [1002], [1003]]); // the big one alone, 4 tokens
    e.release();
    await tick();
    expect(e.calls[1]).toEqual([[1004], [1], [1005], [2]]);
    e.release();
    expect(Array.from(await small)).toEqual([1, 2]);
    expect(smallDone).toBe(true);
    expect(b.stats.inputs).toBe(8); // 6 of the 100 computed when the small one was answered
    // The big one still gets every row, in its order.
    for (let k = 0; k < 24; k++) {
      await tick();
      e.release();
    }
    expect(Array.from(await big)).toEqual(inputs(1000, 100).map((i) => i[0]));
    expect(b.stats).toMatchObject({ batches: 26, requests: 2, inputs: 102 });
  });

  it('a caller that goes away: its waiting inputs are dropped and counted, the running call is aborted when nobody else needs it, and nothing stays in flight', async () => {
    const e = new GatedEmbedder();
    const b = new EmbedBatcher(e, 4);
    const abandon = new AbortController();
    const big = b.submit(inputs(1000, 100), abandon.signal);
    expect(b.inflight).toBe(1);
    abandon.abort();
    await expect(big).rejects.toMatchObject({ code: 'cancelled' });
    await tick();
    expect(e.aborted).toEqual([[[1000], [1001], [1002], [1003]]]);
    expect(e.calls).toHaveLength(1); // no second call for the abandoned inputs
    expect(b.inflight).toBe(0);
    expect(b.stats).toMatchObject({ batches: 0, requests: 0, inputs: 0, cancelledRequests: 1, cancelledInputs: 100 });
    // The next request runs at once.
    const next = b.submit([[7]]);
    expect(e.calls[1]).toEqual([[7]]);
    e.release();
    expect(Array.from(await next)).toEqual([7]);
  });

  it('a caller that leaves a batch shared with another: the call runs on for the other, the leaver gets cancelled at once', async () => {
    const e = new GatedEmbedder();
    const b = new EmbedBatcher(e, 4);
    const gate = b.submit([[9]]);
    const leave = new AbortController();
    const leaver = b.submit(inputs(100, 4), leave.signal);
    const stayer = b.submit(inputs(200, 2));
    e.release();
    await gate;
    await tick();
    expect(e.calls[1]).toEqual([[100], [200], [101], [201]]);
    leave.abort();
    await expect(leaver).rejects.toMatchObject({ code: 'cancelled' });
    expect(e.aborted).toEqual([]);
    e.release();
    expect(Array.from(await stayer)).toEqual([200, 201]);
    await tick();
    expect(e.pending).toBe(0); // the leaver's last 2 inputs never ran
    expect(b.stats).toMatchObject({ requests: 2, cancelledRequests: 1, cancelledInputs: 2 });
    expect(b.inflight).toBe(0);
  });

  it('an engine failure fails every request of that call, and the next request runs', async () => {
    const failing: Embedder = { dimensions: 1, embed: () => Promise.reject(new Error('boom')), close: async () => {} };
    const b = new EmbedBatcher(failing, 4);
    const both = [b.submit(inputs(1, 10)), b.submit([[2]])];
    for (const p of both) await expect(p).rejects.toThrow('boom');
    expect(b.inflight).toBe(0);
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
