/**
 * The KV tier hierarchy below the engine pool (pure: no I/O, no timers). G1 is the engine pool
 * (the BlockManager); G2 a host-memory tier; G3 a disk tier. This class decides; an adapter
 * (workers/kv-tiers/) moves the bytes in the order the decisions list them.
 *
 * - Offload: a full cached block evicted from G1 is offered to G2 (copied unless G2 already
 *   holds it). A block pushed out of G2 goes to G3 only once it has served at least
 *   `diskMinReuse` prefix hits (default 2), which spares the disk one-off prefixes; otherwise it
 *   is dropped. G3 evicts by LRU too.
 * - A disk block is written asynchronously: it is not served until the adapter confirms the
 *   write (`diskWriteDone`); a failed write drops it.
 * - Lookup: a prefix that misses G1 continues block by block into G2, then G3; each hit is
 *   checked against the block's token ids. Onboarding happens only for as many blocks as copying
 *   costs less than recomputing (`onboardCount`, from the perf model).
 * - Tiers are inclusive: an onboarded block stays where it was, so evicting it again from G1
 *   copies nothing.
 */
import type { KvEventData } from '../../proto/wire.js';
import { removedEvent, tierStoredEvent } from './kv-events.js';
import { TierIndex, type TierBlock } from './tier-index.js';

export type KvTierName = 'host' | 'disk';

export interface KvTierPolicyConfig {
  /** G2 capacity in blocks (0 = no host tier). */
  hostBlocks: number;
  /** G3 capacity in blocks (0 = no disk tier). */
  diskBlocks: number;
  /** Prefix hits a block needs before it may be written to disk; default 2. */
  diskMinReuse?: number;
}

/** A full, cached block the block manager evicted from G1; its bytes are still in place. */
export interface EvictedBlock {
  hash: bigint;
  blockId: number;
  tokens: Int32Array;
  /** Prefix hits it served while in G1. */
  reuse: number;
  /** Multi-LoRA: the adapter it was computed under; absent = the base model. */
  loraId?: number;
}

/** Byte moves, to be carried out in order (a slot may be read, then overwritten). */
export type TierOp =
  /** Copy G1 block `blockId` into host slot `hostSlot`. */
  | { op: 'device-to-host'; hash: bigint; blockId: number; hostSlot: number }
  /** Read host slot `hostSlot` now, then write it to disk as `hash`; confirm with diskWriteDone(hash, writeId, ok). */
  | { op: 'host-to-disk'; hash: bigint; hostSlot: number; writeId: number; tokens: Int32Array; loraId?: number }
  /** The disk tier no longer holds `hash`: delete its file. */
  | { op: 'drop-disk'; hash: bigint };

export interface OnboardSource {
  hash: bigint;
  tier: KvTierName;
  slot: number;
}

/** What a copy and a recompute cost, from the perf model and the tiers' bandwidths. */
export interface OnboardCosts {
  hostMsPerBlock: number;
  diskMsPerBlock: number;
  /** Milliseconds to prefill `tokens` tokens in one step. */
  prefillMs(tokens: number): number;
}

export interface KvTierCounters {
  offloadedBlocks: number;
  diskWrittenBlocks: number;
  diskWriteErrors: number;
  onboardedHostBlocks: number;
  onboardedDiskBlocks: number;
  droppedBlocks: number;
}

export class KvTierPolicy {
  readonly host: TierIndex;
  readonly disk: TierIndex;
  readonly diskMinReuse: number;
  readonly counters: KvTierCounters = {
    offloadedBlocks: 0,
    diskWrittenBlocks: 0,
    diskWriteErrors: 0,
    onboardedHostBlocks: 0,
    onboardedDiskBlocks: 0,
    droppedBlocks: 0,
  };
  private nextWriteId = 1;
  /** Tier moves as KV events (medium 'cpu' / 'disk'), queued in the order they happened. */
  private events: KvEventData[] = [];

