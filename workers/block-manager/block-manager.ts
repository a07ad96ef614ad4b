/**
 * Paged KV block manager with prefix caching (pure: no I/O, no timers).
 *
 * - A pool of numBlocks blocks of blockSize tokens; each block has a refcount.
 * - A full, computed block is registered under its chained seq hash (router/hashing.ts), and a
 *   later sequence whose prompt starts with the same blocks reuses them (refcount + 1).
 * - A block whose refcount drops to 0 keeps its hash and goes to the LRU tail of the free
 *   list; it is evicted (hash dropped, Removed event) only when allocation reaches it.
 * - Running out of blocks is a normal outcome: check with canAllocate/canAppend, then commit;
 *   the commit calls return false instead of throwing.
 * - KV events are queued as data; the caller drains them (drainEvents) and numbers them.
 */
import type { KvEventData, KvStoredBlock } from '../../proto/wire.js';
import { chainHash, localBlockHashes } from '../../router/index.js';
import type { Sequence } from '../sequence.js';
import { FreeBlockQueue } from './free-block-queue.js';
import type { EvictedBlock } from './kv-tier-policy.js';
import { storedEvent } from './kv-events.js';

export interface BlockManagerConfig {
  numBlocks: number;
  /** Tokens per block; default 16. */
  blockSize?: number;
  /** Default true. When false, nothing is hashed, hit or reported. */
  enablePrefixCaching?: boolean;
  /** Keep evicted cached blocks (hash, tokens, reuse) for drainEvicted(): the KV tiers' offload feed. */
  trackEvictions?: boolean;
}

/** A prefix-cache lookup: the leading blocks of a sequence that are already in the cache. */
export interface PrefixHit {
  readonly blockIds: readonly number[];
  readonly numTokens: number;
}

export const NO_HIT: PrefixHit = Object.freeze({ blockIds: Object.freeze([]) as readonly number[], numTokens: 0 });

export class BlockManager {
  readonly numBlocks: number;
  readonly blockSize: number;
  readonly enablePrefixCaching: boolean;
  /** Tokens looked up in the prefix cache at admission / tokens found there (vLLM counters). */
  prefixCacheQueries = 0;
  prefixCacheHits = 0;

  private readonly refCount: Int32Array;
  private readonly freeQueue: FreeBlockQueue;
  /** Per block: the seq hash it is registered under (undefined = holds nothing reusable). */
  private readonly blockHash: Array<bigint | undefined>;
  /** Token ids of each registered block, to tell a hash collision from a real hit. */
  private readonly blockTokens: Int32Array;
  private readonly cached = new Map<bigint, number>();
  private readonly events: KvEventData[] = [];
  private pendingRemoved: string[] = [];
  private numActive = 0;
  /** Prefix hits each registered block served since it was registered (gates disk promotion). */
  private readonly hitCount: Int32Array;
  /** Multi-LoRA: the adapter each registered block was computed under (undefined = base model); the tiers announce it too. */
  private readonly blockLora: Array<number | undefined>;
  private readonly trackEvictions: boolean;
  private evicted: EvictedBlock[] = [];

  constructor(config: BlockManagerConfig) {
    this.numBlocks = config.numBlocks;
    this.blockSize = config.blockSize ?? 16;
    this.enablePrefixCaching = config.enablePrefixCaching ?? true;
    if (!Number.isInteger(this.numBlocks) || this.numBlocks <= 0) throw new RangeError('numBlocks must be a positive integer');
    if (!Number.isInteger(this.blockSize) || this.blockSize <= 0) throw new RangeError('blockSize must be a positive integer');
    this.refCount = new Int32Array(this.numBlocks);
    this.freeQueue = new FreeBlockQueue(this.numBlocks);
    this.blockHash = new Array(this.numBlocks).fill(undefined);
    this.blockTokens = new Int32Array(this.enablePrefixCaching ? this.numBlocks * this.blockSize : 0);
    this.hitCount = new Int32Array(this.numBlocks);
    this.blockLora = new Array(this.numBlocks).fill(undefined);
    this.trackEvictions = (config.trackEvictions ?? false) && this.enablePrefixCaching;
  }

