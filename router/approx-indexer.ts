/**
 * `ApproxIndexer`: the prefix index for workers that publish no KV events (`--no-kv-events`).
 * The router learns from its own decisions: when it sends a request to a worker it assumes
 * that worker now caches the request's blocks, for `ttlMs`. Every later route that shares the
 * prefix with the same worker refreshes the TTL, as a real LRU cache would keep hot blocks.
 *
 * Expiry is by `nowMs` passed in, never a timer. TTL is constant and time only moves forward,
 * so a FIFO queue is ordered by expiry; refreshed entries leave stale queue items behind that
 * are skipped when popped (the per-worker map holds the live expiry).
 */
import type { InstanceId } from '../proto/wire.js';
import type { BlockHashInput, IndexStats, KvIndexer, OverlapScores } from './indexer.js';
import { toBigints } from './indexer.js';
import { MatchBuffer, RadixTree, type RadixNode } from './radix-tree.js';
import { WorkerSlots } from './worker-slots.js';

export interface ApproxIndexerOptions {
  /** How long a routed request's blocks are assumed cached on its worker. */
  ttlMs: number;
}

export class ApproxIndexer implements KvIndexer {
  private readonly tree = new RadixTree();
  private readonly slots = new WorkerSlots();
  /** Per slot: node → expiry time. */
  private expiry: Array<Map<RadixNode, number> | undefined> = [];
  private qNodes: RadixNode[] = [];
  private qSlots: number[] = [];
  private qAt: number[] = [];
  private qHead = 0;
  private entries = 0;
  private readonly matchBuf = new MatchBuffer();

  constructor(private readonly options: ApproxIndexerOptions) {}

  /** Assume `workerId` now caches the blocks of `localHashes`, until `nowMs + ttlMs`. */
  record(workerId: InstanceId, localHashes: BlockHashInput, nowMs: number): void {
    const hashes = toBigints(localHashes);
    const slot = this.slots.acquire(workerId);
    this.tree.ensureWorkerCapacity(this.slots.highWater);
    let map = this.expiry[slot];
    if (map === undefined) this.expiry[slot] = map = new Map();
    const at = nowMs + this.options.ttlMs;
    let parent = this.tree.root;
    for (let i = 0; i < hashes.length; i++) {
      let node = this.tree.child(parent, hashes[i]!);
      if (node === undefined) {
        node = this.tree.createNode(hashes[i]!, undefined);
        this.tree.link(parent, node);
      }
      if (this.tree.addWorker(node, slot)) this.entries++;
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
    const buf = this.matchBuf;
    const maxDepth = this.tree.match(toBigints(localHashes), buf, this.slots.highWater);
    const depths = new Map<InstanceId, number>();
    for (let i = 0; i < buf.count; i++) {
      const id = this.slots.idOf(buf.slots[i]!);
      if (id !== undefined) depths.set(id, buf.depths[i]!);
    }
    return { depths, maxDepth };
  }

  removeWorker(workerId: InstanceId): void {
    const slot = this.slots.slotOf(workerId);
    if (slot === undefined) return;
    const map = this.expiry[slot];
    if (map !== undefined) {
      for (const node of map.keys()) if (this.tree.removeWorker(node, slot)) this.entries--;
    }
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

  private compactQueue(): void {
    // Amortized O(1): shift out the consumed head once it dominates the arrays.
    if (this.qHead < 4096 || this.qHead * 2 < this.qAt.length) return;
    this.qNodes = this.qNodes.slice(this.qHead);
    this.qSlots = this.qSlots.slice(this.qHead);
    this.qAt = this.qAt.slice(this.qHead);
    this.qHead = 0;
  }
}
