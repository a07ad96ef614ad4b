/**
 * The engine's KV pool in caller-owned memory: given at load (`kvPool`) or moved there later
 * (`adoptKvPool`), and in particular a UCX `allocatePool` region, which a peer reads over
 * shared memory without this process's CPU. Checks that the engine really computes in that
 * memory (K/V appear in it; bytes written through the caller's view change the next step),
 * that results equal an engine with its own pool, and that sizes are checked.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setupNativeKvTransfer } from '../../workers/disagg/kv-pool-setup.js';
import { createNativeEngine, describeNativeKvLayout, type NativeEngine } from '../../workers/engines/native/index.js';
import { isUcxBuilt, UcxTransferAgent } from '../../workers/kv-transfer/index.js';
import { blocks, maxAbsDiff, seq, tinyModel, tokens, withTempDir } from './helpers.js';

const NUM_BLOCKS = 16;
const BLOCK_SIZE = 4;

/** True when any byte of [from, to) of the pool is non-zero. */
function anyNonZero(buf: ArrayBuffer, from: number, to: number): boolean {
  const bytes = new Uint8Array(buf, from, to - from);
  for (let i = 0; i < bytes.length; i++) if (bytes[i] !== 0) return true;
  return false;
}

describe('native engine with a caller-owned KV pool', () => {
  let tmp: Awaited<ReturnType<typeof withTempDir>>;
  let modelDir: string;
  let own: NativeEngine;
  let prompt: number[];
  let ownLogits: Float32Array;
  const closeLater: NativeEngine[] = [];

  beforeAll(async () => {
    tmp = await withTempDir();
    modelDir = await tinyModel(tmp.dir, 'qwen2', 'f32', 21);
    own = await createNativeEngine({ modelDir, numBlocks: NUM_BLOCKS, blockSize: BLOCK_SIZE, threads: 1 });
    prompt = tokens(10, own.info.vocabSize);
    ownLogits = (await own.stepWithLogits({ sequences: [seq({ tokens: prompt, blockTable: blocks(0, 3) })] })).logits;
  });
  afterAll(async () => {
    for (const e of closeLater) await e.close();
    await own.close();
    await tmp.cleanup();
  });

  it('describeKvLayout gives the loaded engine sizes, from blocks or from a byte budget', () => {
    const byBlocks = describeNativeKvLayout({ modelDir, numBlocks: NUM_BLOCKS, blockSize: BLOCK_SIZE });
    expect(byBlocks.numBlocks).toBe(own.info.numBlocks);
    expect(byBlocks.kvBytesPerBlock).toBe(own.model.kvBytesPerBlock);
    expect(byBlocks.kvBytesPerToken).toBe(own.model.kvBytesPerToken);
    expect(byBlocks.kvLayout).toBe(own.model.kvLayout);
    const byBudget = describeNativeKvLayout({ modelDir, memoryBudgetBytes: 5 * byBlocks.kvBytesPerBlock + 7, blockSize: BLOCK_SIZE });
    expect(byBudget.numBlocks).toBe(5);
    expect(() => describeNativeKvLayout({ modelDir: `${tmp.dir}/missing`, numBlocks: 4 })).toThrow(expect.objectContaining({ code: 'not_found' }));
  });

  it('computes in the given buffer: K/V land there, equal results, and the buffer is the pool', async () => {
    const { kvBytesPerBlock } = describeNativeKvLayout({ modelDir, numBlocks: NUM_BLOCKS, blockSize: BLOCK_SIZE });
    const pool = new ArrayBuffer(NUM_BLOCKS * kvBytesPerBlock);
    const engine = await createNativeEngine({ modelDir, blockSize: BLOCK_SIZE, threads: 1, kvPool: pool });
    closeLater.push(engine);
    expect(engine.info.numBlocks).toBe(NUM_BLOCKS); // taken from the buffer's size
    expect(engine.kvPoolExternal).toBe(true);
    expect(own.kvPoolExternal).toBe(false);
    expect(engine.kvPool()).toBe(pool);

    const out = await engine.stepWithLogits({ sequences: [seq({ tokens: prompt, blockTable: blocks(4, 3) })] });
    expect(maxAbsDiff(out.logits, ownLogits)).toBe(0);
    expect(anyNonZero(pool, 4 * kvBytesPerBlock, 7 * kvBytesPerBlock)).toBe(true);
    expect(anyNonZero(pool, 0, 4 * kvBytesPerBlock)).toBe(false);

    // A decode step reads the prompt's K/V from this memory: scribbling over it changes the result.
    const next = out.sampled[0]!.tokenId;
    const decode = (): Promise<Float32Array> =>
      engine.stepWithLogits({ sequences: [seq({ tokens: [next], startPos: 10, blockTable: blocks(4, 3) })] }).then((r) => r.logits);
    const clean = await decode();
    new Float32Array(pool, 4 * kvBytesPerBlock, kvBytesPerBlock / 4).fill(3);
    expect(maxAbsDiff(await decode(), clean)).toBeGreaterThan(1e-3);
  });

  it('refuses a pool of the wrong size, naming both sizes', async () => {
    const { kvBytesPerBlock } = describeNativeKvLayout({ modelDir, numBlocks: NUM_BLOCKS, blockSize: BLOCK_SIZE });
    const wrong = new ArrayBuffer(NUM_BLOCKS * kvBytesPerBlock);
    await expect(createNativeEngine({ modelDir, numBlocks: NUM_BLOCKS + 1, blockSize: BLOCK_SIZE, threads: 1, kvPool: wrong })).rejects.toMatchObject({
      code: 'invalid_argument',
      message: expect.stringContaining(`kvPool is ${NUM_BLOCKS * kvBytesPerBlock} bytes`),
    });
    const ragged = new ArrayBuffer(NUM_BLOCKS * kvBytesPerBlock + 8);
    await expect(createNativeEngine({ modelDir, blockSize: BLOCK_SIZE, threads: 1, kvPool: ragged })).rejects.toMatchObject({ code: 'invalid_argument' });
    expect(() => own.adoptKvPool(new ArrayBuffer(kvBytesPerBlock))).toThrow(expect.objectContaining({ code: 'invalid_argument' }));
    expect(own.kvPoolExternal).toBe(false);
  });

  it('adoptKvPool moves a loaded engine into the buffer before its first step', async () => {
    const engine = await createNativeEngine({ modelDir, numBlocks: NUM_BLOCKS, blockSize: BLOCK_SIZE, threads: 1 });
    closeLater.push(engine);
    const pool = new ArrayBuffer(NUM_BLOCKS * engine.model.kvBytesPerBlock);
    engine.adoptKvPool(pool);
    expect(engine.kvPoolExternal).toBe(true);
    expect(engine.kvPool()).toBe(pool);
    const out = await engine.stepWithLogits({ sequences: [seq({ tokens: prompt, blockTable: blocks(8, 3) })] });
    expect(maxAbsDiff(out.logits, ownLogits)).toBe(0);
    expect(anyNonZero(pool, 8 * engine.model.kvBytesPerBlock, 11 * engine.model.kvBytesPerBlock)).toBe(true);
  });

  describe.skipIf(!isUcxBuilt())('in a UCX-allocated region', () => {
    it('the engine pool IS the agent allocation, and a closed agent stops the engine cleanly', async () => {
      const setup = await setupNativeKvTransfer({ modelDir, numBlocks: NUM_BLOCKS, blockSize: BLOCK_SIZE, threads: 1 }, { ucxConfig: { TLS: 'sm,self' } });
      const { engine, pool } = setup;
      try {
        expect(engine.kvPoolExternal).toBe(true);
        expect(engine.kvPool()).toBe(pool.buffer);
        expect(pool.numBlocks * pool.blockBytes).toBe(engine.model.kvBytesPerBlock * engine.info.numBlocks);
        expect(pool.layout).toBe(engine.kvLayoutName);
        const out = await engine.stepWithLogits({ sequences: [seq({ tokens: prompt, blockTable: blocks(1, 3) })] });
        expect(maxAbsDiff(out.logits, ownLogits)).toBe(0);
        expect(anyNonZero(pool.buffer as ArrayBuffer, pool.blockBytes, 4 * pool.blockBytes)).toBe(true);
      } finally {
        setup.close();
      }
      // The agent unmapped the memory: the engine refuses to step instead of touching it.
      expect((pool.buffer as ArrayBuffer).byteLength).toBe(0);
      await expect(engine.step({ sequences: [seq({ tokens: prompt, blockTable: blocks(1, 3) })] })).rejects.toMatchObject({ code: 'unavailable' });
      await engine.close();
    });

    it('setupKvTransfer moves an already loaded engine into the agent allocation', async () => {
      const { setupKvTransfer } = await import('../../workers/disagg/kv-pool-setup.js');
      const engine = await createNativeEngine({ modelDir, numBlocks: NUM_BLOCKS, blockSize: BLOCK_SIZE, threads: 1 });
      const setup = setupKvTransfer(engine, { kvBytesPerToken: 0, ucxConfig: { TLS: 'sm,self' } });
      try {
        expect(setup.engine).toBe(engine);
        expect(engine.kvPool()).toBe(setup.pool.buffer);
        await engine.step({ sequences: [seq({ tokens: prompt, blockTable: blocks(2, 3) })] });
        expect(anyNonZero(setup.pool.buffer as ArrayBuffer, 2 * setup.pool.blockBytes, 5 * setup.pool.blockBytes)).toBe(true);
      } finally {
        await engine.close();
        setup.close();
      }
    });

    it('refuses an agent pool whose size does not match the model', async () => {
      const agent = UcxTransferAgent.create({ config: { TLS: 'sm,self' } });
      try {
        const { kvBytesPerBlock } = describeNativeKvLayout({ modelDir, numBlocks: NUM_BLOCKS, blockSize: BLOCK_SIZE });
        const pool = agent.allocatePool({ numBlocks: NUM_BLOCKS, blockBytes: kvBytesPerBlock / 2, layout: 'x' });
        await expect(createNativeEngine({ modelDir, numBlocks: NUM_BLOCKS, blockSize: BLOCK_SIZE, threads: 1, kvPool: pool.buffer as ArrayBuffer })).rejects.toMatchObject({
          code: 'invalid_argument',
        });
      } finally {
        agent.close();
      }
    });
  });
});
