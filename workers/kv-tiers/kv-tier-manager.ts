/**
 * KvTierManager: the adapter that carries out KvTierPolicy's decisions on real bytes. G2 is a
 * host slab of `hostBlocks × blockBytes`; G3 a DiskBlockStore; G1 is reached through a
 * BlockCopier. The engine loop calls `afterSchedule` once per step, between schedule() and the
 * engine step, with the blocks the plan evicted from G1 and the onboards it admitted:
 *
 *   1. read the evicted G1 blocks (batched) before the step overwrites them;
 *   2. start the onboards: host sources are copied out of the slab now, disk sources are read
 *      asynchronously; once all bytes are there they are written into G1 and the sequence's
 *      transfer completes (a failed read → the sequence recomputes, the bad file is dropped).
 *      Inline onboards (host sources of a sequence that runs in this very step) are written at
 *      once; the step starts when they landed, or at once on a copier whose writes overlap the
 *      step (`BlockCopier.overlapsStep`), and the loop waits for both;
 *   3. apply the offload plan: staged bytes into host slots, host blocks pushed out to disk
 *      (snapshotted now, written on the disk queue, confirmed to the policy when done).
 *
 * Disk I/O never blocks a step; only step 1 (and the host part of step 2) run before it.
 */
import type { KvTierPolicy, OnboardCosts, OnboardSource, EvictedBlock, TierOp } from '../block-manager/kv-tier-policy.js';
import type { KvOnboardStart } from '../scheduler/types.js';
import type { BlockCopier } from './block-copier.js';
import type { BlockStore } from './disk-block-store.js';
import { recomputeMsPerBlockOf } from './tier-costs.js';

export interface KvTierManagerConfig {
  policy: KvTierPolicy;
  costs: OnboardCosts;
  copier: BlockCopier;
  disk?: BlockStore;
}

/** The inline onboards of one plan (see `afterSchedule`). */
export interface InlineOnboards {
  /** Resolves when the engine step may start: every inline copy has landed or is ordered before the step's reads. */
  ready: Promise<void>;
  /** Resolves once every inline copy has settled, to the sequences whose copy failed (Scheduler.failInlineOnboards). */
  failed: Promise<number[]>;
}

const NO_INLINE: InlineOnboards = { ready: Promise.resolve(), failed: Promise.resolve([]) };

/** Weight of the newest onboard in the per-tier average of ms per block. */
const ONBOARD_EWMA_ALPHA = 0.2;

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
  /** Measured ms per onboarded block, per source tier (EWMA); starts at the bandwidths' figure. */
  private readonly onboardMs: { host: number; disk: number };
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
    this.onboardMs = { host: config.costs.hostMsPerBlock, disk: config.costs.diskMsPerBlock };
  }

  /** Ms to recompute one block of `blockSize` tokens on top of a 1024-token prefill (the perf model's marginal cost). */
  recomputeMsPerBlock(blockSize: number): number {
    return recomputeMsPerBlockOf(this.costs, blockSize);
  }

  /**
   * Ms to onboard one block from each tier as this worker measures it (exponentially weighted
   * over its onboards; the bandwidths' figure before the first). A simulated copier (the
   * mocker) is charged the modelled time, so this is the modelled time there.
   */
  get onboardMsPerBlock(): { host: number; disk: number } {
    return { host: this.onboardMs.host, disk: this.onboardMs.disk };
  }

  /** Registers the blocks the disk directory already holds (a restart keeps G3). */
  async open(): Promise<number> {
    if (this.disk === undefined) return 0;
    const found = await this.disk.open();
    for (const b of found) this.run(this.policy.adoptDiskBlock(b.hash, b.tokens, b.reuse, b.loraId));
    return this.policy.disk.size;
  }

  /**
   * See the file comment. `settle(seqId, ok)` ends an onboard (Scheduler.completeTransfer).
   * Inline onboards (host sources, the sequence in this step's batch) are issued here, after the
   * evicted blocks' read and in the same call, so no write reaches a reused G1 block first; the
   * answer says when the step may run and which copies failed.
   */
  async afterSchedule(evicted: readonly EvictedBlock[], onboards: readonly KvOnboardStart[], settle: (seqId: number, ok: boolean) => void): Promise<InlineOnboards> {
    if (evicted.length === 0 && onboards.length === 0) return NO_INLINE;
    let staged: Promise<Uint8Array[]> | undefined;
    try {
      staged = evicted.length > 0 ? this.copier.readBlocks(evicted.map((e) => e.blockId)) : undefined;
    } catch (err) {
      staged = Promise.reject(err);
    }
    const inline: Array<Promise<number | undefined>> = [];
    for (const ob of onboards) {
      if (ob.inline) inline.push(this.onboardInline(ob));
      else void this.onboard(ob, settle);
    }
    const landed = inline.length === 0 ? NO_INLINE : this.inlineAnswer(inline);
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
      return landed;
    }
    const byHash = new Map<bigint, Uint8Array>();
    evicted.forEach((e, i) => byHash.set(e.hash, bytes[i]!));
    this.run(ops, byHash);
    return landed;
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

  /**
   * An inline onboard: the host slots are read now (before the offload plan may reuse them) and
   * the write is issued at once. Resolves to the sequence id when the copy failed.
   */
  private onboardInline(ob: KvOnboardStart): Promise<number | undefined> {
    const bb = this.blockBytes;
    const started = performance.now();
    let write: Promise<void>;
    try {
      const data = ob.sources.map((s) => (this.virtual ? new Uint8Array(0) : this.slab.slice(s.slot * bb, (s.slot + 1) * bb)));
      write = this.copier.writeBlocks(ob.localBlockIds, data);
    } catch (err) {
      write = Promise.reject(err);
    }
    const task = write.then(
      () => {
        this.counts.onboardBytes += ob.sources.length * bb;
        this.measured(ob.sources, performance.now() - started);
        return undefined;
      },
      () => {
        this.counts.onboardFailures++;
        return ob.seqId;
      },
    );
    this.track(task);
    return task;
  }

  /**
   * When the step may run: at once if the copier lands a write issued before a step ahead of
   * the step's reads (it overlaps the step), else once the writes are done.
   */
  private inlineAnswer(writes: Array<Promise<number | undefined>>): InlineOnboards {
    const failed = Promise.all(writes).then((ids) => ids.filter((id): id is number => id !== undefined));
    return { ready: this.copier.overlapsStep === true ? Promise.resolve() : failed.then(() => undefined), failed };
  }

  /** Copies host sources out now (before the offload plan may reuse their slots); disk sources later. */
  private onboard(ob: KvOnboardStart, settle: (seqId: number, ok: boolean) => void): Promise<void> {
    const bb = this.blockBytes;
    const started = performance.now();
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
      this.measured(ob.sources, performance.now() - started);
      settle(ob.seqId, true);
    })();
    this.track(task);
    return task;
  }

  /**
   * One finished onboard of `sources` that took `wallMs`: the per-block time of its slowest
   * tier (a disk read dominates a mixed one) feeds that tier's average. A simulated copier
   * reports the modelled time instead of the wall time (which the speedup ratio and timer
   * granularity distort).
   */
  private measured(sources: readonly OnboardSource[], wallMs: number): void {
    if (sources.length === 0) return;
    const tier = sources.some((s) => s.tier === 'disk') ? 'disk' : 'host';
    const perBlock = this.virtual ? (tier === 'disk' ? this.costs.diskMsPerBlock : this.costs.hostMsPerBlock) : wallMs / sources.length;
    this.onboardMs[tier] += ONBOARD_EWMA_ALPHA * (perBlock - this.onboardMs[tier]);
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