  constructor(config: KvTierPolicyConfig) {
    this.host = new TierIndex(config.hostBlocks);
    this.disk = new TierIndex(config.diskBlocks);
    this.diskMinReuse = config.diskMinReuse ?? 2;
    if (!Number.isInteger(this.diskMinReuse) || this.diskMinReuse < 0) throw new RangeError('diskMinReuse must be a non-negative integer');
  }

  get enabled(): boolean {
    return this.host.capacity > 0;
  }

  /** Blocks evicted from G1 → the byte moves that keep them (or what G2 pushes out) below. */
  offload(evicted: readonly EvictedBlock[]): TierOp[] {
    const ops: TierOp[] = [];
    if (!this.enabled) return ops;
    for (const e of evicted) {
      const held = this.host.touch(e.hash);
      if (held !== undefined) {
        if (sameTokens(held.tokens, e.tokens)) held.reuse = Math.max(held.reuse, e.reuse);
        continue;
      }
      const onDisk = this.disk.peek(e.hash);
      const reuse = Math.max(e.reuse, onDisk !== undefined && sameTokens(onDisk.tokens, e.tokens) ? onDisk.reuse : 0);
      const ins = this.host.insert(e.hash, e.tokens, reuse, false, e.loraId)!;
      for (const out of ins.evicted) {
        this.demote(out, ops);
        this.events.push(removedEvent([out.hash], 'cpu'));
      }
      ops.push({ op: 'device-to-host', hash: e.hash, blockId: e.blockId, hostSlot: ins.block.slot });
      this.events.push(tierStoredEvent(e.hash, e.tokens, e.loraId, 'cpu'));
      this.counters.offloadedBlocks++;
    }
    return ops;
  }

  /** The adapter finished (or failed) the disk write `writeId` of `hash`. */
  diskWriteDone(hash: bigint, writeId: number, ok: boolean): TierOp[] {
    const block = this.disk.peek(hash);
    if (block === undefined || block.pending === false || block.writeId !== writeId) return [];
    if (ok) {
      block.pending = false;
      this.counters.diskWrittenBlocks++;
      return [];
    }
    this.counters.diskWriteErrors++;
    this.disk.delete(hash);
    this.events.push(removedEvent([hash], 'disk'));
    return [{ op: 'drop-disk', hash }];
  }

  /**
   * The adapter found the disk copy of `hash` unreadable (torn, corrupt, gone): forget it. No
   * byte move: the store already dropped the file it refused (BlockStore.read), so a second
   * delete would only race a later write of the same block.
   */
  diskReadFailed(hash: bigint): void {
    if (this.disk.delete(hash) === undefined) return;
    this.events.push(removedEvent([hash], 'disk'));
  }

  /** Registers a disk block found at start (the directory outlives the process). */
  adoptDiskBlock(hash: bigint, tokens: Int32Array, reuse: number, loraId?: number): TierOp[] {
    if (this.disk.capacity === 0 || this.disk.has(hash)) return [];
    const ins = this.disk.insert(hash, tokens, reuse, false, loraId)!;
    this.events.push(tierStoredEvent(hash, tokens, loraId, 'disk'));
    return ins.evicted.map((b) => {
      this.events.push(removedEvent([b.hash], 'disk'));
      return { op: 'drop-disk', hash: b.hash } as TierOp;
    });
  }

  /**
   * Forgets host blocks whose bytes never arrived (the G1 read failed): an index entry without
   * its bytes would serve garbage.
   */
  discardHost(hashes: readonly bigint[]): void {
    for (const h of hashes) {
      if (this.host.delete(h) !== undefined) this.events.push(removedEvent([h], 'cpu'));
    }
  }

  /** Takes the queued tier events, oldest first. */
  drainEvents(): KvEventData[] {
    if (this.events.length === 0) return [];
    const out = this.events;
    this.events = [];
    return out;
  }

