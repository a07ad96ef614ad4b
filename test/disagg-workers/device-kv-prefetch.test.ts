/**
 * DeviceKvPrefetcher (workers/disagg/device-kv-prefetch.ts) with the device copies and the
 * progress slot in the test's hands (a recording engine, an agent whose slot reads return what
 * the test publishes): staging comes from the reserved tail of the pool and goes back exactly
 * once (adopted, failed, expired, closed); each layer range is copied once, in order, never
 * ahead of the published count; adoption is one copy inside the pool, staging → the
 * sequence's blocks; hand-offs that cannot stream here are declined. The same code across two
 * real processes: test/disagg-e2e/device-layer-streaming.test.ts.
 */
import { describe, expect, it } from 'vitest';
import type { KvTransferParams } from '../../proto/wire.js';
import type { KvImportJob } from '../../workers/engine-loop/index.js';
import { DeviceKvPrefetcher, stagingBlocksFor } from '../../workers/disagg/device-kv-prefetch.js';
import { formatLayoutName, type KvLayoutDescriptor, type KvPool, type KvTransferAgent } from '../../workers/kv-transfer/index.js';

const LAYOUT: KvLayoutDescriptor = { order: 'block_major.v1', blockSize: 16, dtype: 'bf16', numLayers: 4, numKvHeads: 2, headDim: 8, tp: 1 };
const SLOT_LAYOUT = 'layer-progress.v1';

/** An agent whose only remote memory is one progress slot the test sets. */
function fakeAgent() {
  const slot = { layers: 0, generation: 7, fail: false };
  const agent = {
    allocatePool: (spec: { numBlocks: number; blockBytes: number; layout: string }): KvPool => {
      const buffer = new ArrayBuffer(spec.numBlocks * spec.blockBytes);
      return { regionId: 1, baseAddress: '0x0', remoteKey: '', byteLength: buffer.byteLength, blockBytes: spec.blockBytes, numBlocks: spec.numBlocks, layout: spec.layout, buffer };
    },
    releasePool: () => undefined,
    pull: async (_d: unknown, pool: KvPool) => {
      if (slot.fail) throw new Error('peer gone');
      const v = new DataView(pool.buffer as ArrayBuffer);
      v.setUint32(0, slot.layers, true);
      v.setUint32(4, slot.generation, true);
      return { bytes: 8, seconds: 0, blocks: 1, ranges: 1 };
    },
  } as unknown as KvTransferAgent;
  return { agent, slot };
}

interface Copy {
  peer: number;
  src: number[];
  dst: number[];
  layers: [number, number] | undefined;
  ready: number;
}

function fakeEngine(slot: { layers: number }) {
  const copies: Copy[] = [];
  const engine = {
    kvCopyFromPeer: async (peer: number, src: Int32Array, dst: Int32Array, layers?: [number, number]) => {
      copies.push({ peer, src: Array.from(src), dst: Array.from(dst), layers, ready: slot.layers });
    },
    kvExportHandle: () => new Uint8Array([1, 2, 3]),
    kvOpenPeer: () => 99, // our own pool, opened by its handle
    kvCopyLayout: { blockSize: 16, dtype: 'bf16', numLayers: 4, numKvHeads: 2, headDim: 8, numBlocks: 64 },
  };
  return { engine, copies };
}

function handOff(id: string, numTokens: number, extra: Partial<KvTransferParams> = {}): KvTransferParams {
  return {
    prefillInstanceId: 'p1',
    blockIds: Array.from({ length: Math.ceil(numTokens / 16) }, (_, i) => 100 + i),
    numTokens,
    ucxWorkerAddress: 'ab',
    remoteKey: '',
    poolBaseAddress: '0x0',
    blockBytes: 4096,
    layout: formatLayoutName(LAYOUT),
    transferId: id,
    kvLayout: LAYOUT,
    kvDeviceHandle: 'aGFuZGxl',
    kvLayerProgress: { ucxWorkerAddress: 'ab', remoteKey: '', poolBaseAddress: '0x0', blockBytes: 8, layout: SLOT_LAYOUT, blockIds: [0], generation: 7, numLayers: 4 },
    ...extra,
  };
}

function job(source: KvTransferParams, localBlockIds: number[], firstBlock = 0): KvImportJob {
  return { seqId: 1, requestId: 'r', source, localBlockIds, firstBlock, numTokens: source.numTokens + 1, tokenIds: new Int32Array(0) } as unknown as KvImportJob;
}

const until = async (cond: () => boolean) => {
  for (let i = 0; i < 400 && !cond(); i++) await new Promise((r) => setTimeout(r, 5));
  expect(cond()).toBe(true);
};

