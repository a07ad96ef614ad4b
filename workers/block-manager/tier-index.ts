/**
 * One lower KV tier's index (G2 host or G3 disk): which blocks it holds, keyed by their chained
 * seq hash, in LRU order, bounded in blocks. Pure bookkeeping: the bytes live in an adapter
 * (a host slab, a directory) at the slot this index hands out.
 *
 * Slots are reused: there is one slot more than the capacity, so a newcomer takes a free slot
 * before the LRU pushes the oldest block out; the next insert may take that block's slot, so a
 * caller that needs evicted bytes reads them before it writes the later newcomers (the tier
 * policy orders its copy plan that way).
 */
import { LruMap } from '../../runtime/lru.js';

export interface TierBlock {
  readonly hash: bigint;
  /** The block's token ids: a hit is checked against them, so a hash collision is never served. */
  readonly tokens: Int32Array;
  /** Prefix hits the block served (in any tier); gates promotion to disk. */
  reuse: number;
  /** Where the adapter keeps the bytes. */
  readonly slot: number;
  /** Disk only: the write is still in flight, so the block is not served yet. */
  pending: boolean;
  /** Disk only: the write that will confirm it. */
  writeId?: number;
  /** Multi-LoRA: the adapter it was computed under (announced with it); absent = the base model. */
  readonly loraId?: number;
}

export interface TierInsert {
  block: TierBlock;
  /** Blocks pushed out by capacity, least recently used first. */
  evicted: TierBlock[];
}

export class TierIndex {
  readonly capacity: number;
  /** Slots the adapter provides: capacity + 1 (0 without capacity). */
  readonly slotCount: number;
  private readonly lru: LruMap<bigint, TierBlock>;
  private readonly freeSlots: number[] = [];
  private evictedNow: TierBlock[] = [];

  constructor(capacityBlocks: number) {
    if (!Number.isInteger(capacityBlocks) || capacityBlocks < 0) throw new RangeError('tier capacity must be a non-negative integer');
    this.capacity = capacityBlocks;
    this.slotCount = capacityBlocks > 0 ? capacityBlocks + 1 : 0;
    for (let s = this.slotCount - 1; s >= 0; s--) this.freeSlots.push(s);
    this.lru = new LruMap<bigint, TierBlock>({
      maxEntries: Math.max(1, capacityBlocks),
      onEvict: (_key, block) => {
        this.freeSlots.push(block.slot);
        this.evictedNow.push(block);
      },
    });
  }

  get size(): number {
    return this.lru.size;
  }

  has(hash: bigint): boolean {
    return this.lru.has(hash);
  }

  /** The block, recency unchanged. */
  peek(hash: bigint): TierBlock | undefined {
    return this.lru.peek(hash);
  }

  /** The block, made the most recently used. */
  touch(hash: bigint): TierBlock | undefined {
    return this.lru.get(hash);
  }

  /**
   * Adds a block as the most recently used (it must not be present). A zero-capacity index
   * keeps nothing and returns undefined.
   */
  insert(hash: bigint, tokens: Int32Array, reuse: number, pending = false, loraId?: number): TierInsert | undefined {
    if (this.capacity === 0) return undefined;
    if (this.lru.has(hash)) throw new Error(`block ${hash} is already in this tier`);
    const block: TierBlock = { hash, tokens, reuse, slot: this.freeSlots.pop()!, pending, ...(loraId !== undefined ? { loraId } : {}) };
    this.evictedNow = [];
    this.lru.set(hash, block);
    const evicted = this.evictedNow;
    this.evictedNow = [];
    return { block, evicted };
  }

  /** Drops a block (its slot becomes free). */
  delete(hash: bigint): TierBlock | undefined {
    const block = this.lru.peek(hash);
    if (block === undefined) return undefined;
    this.lru.delete(hash);
    this.freeSlots.push(block.slot);
    return block;
  }

  clear(): void {
    for (const hash of [...this.lru.keys()]) this.delete(hash);
  }

  /** Blocks from least to most recently used; for tests and dumps. */
  blocks(): TierBlock[] {
    return [...this.lru.keys()].map((h) => this.lru.peek(h)!);
  }
}