  /** Blocks with refcount 0 (empty or cached-and-evictable). */
  get numFreeBlocks(): number {
    return this.freeQueue.size;
  }
  /** Blocks held by at least one sequence. */
  get numActiveBlocks(): number {
    return this.numActive;
  }
  get usage(): number {
    return this.numActive / this.numBlocks;
  }
  get numCachedBlocks(): number {
    return this.cached.size;
  }

  /** Blocks needed to hold `numTokens` tokens. */
  blocksFor(numTokens: number): number {
    return Math.ceil(numTokens / this.blockSize);
  }

  /**
   * Leading cached blocks of `seq` (no side effects on the pool). At least one token is left
   * uncached so the step that finishes the prefill has something to compute and sample from.
   */
  findPrefixHit(seq: Sequence): PrefixHit {
    if (!this.enablePrefixCaching) return NO_HIT;
    const maxBlocks = Math.floor((seq.numTokens - 1) / this.blockSize);
    if (maxBlocks <= 0 || this.cached.size === 0) return NO_HIT;
    this.ensureHashes(seq, maxBlocks);
    const blockIds: number[] = [];
    for (let b = 0; b < maxBlocks; b++) {
      const id = this.cached.get(seq.seqHashes[b]!);
      if (id === undefined || !this.sameTokens(id, seq, b)) break;
      blockIds.push(id);
    }
    return blockIds.length === 0 ? NO_HIT : { blockIds, numTokens: blockIds.length * this.blockSize };
  }

  /**
   * Chained hash of `seq`'s full block `blockIndex` (hashed lazily, kept on the sequence). The
   * scheduler uses it to see that a waiting sequence's next block is one a running sequence is
   * computing right now.
   */
  seqHashAt(seq: Sequence, blockIndex: number): bigint {
    if (!(blockIndex >= 0 && (blockIndex + 1) * this.blockSize <= seq.numTokens)) {
      throw new RangeError(`block ${blockIndex} of sequence ${seq.seqId} is not full`);
    }
    this.ensureHashes(seq, blockIndex + 1);
    return seq.seqHashes[blockIndex]!;
  }

  /** Whether a waiting sequence can take `hit` plus blocks for `numNewTokens` more tokens. */
  canAllocate(seq: Sequence, hit: PrefixHit, numNewTokens: number): boolean {
    return seq.numBlocks === 0 && this.newBlocksForAdmission(hit, numNewTokens) <= this.availableAfterHit(hit);
  }

  /**
   * Admits a waiting sequence: takes the hit blocks and allocates the rest. Returns false (and
   * changes nothing) when the pool cannot hold it.
   */
  allocate(seq: Sequence, hit: PrefixHit, numNewTokens: number): boolean {
    if (seq.numBlocks !== 0) throw new Error(`sequence ${seq.seqId} already holds blocks`);
    if (!this.canAllocate(seq, hit, numNewTokens)) return false;
    for (const id of hit.blockIds) {
      this.takeRef(id);
      this.hitCount[id]!++;
      seq.pushBlock(id);
    }
    seq.numCommittedBlocks = hit.blockIds.length;
    const fresh = this.newBlocksForAdmission(hit, numNewTokens);
    for (let i = 0; i < fresh; i++) seq.pushBlock(this.takeFreshBlock());
    this.flushRemoved();
    if (this.enablePrefixCaching) {
      this.prefixCacheQueries += seq.numTokens;
      this.prefixCacheHits += hit.numTokens;
    }
    return true;
  }

  /** Whether a running sequence can grow to cover `numNewTokens` more computed tokens. */
  canAppend(seq: Sequence, numNewTokens: number): boolean {
    return this.blocksFor(seq.numComputedTokens + numNewTokens) - seq.numBlocks <= this.freeQueue.size;
  }