  /**
   * Blocks `from`.. of a sequence (chained hashes `hashes`) that G2/G3 hold, stopping at the
   * first miss. `tokensMatch(b, tokens)` checks a candidate against the sequence's own tokens.
   * No side effects: commit the part you onboard with `commitOnboard`.
   */
  match(hashes: readonly bigint[], from: number, tokensMatch: (blockIndex: number, tokens: Int32Array) => boolean): OnboardSource[] {
    const out: OnboardSource[] = [];
    if (!this.enabled) return out;
    for (let b = from; b < hashes.length; b++) {
      const hash = hashes[b]!;
      const h = this.host.peek(hash);
      if (h !== undefined && tokensMatch(b, h.tokens)) {
        out.push({ hash, tier: 'host', slot: h.slot });
        continue;
      }
      const d = this.disk.peek(hash);
      if (d !== undefined && !d.pending && tokensMatch(b, d.tokens)) {
        out.push({ hash, tier: 'disk', slot: d.slot });
        continue;
      }
      break;
    }
    return out;
  }

  /** The sources are being copied into G1: they count as reused and become most recent. */
  commitOnboard(sources: readonly OnboardSource[]): void {
    for (const s of sources) {
      const block = s.tier === 'host' ? this.host.touch(s.hash) : this.disk.touch(s.hash);
      if (block !== undefined) block.reuse++;
      if (s.tier === 'host') this.counters.onboardedHostBlocks++;
      else this.counters.onboardedDiskBlocks++;
    }
  }

  /** Forgets both tiers (the prefix cache was reset); disk files go too. */
  clear(): TierOp[] {
    const ops: TierOp[] = this.disk.blocks().map((b) => ({ op: 'drop-disk', hash: b.hash }) as TierOp);
    const host = this.host.blocks().map((b) => b.hash);
    const disk = this.disk.blocks().map((b) => b.hash);
    if (host.length > 0) this.events.push(removedEvent(host, 'cpu'));
    if (disk.length > 0) this.events.push(removedEvent(disk, 'disk'));
    this.host.clear();
    this.disk.clear();
    return ops;
  }

  private demote(block: TierBlock, ops: TierOp[]): void {
    if (this.disk.capacity === 0 || block.reuse < this.diskMinReuse) {
      this.counters.droppedBlocks++;
      return;
    }
    const there = this.disk.touch(block.hash);
    if (there !== undefined) {
      there.reuse = Math.max(there.reuse, block.reuse);
      return;
    }
    const writeId = this.nextWriteId++;
    const ins = this.disk.insert(block.hash, block.tokens, block.reuse, true, block.loraId)!;
    ins.block.writeId = writeId;
    // Announced now, before the host copy goes: the router never sees the block vanish between
    // tiers. (The worker serves it once the write is confirmed; a failed write is a Removed.)
    this.events.push(tierStoredEvent(block.hash, block.tokens, block.loraId, 'disk'));
    for (const out of ins.evicted) {
      ops.push({ op: 'drop-disk', hash: out.hash });
      this.events.push(removedEvent([out.hash], 'disk'));
    }
    ops.push({ op: 'host-to-disk', hash: block.hash, hostSlot: block.slot, writeId, tokens: block.tokens, ...(block.loraId !== undefined ? { loraId: block.loraId } : {}) });
  }
}

/**
 * How many leading `sources` to onboard: the longest run whose copy time is below the time to
 * recompute its tokens on top of the `restTokens` the prefill computes anyway.
 */
export function onboardCount(sources: readonly OnboardSource[], costs: OnboardCosts, blockSize: number, restTokens: number): number {
  const base = costs.prefillMs(Math.max(1, restTokens));
  let copyMs = 0;
  let best = 0;
  for (let k = 1; k <= sources.length; k++) {
    copyMs += sources[k - 1]!.tier === 'host' ? costs.hostMsPerBlock : costs.diskMsPerBlock;
    const recomputeMs = costs.prefillMs(Math.max(1, restTokens) + k * blockSize) - base;
    if (copyMs < recomputeMs) best = k;
  }
  return best;
}

function sameTokens(a: Int32Array, b: Int32Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
