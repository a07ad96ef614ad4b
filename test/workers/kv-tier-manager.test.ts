/**
 * KvTierManager on real bytes, at the seams where the KV tiers went wrong (issue 34, 1.3 and
 * the KV events of section 2):
 *  - a device pool's copies take effect in call order: an onboard that writes into a G1 block
 *    evicted by the same step (the block was reallocated to the onboarding sequence) lands only
 *    after the eviction's read, so the host tier keeps the evicted block's own bytes. The device
 *    port here runs each call as the engine's native work items do, in no fixed order: its reads
 *    wait until the test lets them run, its writes run at once;
 *  - a disk block that fails its checks on read is deleted once (by the store), and announced
 *    Removed once;
 *  - tier events announce a LoRA block as G1 does: the same tokens hash (keyed by the adapter)
 *    and its lora_id, in G2 and in G3.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BlockManager } from '../../workers/block-manager/block-manager.js';
import { KvTierPolicy, type EvictedBlock, type OnboardCosts } from '../../workers/block-manager/kv-tier-policy.js';
import { DevicePoolCopier, HostPoolCopier, type DeviceBlockPort } from '../../workers/kv-tiers/block-copier.js';
import { DiskBlockStore } from '../../workers/kv-tiers/disk-block-store.js';
import { KvTierManager } from '../../workers/kv-tiers/kv-tier-manager.js';
import type { KvOnboardStart } from '../../workers/scheduler/types.js';
import type { KvEventData } from '../../proto/wire.js';
import { Sequence } from '../../workers/sequence.js';
import { range, seq, stopOpts } from './builders.js';

const BB = 16;
const COSTS: OnboardCosts = { hostMsPerBlock: 0, diskMsPerBlock: 0, prefillMs: (t) => t };
const tick = () => new Promise((r) => setImmediate(r));
const tokensOf = (h: number): Int32Array => Int32Array.from([h, h + 1, h + 2, h + 3]);
const evict = (hash: number, blockId: number, reuse = 0): EvictedBlock => ({ hash: BigInt(hash), blockId, tokens: tokensOf(hash), reuse });

/**
 * A device pool in host memory whose calls run like separate native work items: a write runs
 * as soon as it is issued, a read only when the test releases it.
 */
class UnorderedPort implements DeviceBlockPort {
  readonly mem: Uint8Array;
  private held: Array<() => void> = [];

  constructor(numBlocks: number) {
    this.mem = new Uint8Array(numBlocks * BB);
  }

  kvReadBlocks(ids: Int32Array, dst: Uint8Array): Promise<void> {
    return new Promise((resolve) => {
      this.held.push(() => {
        ids.forEach((id, i) => dst.set(this.mem.subarray(id * BB, (id + 1) * BB), i * BB));
        resolve();
      });
    });
  }

  async kvWriteBlocks(ids: Int32Array, src: Uint8Array): Promise<void> {
    ids.forEach((id, i) => this.mem.set(src.subarray(i * BB, (i + 1) * BB), id * BB));
  }

  releaseReads(): void {
    const run = this.held;
    this.held = [];
    for (const r of run) r();
  }

  fill(blockId: number, value: number): void {
    this.mem.fill(value, blockId * BB, (blockId + 1) * BB);
  }

  block(blockId: number): number[] {
    return [...new Set(this.mem.subarray(blockId * BB, (blockId + 1) * BB))];
  }
}

function onboard(seqId: number, policy: KvTierPolicy, hashes: bigint[], localBlockIds: number[]): KvOnboardStart {
  const sources = policy.match(hashes, 0, () => true);
  expect(sources).toHaveLength(hashes.length);
  policy.commitOnboard(sources);
  return { seqId, localBlockIds: Int32Array.from(localBlockIds), firstBlock: 0, sources };
}