  appendSlots(seq: Sequence, numNewTokens: number): boolean {
    if (!this.canAppend(seq, numNewTokens)) return false;
    const need = this.blocksFor(seq.numComputedTokens + numNewTokens) - seq.numBlocks;
    for (let i = 0; i < need; i++) seq.pushBlock(this.takeFreshBlock());
    this.flushRemoved();
    return true;
  }

  /**
   * After a step advanced seq.numComputedTokens: registers its newly full blocks in the prefix
   * cache and queues a Stored event for them. A block whose hash is already cached (the same
   * prefix computed twice in one step) stays private and is not announced.
   */
  commitComputed(seq: Sequence): void {
    const full = Math.min(Math.floor(seq.numComputedTokens / this.blockSize), seq.numBlocks);
    if (!this.enablePrefixCaching || full <= seq.numCommittedBlocks) {
      seq.numCommittedBlocks = Math.max(seq.numCommittedBlocks, full);
      return;
    }
    this.ensureHashes(seq, full);
    let run: KvStoredBlock[] = [];
    let runParent: bigint | undefined;
    for (let b = seq.numCommittedBlocks; b < full; b++) {
      const hash = seq.seqHashes[b]!;
      const parent = b > 0 ? seq.seqHashes[b - 1] : undefined;
      const id = seq.blockAt(b);
      if (this.cached.has(hash) || this.blockHash[id] !== undefined) {
        if (run.length > 0) this.events.push(storedEvent(runParent, run, seq.loraId));
        run = [];
        continue;
      }
      this.cached.set(hash, id);
      this.blockHash[id] = hash;
      this.blockLora[id] = seq.loraId;
      this.blockTokens.set(seq.tokenSlice(b * this.blockSize, (b + 1) * this.blockSize), id * this.blockSize);
      if (run.length === 0) runParent = parent;
      run.push({ blockHash: hash.toString(), tokensHash: seq.localHashes[b]!.toString() });
    }
    if (run.length > 0) this.events.push(storedEvent(runParent, run, seq.loraId));
    seq.numCommittedBlocks = full;
  }

  /**
   * Releases a sequence's blocks, last block first, so that within one sequence the deepest
   * blocks are evicted before their prefix (a cached child never outlives its parent by LRU).
   */
  free(seq: Sequence): void {
    for (let b = seq.numBlocks - 1; b >= 0; b--) this.release(seq.blockAt(b));
    seq.clearBlocks();
  }

  /**
   * Speculative decoding: frees the sequence's blocks past what its `numTokens` tokens need,
   * those that held only rejected drafts. They were never full of accepted tokens, so never
   * hashed, cached or announced; they go back to the head of the free list.
   */
  trimToTokens(seq: Sequence, numTokens: number): void {
    const keep = this.blocksFor(numTokens);
    if (keep < seq.numCommittedBlocks) throw new Error(`sequence ${seq.seqId}: trimming committed blocks`);
    for (let b = seq.numBlocks - 1; b >= keep; b--) this.release(seq.blockAt(b));
    seq.truncateBlocks(keep);
  }

  /** Forgets every cached hash (blocks in use stay allocated) and queues a Cleared event. */
  resetPrefixCache(): void {
    for (const id of this.cached.values()) this.blockHash[id] = undefined;
    this.cached.clear();
    this.pendingRemoved = [];
    this.events.push({ type: 'cleared' });
  }

  /**
   * Cached blocks evicted since the last call (with trackEvictions), oldest first. Their bytes
   * stay intact until the next engine step writes into the blocks: copy them out before it.
   */
  drainEvicted(): EvictedBlock[] {
    if (this.evicted.length === 0) return [];
    const out = this.evicted;
    this.evicted = [];
    return out;
  }

  /** Token ids of a registered block (a copy); for tests. */
  blockTokensOf(blockId: number): Int32Array {
    return this.blockTokens.slice(blockId * this.blockSize, (blockId + 1) * this.blockSize);
  }

