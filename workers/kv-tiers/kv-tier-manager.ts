/**
 * KvTierManager: the adapter that carries out KvTierPolicy's decisions on real bytes. G2 is a
 * host slab of `hostBlocks × blockBytes`; G3 a DiskBlockStore; G1 is reached through a
 * BlockCopier. The engine loop calls `afterSchedule` once per step, between schedule() and the
 * engine step, with the blocks the plan evicted from G1 and the onboards it admitted:
 *
 *   1. read the evicted G1 blocks (batched) before the step overwrites them;
 *   2. start the onboards: host sources are copied out of the slab now, disk sources are read
 *      asynchronously; once all bytes are there they are written into G1 and the sequence's
 *      transfer completes (a failed read → the sequence recomputes, the bad file is dropped);
 *   3. apply the offload plan: staged bytes into host slots, host blocks pushed out to disk
 *      (snapshotted now, written on the disk queue, confirmed to the policy when done).
 *
 * Disk I/O never blocks a step; only step 1 (and the host part of step 2) run before it.
 */
import type { KvTierPolicy, OnboardCosts, EvictedBlock, TierOp } from '../block-manager/kv-tier-policy.js';
import type { KvOnboardStart } from '../scheduler/types.js';
import type { BlockCopier } from './block-copier.js';
import type { BlockStore } from './disk-block-store.js';

export interface KvTierManagerConfig {
  policy: KvTierPolicy;
  costs: OnboardCosts;
  copier: BlockCopier;
  disk?: BlockStore;
}

export interface KvTierStats {
  hostBlocks: number;
  hostCapacityBlocks: number;
  diskBlocks: number;
  diskCapacityBlocks: number;
  offloadBlocks: number;
  offloadBytes: number;
  diskWriteBlocks: number;
  diskWriteBytes: number;
  onboardHostBlocks: number;
  onboardDiskBlocks: number;
  onboardBytes: number;
  onboardFailures: number;
  diskErrors: number;
}

export class KvTierManager {
  readonly policy: KvTierPolicy;
  readonly costs: OnboardCosts;
  private readonly copier: BlockCopier;
  private readonly disk: BlockStore | undefined;
  private readonly virtual: boolean;
  private readonly slab: Uint8Array;
  private readonly blockBytes: number;
  private counts = { offloadBytes: 0, onboardBytes: 0, onboardFailures: 0, diskWriteBytes: 0 };
  private inFlight = new Set<Promise<unknown>>();

  constructor(config: KvTierManagerConfig) {
    this.policy = config.policy;
    this.costs = config.costs;
    this.copier = config.copier;
    this.disk = config.policy.disk.capacity > 0 ? config.disk : undefined;
    if (config.policy.disk.capacity > 0 && config.disk === undefined) throw new RangeError('a disk tier needs a DiskBlockStore');
    this.blockBytes = config.copier.blockBytes;
    this.virtual = config.copier.virtual === true;
    this.slab = new Uint8Array(this.virtual ? 0 : config.policy.host.slotCount * this.blockBytes);
  }

  /** Registers the blocks the disk directory already holds (a restart keeps G3). */
  async open(): Promise<number> {
    if (this.disk === undefined) return 0;
    const found = await this.disk.open();
    for (const b of found) this.run(this.policy.adoptDiskBlock(b.hash, b.tokens, b.reuse, b.loraId));
    return this.policy.disk.size;
  }

  /** See the file comment. `settle(seqId, ok)` ends an onboard (Scheduler.completeTransfer). */
  async afterSchedule(evicted: readonly EvictedBlock[], onboards: readonly KvOnboardStart[], settle: (seqId: number, ok: boolean) => void): Promise<void> {
    if (evicted.length === 0 && onboards.length === 0) return;
    let staged: Promise<Uint8Array[]> | undefined;
    try {
      staged = evicted.length > 0 ? this.copier.readBlocks(evicted.map((e) => e.blockId)) : undefined;
    } catch (err) {
      staged = Promise.reject(err);
    }
    for (const ob of onboards) void this.onboard(ob, settle);
    // Decided (and its events queued) before anything awaits, so the tier events reach the log
    // ahead of the device Removed events of the same blocks; the bytes move once staged.
    const ops = this.policy.offload(evicted);
    let bytes: Uint8Array[] = [];
    try {
      bytes = staged !== undefined ? await staged : [];
    } catch {
      bytes = [];
    }
    if (bytes.length !== evicted.length) {
      // Without the bytes the blocks are not kept: never index what was not copied.
      this.policy.discardHost(ops.flatMap((o) => (o.op === 'device-to-host' ? [o.hash] : [])));
      this.run(ops.filter((o) => o.op !== 'device-to-host'));
      return;
    }
    const byHash = new Map<bigint, Uint8Array>();
    evicted.forEach((e, i) => byHash.set(e.hash, bytes[i]!));
    this.run(ops, byHash);
  }