describe('KvTierManager', () => {
  it('device pool: an onboard into the block the same step evicted waits for its read; the host tier keeps the evicted bytes', async () => {
    const policy = new KvTierPolicy({ hostBlocks: 4, diskBlocks: 0 });
    const port = new UnorderedPort(8);
    const m = new KvTierManager({ policy, costs: COSTS, copier: new DevicePoolCopier(port, BB) });
    const settled: Array<[number, boolean]> = [];
    const settle = (id: number, ok: boolean) => void settled.push([id, ok]);

    // Step 1: block 7 (sequence B's block, hash 20) is evicted to the host tier.
    port.fill(7, 0xbb);
    const first = m.afterSchedule([evict(20, 7)], [], settle);
    await tick();
    port.releaseReads();
    await first;

    // Step 2: block 3 holds A's block (hash 10); the same step evicts it and gives it to a
    // sequence that onboards B's block from the host tier.
    port.fill(3, 0xaa);
    const second = m.afterSchedule([evict(10, 3)], [onboard(1, policy, [20n], [3])], settle);
    for (let i = 0; i < 5; i++) await tick(); // every chance for the onboard's write to go first
    port.releaseReads();
    await second;
    await m.idle();
    expect(settled).toEqual([[1, true]]);
    expect(port.block(3)).toEqual([0xbb]);

    // Step 3: onboarding hash 10 must bring back A's bytes, not B's.
    const third = m.afterSchedule([], [onboard(2, policy, [10n], [5])], settle);
    await third;
    await m.idle();
    expect(settled).toEqual([
      [1, true],
      [2, true],
    ]);
    expect(port.block(5)).toEqual([0xaa]);
  });

  describe('disk tier', () => {
    let root: string;
    beforeAll(async () => {
      root = await mkdtemp(join(tmpdir(), 'tandem-kv-manager-'));
    });
    afterAll(async () => {
      await rm(root, { recursive: true, force: true });
    });

    it('a block that fails its checks on read is deleted once and announced Removed once; the sequence recomputes', async () => {
      const deletes: bigint[] = [];
      const store = new (class extends DiskBlockStore {
        override delete(hash: bigint): Promise<void> {
          deletes.push(hash);
          return super.delete(hash);
        }
      })({ dir: join(root, 'bad-read'), model: 'm', layout: 'l', dtype: 'f32', blockBytes: BB });
      const policy = new KvTierPolicy({ hostBlocks: 1, diskBlocks: 4, diskMinReuse: 0 });
      const pool = new Uint8Array(8 * BB);
      const m = new KvTierManager({ policy, costs: COSTS, copier: new HostPoolCopier(pool.buffer, BB), disk: store });
      await m.open();
      const settled: Array<[number, boolean]> = [];
      const settle = (id: number, ok: boolean) => void settled.push([id, ok]);
      pool.fill(0x11, 1 * BB, 2 * BB);
      await m.afterSchedule([evict(1, 1)], [], settle);
      await m.afterSchedule([evict(2, 2)], [], settle); // pushes 1 out of the host tier onto disk
      await m.idle();
      expect(policy.disk.peek(1n)?.pending).toBe(false);
      const bytes = await readFile(store.fileOf(1n));
      bytes[bytes.length - 40]! ^= 0xff; // one flipped payload byte
      await writeFile(store.fileOf(1n), bytes);
      policy.drainEvents();

      await m.afterSchedule([], [onboard(9, policy, [1n], [4])], settle);
      await m.idle();
      expect(settled).toEqual([[9, false]]);
      expect(deletes).toEqual([1n]);
      expect(policy.disk.has(1n)).toBe(false);
      expect(policy.drainEvents()).toEqual([{ type: 'removed', blockHashes: ['1'], medium: 'disk' }]);
      await expect(readFile(store.fileOf(1n))).rejects.toMatchObject({ code: 'ENOENT' });
    });
  });
});

describe('tier events of a LoRA block', () => {
  it('Stored in G2 and G3 carries the lora_id and the tokens hash G1 announced', () => {
    const BS = 4;
    const bm = new BlockManager({ numBlocks: 2, blockSize: BS, trackEvictions: true });
    const s = new Sequence({ seqId: 1, requestId: 'lora', promptTokenIds: range(1, 2 * BS), sampling: {}, stop: stopOpts(4), requestSeed: 1, loraId: 77 });
    expect(bm.allocate(s, bm.findPrefixHit(s), s.numTokens)).toBe(true);
    s.numComputedTokens = s.numTokens;
    bm.commitComputed(s);
    const g1 = bm.drainEvents().find((e): e is Extract<KvEventData, { type: 'stored' }> => e.type === 'stored')!;
    expect(g1.loraId).toBe(77);
    bm.free(s);
    // Another sequence takes both blocks: both are evicted, the adapter's blocks first in line.
    const other = seq(range(500, 2 * BS - 1));
    expect(bm.allocate(other, bm.findPrefixHit(other), other.numTokens)).toBe(true);
    const evicted = bm.drainEvicted();
    expect(evicted.map((e) => e.loraId)).toEqual([77, 77]);

    const policy = new KvTierPolicy({ hostBlocks: 1, diskBlocks: 4, diskMinReuse: 0 });
    policy.offload(evicted);
    const tier = policy.drainEvents().filter((e): e is Extract<KvEventData, { type: 'stored' }> => e.type === 'stored');
    // G2 took both in turn; the first was pushed down to G3.
    expect(tier.map((e) => e.medium)).toEqual(['cpu', 'disk', 'cpu']);
    for (const e of tier) {
      expect(e.loraId).toBe(77);
      const inG1 = g1.blocks.find((b) => b.blockHash === e.blocks[0]!.blockHash)!;
      expect(e.blocks[0]!.tokensHash).toBe(inG1.tokensHash);
    }
  });
});
