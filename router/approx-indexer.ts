/**
 * `ApproxIndexer`: the prefix index for workers that publish no KV events (`--no-kv-events`).
 * The router learns from its own decisions: when it sends a request to a worker it assumes
 * that worker now caches the request's blocks, for `ttlMs`. Every later route that shares the
 * prefix with the same worker refreshes the TTL, as a real LRU cache would keep hot blocks.
 *
 * The tree is the same `PrefixArena` the event-fed `RadixIndexer` uses. Nodes are learned from
 * local hashes only (no sequence hash is known), so a node's `seq` slot holds its local hash
 * and is never read: the path from the root already names the prefix.
 *
 * Expiry is by `nowMs` passed in, never a timer. TTL is constant and time only moves forward,
 * so a FIFO queue is ordered by expiry; refreshed entries leave stale queue items behind that
 * are skipped when popped (the per-slot map holds the live expiry). A node id is freed only
 * once no slot holds it, so no map names a freed id; a stale queue item naming an id since
 * reused carries an expiry no later than the live one, and is skipped unless the two are equal
 * (then dropping the entry at that time is what the live one asks for anyway).
 */
import type { InstanceId } from '../proto/wire.js';
import type { BlockHashInput, IndexStats, KvIndexer, OverlapScores } from './indexer.js';
import { toBigints } from './indexer.js';
import { MatchBuffer, NONE, PrefixArena, ROOT } from './prefix-arena.js';
import { U64Parser } from './u64-decimal.js';
import { WorkerSlots } from './worker-slots.js';

export interface ApproxIndexerOptions {
  /** How long a routed request's blocks are assumed cached on its worker. */
  ttlMs: number;
}

export class ApproxIndexer implements KvIndexer {
  private readonly tree = new PrefixArena(() => {});
  private readonly slots = new WorkerSlots();
  /** Per slot: node id → expiry time. */
  private expiry: Array<Map<number, number> | undefined> = [];
  private qNodes: number[] = [];
  private qSlots: number[] = [];
  private qAt: number[] = [];
  private qHead = 0;
  private entries = 0;
  private readonly matchBuf = new MatchBuffer();
  private readonly parser = new U64Parser();
  /** The current local hash as [hi, lo] (the arena's key form). */
  private readonly key = new Int32Array(2);
  private readonly split64 = new BigUint64Array(1);
  private readonly split32 = new Int32Array(this.split64.buffer);

  constructor(private readonly options: ApproxIndexerOptions) {}

  /**
   * Assume `workerId` now caches the blocks of `localHashes`, until `nowMs + ttlMs`. A decimal
   * string that is not a u64 ends the chain there (what follows it cannot be placed).
   */
  record(workerId: InstanceId, localHashes: BlockHashInput, nowMs: number): void {
    const slot = this.slots.acquire(workerId);
    const tree = this.tree;
    tree.ensureWorkerCapacity(this.slots.highWater);
    let map = this.expiry[slot];
    if (map === undefined) this.expiry[slot] = map = new Map();
    const at = nowMs + this.options.ttlMs;
    const key = this.key;
    let parent = ROOT;
    for (let i = 0; i < localHashes.length; i++) {
      if (!this.keyOf(localHashes[i]!)) return;
      let node = tree.child(parent, key, 0);
      if (node === NONE) {
        node = tree.create(key, 0, key, 0);
        tree.attach(parent, node);
      }
      if (tree.addWorker(node, slot)) this.entries++;
      map.set(node, at);
      this.qNodes.push(node);
      this.qSlots.push(slot);
      this.qAt.push(at);
      parent = node;
    }
  }

  /** Drop every assumption that is due at `nowMs`. Returns how many (worker, block) entries went. */
  expire(nowMs: number): number {
    let dropped = 0;
    let h = this.qHead;
    while (h < this.qAt.length && this.qAt[h]! <= nowMs) {
      const node = this.qNodes[h]!;
      const slot = this.qSlots[h]!;
      const at = this.qAt[h]!;
      h++;
      const map = this.expiry[slot];
      if (map === undefined || map.get(node) !== at) continue; // refreshed or already gone
      map.delete(node);
      if (this.tree.removeWorker(node, slot)) {
        this.entries--;
        dropped++;
      }
    }
    this.qHead = h;
    this.compactQueue();
    return dropped;
  }

  findMatches(localHashes: BlockHashInput): OverlapScores {
    return this.matchBuf.scores(this.tree.match(toBigints(localHashes), this.matchBuf, this.slots.highWater), this.slots);
  }

  removeWorker(workerId: InstanceId): void {
    const slot = this.slots.slotOf(workerId);
    if (slot === undefined) return;
    const map = this.expiry[slot];
    // A node this slot holds keeps its ancestors (also held by it) alive, so no id in the map
    // is freed while we walk it.
    if (map !== undefined) for (const node of map.keys()) if (this.tree.removeWorker(node, slot)) this.entries--;
    this.expiry[slot] = undefined;
    this.slots.release(workerId);
  }

  stats(): IndexStats {
    const perWorker: Record<InstanceId, number> = {};
    for (const id of this.slots.ids()) perWorker[id] = this.expiry[this.slots.slotOf(id)!]?.size ?? 0;
    return {
      nodes: this.tree.nodeCount,
      entries: this.entries,
      workers: this.slots.size,
      perWorker,
      slabBytes: this.tree.slabBytes,
    };
  }

  /** `h` into `this.key` as [hi, lo]; false when a string is not a u64 decimal. */
  private keyOf(h: bigint | string): boolean {
    if (typeof h === 'string') return this.parser.parse(h, this.key, 0);
    this.split64[0] = h;
    this.key[0] = this.split32[1]!;
    this.key[1] = this.split32[0]!;
    return true;
  }

  private compactQueue(): void {
    // Amortized O(1): shift out the consumed head once it dominates the arrays.
    if (this.qHead < 4096 || this.qHead * 2 < this.qAt.length) return;
    this.qNodes = this.qNodes.slice(this.qHead);
    this.qSlots = this.qSlots.slice(this.qHead);
    this.qAt = this.qAt.slice(this.qHead);
    this.qHead = 0;
  }
}
