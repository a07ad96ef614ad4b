/**
 * KV movement between engines (issue 24): pool <-> host bytes (kvReadBlocks / kvWriteBlocks),
 * a peer's pool mapped by handle (kvExportHandle / kvOpenPeer / kvCopyFromPeer; on the SIMT
 * device a named shared-memory segment standing in for CUDA IPC), conversions of block size
 * and dtype, layer ranges, and layer progress. The bar: an engine that imported a prompt's KV
 * continues it exactly as the engine that computed it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createNativeEngine, type NativeEngine } from '../../workers/engines/native/index.js';
import { GREEDY, seq, tinyModel, tokens, withTempDir } from './helpers.js';
import { round_bf16 } from './kv-movement-helpers.js';

const PROMPT = 40;

describe('native KV movement', () => {
  let tmp: Awaited<ReturnType<typeof withTempDir>>;
  let modelDir: string;
  const engines: NativeEngine[] = [];
  const open = async (device: 'cpu' | 'simt', blockSize: number): Promise<NativeEngine> => {
    const e = await createNativeEngine({ modelDir, device, numBlocks: 12, blockSize, threads: 1, maxBatchTokens: 256, maxSeqs: 8 });
    engines.push(e);
    return e;
  };
  /** Prefill PROMPT tokens into `table`, returning the greedy next token. */
  const prefill = async (e: NativeEngine, table: Int32Array, prompt: number[]): Promise<number> =>
    (await e.step({ sequences: [seq({ tokens: prompt, blockTable: table })] })).sampled[0]!.tokenId;
  /** One decode step of `next` at position PROMPT over `table`: logits of the following token. */
  const decode = async (e: NativeEngine, table: Int32Array, next: number, prompt: number[]) =>
    (await e.stepWithLogits({ sequences: [seq({ tokens: [next], startPos: PROMPT, blockTable: table, history: [...prompt, next], sampling: GREEDY })] }));

  beforeAll(async () => {
    tmp = await withTempDir();
    modelDir = await tinyModel(tmp.dir, 'qwen2', 'f32', 24);
  });
  afterAll(async () => {
    for (const e of engines) await e.close();
    await tmp.cleanup();
  });

  it('cpu: read blocks out of one engine, write them into another at another block size, and it continues identically', async () => {
    const a = await open('cpu', 16);
    const b = await open('cpu', 32);
    const prompt = tokens(PROMPT, a.info.vocabSize, 3);
    const aTable = Int32Array.from([7, 2, 9, 4]);  // 64 slots for 41 tokens
    const next = await prefill(a, aTable, prompt);
    const bytes = new Uint8Array(3 * a.model.kvBytesPerBlock);
    await a.kvReadBlocks(aTable.subarray(0, 3), bytes);
    const bTable = Int32Array.from([5, 1]);
    // Two halves by layer range land the same as one whole copy.
    await b.kvWriteBlocks(bTable, bytes, { blockSize: 16, dtype: 'f32' }, [0, 1]);
    await b.kvWriteBlocks(bTable, bytes, { blockSize: 16, dtype: 'f32' }, [1, a.model.numLayers]);
    const want = await decode(a, aTable, next, prompt);
    const got = await decode(b, bTable, next, prompt);
    expect(got.sampled[0]!.tokenId).toBe(want.sampled[0]!.tokenId);
    expect(Array.from(got.logits)).toEqual(Array.from(want.logits));
  });

  it('srcFirstToken: a copy that starts mid-block in the source lands from the first slot of the destination', async () => {
    const a = await open('cpu', 16);
    const b = await open('cpu', 32);
    const prompt = tokens(PROMPT, a.info.vocabSize, 9);
    const aTable = Int32Array.from([3, 0, 6]);
    await prefill(a, aTable, prompt);
    const src = new Uint8Array(3 * a.model.kvBytesPerBlock);
    await a.kvReadBlocks(aTable, src);
    await b.kvWriteBlocks(Int32Array.from([9]), src, { blockSize: 16, dtype: 'f32' }, undefined, 16);
    const got = new Uint8Array(b.model.kvBytesPerBlock);
    await b.kvReadBlocks(Int32Array.from([9]), got);
    const L = a.model.numLayers, row = a.model.numKvHeads * a.model.headDim;
    const s = new Float32Array(src.buffer), d = new Float32Array(got.buffer);
    let mismatches = 0;
    for (let t = 0; t < 24; t++) {  // tokens 16..39 of the prompt: b's slots 0..23
      const at = t + 16;
      for (let l = 0; l < L; l++) {
        for (let kv = 0; kv < 2; kv++) {
          const so = Math.floor(at / 16) * L * 2 * 16 * row + l * 2 * 16 * row + kv * 16 * row + (at % 16) * row;
          const dO = l * 2 * 32 * row + kv * 32 * row + t * row;
          for (let j = 0; j < row; j++) if (d[dO + j] !== s[so + j]) mismatches++;
        }
      }
    }
    expect(mismatches).toBe(0);
    await expect(b.kvWriteBlocks(Int32Array.from([9]), src, { blockSize: 16, dtype: 'f32' }, undefined, 48)).rejects.toMatchObject({ code: 'invalid_argument' });
  });

  it('cpu -> simt: f32 blocks of 16 written into a bf16 pool of 32 read back as their bf16 rounding', async () => {
    const a = await open('cpu', 16);
    const b = await open('simt', 32);
    const prompt = tokens(PROMPT, a.info.vocabSize, 5);
    const aTable = Int32Array.from([1, 2, 3]);
    await prefill(a, aTable, prompt);
    const f32 = new Uint8Array(3 * a.model.kvBytesPerBlock);
    await a.kvReadBlocks(aTable, f32);
    await b.kvWriteBlocks(Int32Array.from([6, 3]), f32, { blockSize: 16, dtype: 'f32' });
    const back = new Uint8Array(2 * b.model.kvBytesPerBlock);
    await b.kvReadBlocks(Int32Array.from([6, 3]), back);
    // Token by token, layer by layer: the bf16 pool holds round_bf16 of the f32 pool's values.
    const L = a.model.numLayers, row = a.model.numKvHeads * a.model.headDim;
    const src = new Float32Array(f32.buffer), dst = new Uint16Array(back.buffer);
    let mismatches = 0;
    for (let t = 0; t < 48; t++) {
      for (let l = 0; l < L; l++) {
        for (let kv = 0; kv < 2; kv++) {
          const s = Math.floor(t / 16) * L * 2 * 16 * row + l * 2 * 16 * row + kv * 16 * row + (t % 16) * row;
          const d = Math.floor(t / 32) * L * 2 * 32 * row + l * 2 * 32 * row + kv * 32 * row + (t % 32) * row;
          for (let j = 0; j < row; j++) if (dst[d + j] !== round_bf16(src[s + j]!)) mismatches++;
        }
      }
    }
    expect(mismatches).toBe(0);
  });

  it('simt: a peer pool mapped by its export handle (shared memory) is copied into another block size with one call', async () => {
    const a = await open('simt', 32);
    const b = await open('simt', 16);
    expect((await open('cpu', 16)).kvExportHandle()).toBeNull();  // host pools go over UCX
    const handle = a.kvExportHandle();
    expect(handle).not.toBeNull();
    expect(new TextDecoder().decode(handle!.subarray(0, 20))).toMatch(/^tandem-kv-ipc\/1 simt/);
    const prompt = tokens(PROMPT, a.info.vocabSize, 7);
    const aTable = Int32Array.from([4, 8]);
    const next = await prefill(a, aTable, prompt);
    const progress = a.layerProgress()!;
    expect(progress[1]).toBe(BigInt(a.model.numLayers));
    const before = progress[0]!;
    const peer = b.kvOpenPeer(handle!, a.kvCopyLayout);
    const bTable = Int32Array.from([11, 0, 5]);
    await b.kvCopyFromPeer(peer, aTable, bTable);
    const want = await decode(a, aTable, next, prompt);
    expect(progress[0]).toBe(before + 1n);  // the live view moved with the step
    const got = await decode(b, bTable, next, prompt);
    expect(got.sampled[0]!.tokenId).toBe(want.sampled[0]!.tokenId);
    // Same bf16 K/V; only the attention's tiling over blocks of 16 vs 32 differs.
    let worst = 0;
    for (let i = 0; i < want.logits.length; i++) worst = Math.max(worst, Math.abs(got.logits[i]! - want.logits[i]!));
    expect(worst).toBeLessThan(1e-3);
    b.kvClosePeer(peer);
    await expect(b.kvCopyFromPeer(peer, aTable, bTable)).rejects.toMatchObject({ code: 'invalid_argument' });
  });

  it('refuses bad ids, sizes, layouts and layer ranges with invalid_argument', async () => {
    const a = await open('cpu', 16);
    const buf = new Uint8Array(a.model.kvBytesPerBlock);
    await expect(a.kvReadBlocks(Int32Array.from([12]), buf)).rejects.toMatchObject({ code: 'invalid_argument' });
    await expect(a.kvReadBlocks(Int32Array.from([0, 1]), buf)).rejects.toMatchObject({ code: 'invalid_argument' });
    await expect(a.kvReadBlocks(Int32Array.from([0]), buf, [0, 99])).rejects.toMatchObject({ code: 'invalid_argument' });
    await expect(a.kvWriteBlocks(Int32Array.from([0]), buf, { numKvHeads: 99 })).rejects.toMatchObject({ code: 'invalid_argument' });
    expect(() => a.kvOpenPeer(new Uint8Array(8), { numBlocks: 1 })).toThrow(/backend 'cpu' does not support it/);
    const g = await open('simt', 16);
    expect(() => g.kvOpenPeer(new Uint8Array(8), { numBlocks: 1 })).toThrow(/not a KV pool handle/);
  });
});