  /** Takes the queued KV events, oldest first. */
  drainEvents(): KvEventData[] {
    if (this.events.length === 0) return [];
    return this.events.splice(0, this.events.length);
  }

  /** The cached (announced, not yet evicted) block hashes as decimal strings. */
  cachedBlockHashes(): Set<string> {
    const out = new Set<string>();
    for (const h of this.cached.keys()) out.add(h.toString());
    return out;
  }

  /** Free-list order from next-evicted to last; for tests. */
  freeOrder(): number[] {
    return this.freeQueue.toArray();
  }

  /** Whether a block is registered in the prefix cache (held or free); for tests. */
  isCached(blockId: number): boolean {
    return this.blockHash[blockId] !== undefined;
  }

  refCountOf(blockId: number): number {
    return this.refCount[blockId]!;
  }

  // ---- internals ----

  private newBlocksForAdmission(hit: PrefixHit, numNewTokens: number): number {
    return Math.max(0, this.blocksFor(hit.numTokens + numNewTokens) - hit.blockIds.length);
  }

  /** Free blocks left once the hit's own free (cached, refcount 0) blocks are taken back. */
  private availableAfterHit(hit: PrefixHit): number {
    let reclaimed = 0;
    for (const id of hit.blockIds) if (this.refCount[id] === 0) reclaimed++;
    return this.freeQueue.size - reclaimed;
  }

  /** Drops one reference; a block nobody holds goes to the free list (cached ones to the LRU tail). */
  private release(id: number): void {
    const rc = --this.refCount[id]!;
    if (rc < 0) throw new Error(`block ${id} freed twice`);
    if (rc > 0) return;
    this.numActive--;
    if (this.blockHash[id] !== undefined) this.freeQueue.pushTail(id);
    else this.freeQueue.pushHead(id);
  }

  private takeRef(id: number): void {
    if (this.refCount[id]++ === 0) {
      this.freeQueue.remove(id);
      this.numActive++;
    }
  }

  private takeFreshBlock(): number {
    const id = this.freeQueue.popHead();
    if (id === undefined) throw new Error('free list empty after a successful capacity check');
    const hash = this.blockHash[id];
    if (hash !== undefined) {
      this.cached.delete(hash);
      this.blockHash[id] = undefined;
      this.pendingRemoved.push(hash.toString());
      if (this.trackEvictions) {
        const loraId = this.blockLora[id];
        this.evicted.push({ hash, blockId: id, tokens: this.blockTokensOf(id), reuse: this.hitCount[id]!, ...(loraId !== undefined ? { loraId } : {}) });
      }
    }
    this.hitCount[id] = 0;
    this.refCount[id] = 1;
    this.numActive++;
    return id;
  }

  private flushRemoved(): void {
    if (this.pendingRemoved.length === 0) return;
    this.events.push({ type: 'removed', blockHashes: this.pendingRemoved });
    this.pendingRemoved = [];
  }

  private ensureHashes(seq: Sequence, numFullBlocks: number): void {
    const have = seq.seqHashes.length;
    if (have >= numFullBlocks) return;
    const bs = this.blockSize;
    const locals = localBlockHashes(seq.tokenSlice(have * bs, numFullBlocks * bs), bs, seq.loraId);
    let parent = have > 0 ? seq.seqHashes[have - 1] : undefined;
    for (const local of locals) {
      parent = chainHash(parent, local);
      seq.localHashes.push(local);
      seq.seqHashes.push(parent);
    }
  }

  private sameTokens(blockId: number, seq: Sequence, blockIndex: number): boolean {
    const bs = this.blockSize;
    const base = blockId * bs;
    const start = blockIndex * bs;
    for (let i = 0; i < bs; i++) if (this.blockTokens[base + i] !== seq.tokenAt(start + i)) return false;
    return true;
  }
}