  /** Resolves when every disk write and onboard started so far has finished; for tests and shutdown. */
  async idle(): Promise<void> {
    while (this.inFlight.size > 0) await Promise.allSettled([...this.inFlight]);
    await this.disk?.flush();
  }

  stats(): KvTierStats {
    const c = this.policy.counters;
    return {
      hostBlocks: this.policy.host.size,
      hostCapacityBlocks: this.policy.host.capacity,
      diskBlocks: this.policy.disk.size,
      diskCapacityBlocks: this.policy.disk.capacity,
      offloadBlocks: c.offloadedBlocks,
      offloadBytes: this.counts.offloadBytes,
      diskWriteBlocks: c.diskWrittenBlocks,
      diskWriteBytes: this.counts.diskWriteBytes,
      onboardHostBlocks: c.onboardedHostBlocks,
      onboardDiskBlocks: c.onboardedDiskBlocks,
      onboardBytes: this.counts.onboardBytes,
      onboardFailures: this.counts.onboardFailures,
      diskErrors: this.disk?.numErrors ?? 0,
    };
  }

  // ---- internals ----

  /** Copies host sources out now (before the offload plan may reuse their slots); disk sources later. */
  private onboard(ob: KvOnboardStart, settle: (seqId: number, ok: boolean) => void): Promise<void> {
    const bb = this.blockBytes;
    const parts: Array<Uint8Array | Promise<Uint8Array | undefined>> = ob.sources.map((s) => {
      if (s.tier === 'host') return this.virtual ? new Uint8Array(0) : this.slab.slice(s.slot * bb, (s.slot + 1) * bb);
      const tokens = this.policy.disk.peek(s.hash)?.tokens;
      if (this.disk === undefined || tokens === undefined) return Promise.resolve(undefined);
      return this.disk.read(s.hash, tokens).then((b) => {
        // The store deleted the file it refused; the policy only forgets the block.
        if (b === undefined) this.policy.diskReadFailed(s.hash);
        return b;
      });
    });
    const task = (async () => {
      const data = await Promise.all(parts);
      if (data.some((d) => d === undefined)) {
        this.counts.onboardFailures++;
        settle(ob.seqId, false);
        return;
      }
      try {
        await this.copier.writeBlocks(ob.localBlockIds, data as Uint8Array[]);
      } catch {
        this.counts.onboardFailures++;
        settle(ob.seqId, false);
        return;
      }
      this.counts.onboardBytes += data.length * bb;
      settle(ob.seqId, true);
    })();
    this.track(task);
    return task;
  }

  private run(ops: readonly TierOp[], staged?: Map<bigint, Uint8Array>): void {
    const bb = this.blockBytes;
    for (const op of ops) {
      if (op.op === 'device-to-host') {
        const src = staged?.get(op.hash);
        if (src !== undefined && !this.virtual) this.slab.set(src, op.hostSlot * bb);
        this.counts.offloadBytes += bb;
      } else if (op.op === 'host-to-disk') {
        const disk = this.disk;
        if (disk === undefined) {
          this.run(this.policy.diskWriteDone(op.hash, op.writeId, false));
          continue;
        }
        const reuse = this.policy.disk.peek(op.hash)?.reuse ?? 0;
        const snapshot = this.virtual ? new Uint8Array(0) : this.slab.slice(op.hostSlot * bb, (op.hostSlot + 1) * bb);
        this.track(
          disk.write(op.hash, op.tokens, reuse, snapshot, op.loraId).then((ok) => {
            if (ok) this.counts.diskWriteBytes += bb;
            this.run(this.policy.diskWriteDone(op.hash, op.writeId, ok));
          }),
        );
      } else {
        void this.disk?.delete(op.hash);
      }
    }
  }

  private track(p: Promise<unknown>): void {
    this.inFlight.add(p);
    void p.finally(() => this.inFlight.delete(p));
  }
}