describe('DeviceKvPrefetcher', () => {
  function setup(count = 8, expireMs = 10_000) {
    const { agent, slot } = fakeAgent();
    const { engine, copies } = fakeEngine(slot);
    const failed: unknown[] = [];
    const p = new DeviceKvPrefetcher({
      agent,
      engine,
      layout: LAYOUT,
      staging: { first: 56, count },
      peerFor: () => 5,
      expireMs,
      pullTimeoutMs: 1_000,
      onFailed: (_s, err) => failed.push(err),
    });
    return { p, slot, copies, failed };
  }

  it('copies layer ranges into the tail of the pool as the published count grows, never ahead, then adopts with one copy in the pool', async () => {
    const { p, slot, copies } = setup();
    const source = handOff('t1', 40); // 3 blocks of 16
    expect(p.start(source)).toBe(true);
    expect(p.stagingBlocksInUse).toBe(3);
    slot.layers = 1;
    await until(() => copies.length === 1);
    slot.layers = 3;
    await until(() => copies.length === 2);
    slot.layers = 4;
    await until(() => copies.length === 3);
    // Staging: blocks of the reserved tail [56, 64), in order.
    expect(copies.map((c) => c.dst)).toEqual([[56, 57, 58], [56, 57, 58], [56, 57, 58]]);
    expect(copies.map((c) => c.layers)).toEqual([[0, 1], [1, 3], [3, 4]]);
    expect(copies.every((c) => c.peer === 5 && c.layers![1] <= c.ready)).toBe(true);
    expect(copies[0]!.src).toEqual([100, 101, 102]);

    // The decode request's blocks after a 1-block local prefix hit: staging blocks 1..2 → 7, 9.
    expect(await p.adopt(job(source, [7, 9], 1))).toBe('adopted');
    expect(copies.at(-1)).toMatchObject({ peer: 99, src: [57, 58], dst: [7, 9], layers: undefined });
    expect(p.stagingBlocksInUse).toBe(0);
    expect(await p.adopt(job(source, [7, 9], 1))).toBe('none');
  });

  it('declines what it cannot stream: no device handle, no slot, too large for the staging left, another shape, no peer', () => {
    const { p } = setup(4);
    expect(p.start(handOff('a', 40, { kvDeviceHandle: undefined }))).toBe(false);
    expect(p.start(handOff('b', 40, { kvLayerProgress: undefined }))).toBe(false);
    expect(p.start(handOff('c', 16 * 5))).toBe(false); // 5 blocks > 4 staging
    expect(p.start(handOff('d', 40, { kvLayout: { ...LAYOUT, numLayers: 3 }, layout: formatLayoutName({ ...LAYOUT, numLayers: 3 }) }))).toBe(false);
    const { agent } = fakeAgent();
    const none = new DeviceKvPrefetcher({ agent, engine: fakeEngine({ layers: 0 }).engine, layout: LAYOUT, staging: { first: 0, count: 8 }, peerFor: () => undefined, expireMs: 1000, pullTimeoutMs: 1000 });
    expect(none.start(handOff('e', 40))).toBe(false);
    expect(p.stagingBlocksInUse).toBe(0);
  });

  it('a stream that fails (the prefill died) frees its staging at once; adopt says failed only for a live entry', async () => {
    const { p, slot, failed } = setup();
    const source = handOff('t2', 64);
    expect(p.start(source)).toBe(true);
    expect(p.stagingBlocksInUse).toBe(4);
    slot.fail = true;
    await until(() => failed.length === 1);
    await until(() => p.stagingBlocksInUse === 0);
    expect(p.size).toBe(0);
    expect(await p.adopt(job(source, [1, 2, 3, 4]))).toBe('none');
  });

  it('an unclaimed prefetch expires and close() stops the rest: staging comes back once', async () => {
    const { p, slot } = setup(8, 50);
    expect(p.start(handOff('t3', 32))).toBe(true);
    slot.layers = 4;
    await until(() => p.size === 0); // expired
    await until(() => p.stagingBlocksInUse === 0);
    slot.layers = 0;
    expect(p.start(handOff('t4', 32))).toBe(true);
    expect(p.stagingBlocksInUse).toBe(2);
    p.close();
    await until(() => p.stagingBlocksInUse === 0);
    expect(p.stagingBlocksInUse).toBe(0);
  });

  it('stagingBlocksFor: two full-context prompts, at most a quarter of the pool', () => {
    // 1000 blocks, 2048-token context, block 16: 2 x 128 = 256 > 250 (a quarter) → 250.
    expect(stagingBlocksFor(1000, 2048, 16)).toBe(250);
    // A large pool: two 32k-token prompts of 16-token blocks = 4096.
    expect(stagingBlocksFor(100_000, 32_768, 16)).toBe(4096);
    expect(stagingBlocksFor(3, 2048, 16)).toBe(0);
  });
});
