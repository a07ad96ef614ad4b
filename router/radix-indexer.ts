/**
 * `RadixIndexer`: the exact prefix index, fed by worker KV events (DESIGN.md "KV events").
 *
 * Two views of the same nodes:
 *   - the radix tree, edges labelled by local hash under the parent, for matching requests;
 *   - `bySeq`, sequence hash (wire decimal string) → node, for applying events: a Stored event
 *     names its parent by sequence hash and Removed names blocks by sequence hash.
 * A node is shared by every worker that holds that block; which workers is a bitset row.
 *
 * Events are applied in the order given; ordering and gaps are the `EventSequencer`'s job.
 */
import type { InstanceId, KvEventData, KvStoredBlock } from '../proto/wire.js';
import type { BlockHashInput, IndexDump, IndexStats, KvIndexer, OverlapScores, WorkerBlocksDump } from './indexer.js';
import { toBigints } from './indexer.js';
import { MatchBuffer, RadixTree, type RadixNode } from './radix-tree.js';
import { WorkerSlots } from './worker-slots.js';

/** Things in the event stream that could not be applied as written; counted, never thrown. */
export interface IndexAnomalies {
  /** Stored blocks whose parent the index has never seen: kept, but unreachable for matching. */
  orphanBlocks: number;
  /** A parent already had a different child with the same local hash (collision or bad chain). */
  labelConflicts: number;
  /** Removed named a block this worker did not hold. */
  unknownRemovals: number;
  /** Hash strings that were not u64 decimals. */
  malformedHashes: number;
}

export class RadixIndexer implements KvIndexer {
  private readonly bySeq = new Map<string, RadixNode>();
  private readonly tree = new RadixTree((node) => {
    if (node.seqKey !== undefined) this.bySeq.delete(node.seqKey);
  });
  private readonly slots = new WorkerSlots();
  private perWorker = new Int32Array(32);
  private entries = 0;
  private readonly matchBuf = new MatchBuffer();
  readonly anomalies: IndexAnomalies = { orphanBlocks: 0, labelConflicts: 0, unknownRemovals: 0, malformedHashes: 0 };

  /** Apply one event's data for `workerId` (registering the worker if new). */
  applyEvent(workerId: InstanceId, data: KvEventData): void {
    const slot = this.slotFor(workerId);
    switch (data.type) {
      case 'stored':
        this.applyStored(slot, data.parentHash, data.blocks);
        break;
      case 'removed':
        this.applyRemoved(slot, data.blockHashes);
        break;
      case 'cleared':
        this.clearSlot(slot);
        break;
    }
  }

  /** Replace everything known about `workerId` with a dump of its blocks. */
  loadWorker(workerId: InstanceId, events: readonly KvEventData[]): void {
    const slot = this.slotFor(workerId);
    this.clearSlot(slot);
    for (const e of events) this.applyEvent(workerId, e);
  }

  /** Forget the worker's blocks but keep it registered (a Cleared event, or before a dump). */
  clearWorker(workerId: InstanceId): void {
    const slot = this.slots.slotOf(workerId);
    if (slot !== undefined) this.clearSlot(slot);
  }

  removeWorker(workerId: InstanceId): void {
    const slot = this.slots.slotOf(workerId);
    if (slot === undefined) return;
    this.clearSlot(slot);
    this.slots.release(workerId);
  }

  hasWorker(workerId: InstanceId): boolean {
    return this.slots.slotOf(workerId) !== undefined;
  }

  findMatches(localHashes: BlockHashInput): OverlapScores {
    const hashes = toBigints(localHashes);
    const buf = this.matchBuf;
    const maxDepth = this.tree.match(hashes, buf, this.slots.highWater);
    const depths = new Map<InstanceId, number>();
    for (let i = 0; i < buf.count; i++) {
      const id = this.slots.idOf(buf.slots[i]!);
      if (id !== undefined) depths.set(id, buf.depths[i]!);
    }
    return { depths, maxDepth };
  }

  /** Sequence hashes (wire strings) the index believes `workerId` holds. */
  blocksOf(workerId: InstanceId): string[] {
    const slot = this.slots.slotOf(workerId);
    if (slot === undefined) return [];
    const out: string[] = [];
    for (const [key, node] of this.bySeq) if (this.tree.hasWorker(node, slot)) out.push(key);
    return out;
  }

  dump(): IndexDump {
    const byWorker = new Map<number, KvEventData[]>();
    const visit = (node: RadixNode): void => {
      const parentKey = node.parent === this.tree.root ? undefined : node.parent?.seqKey;
      const block: KvStoredBlock = { blockHash: node.seqKey!, tokensHash: node.localHash.toString() };
      this.tree.forEachWorker(node, (slot) => {
        let events = byWorker.get(slot);
        if (events === undefined) byWorker.set(slot, (events = []));
        const last = events[events.length - 1];
        // Extend the previous Stored event when this block continues its chain.
        if (last !== undefined && last.type === 'stored' && parentKey !== undefined) {
          if (last.blocks[last.blocks.length - 1]!.blockHash === parentKey) {
            last.blocks.push(block);
            return;
          }
        }
        events.push(parentKey === undefined ? { type: 'stored', blocks: [block] } : { type: 'stored', parentHash: parentKey, blocks: [block] });
      });
    };
    this.tree.forEachDescendant(this.tree.root, visit);
    for (const node of this.bySeq.values()) {
      if (node.parent !== undefined) continue;
      visit(node);
      this.tree.forEachDescendant(node, visit);
    }
    const workers: WorkerBlocksDump[] = [];
    for (const id of this.slots.ids()) {
      workers.push({ workerId: id, events: byWorker.get(this.slots.slotOf(id)!) ?? [] });
    }
    return { version: 1, workers };
  }

  /** Replace the whole index with a snapshot from `dump()`. */
  load(dump: IndexDump): void {
    for (const id of this.slots.ids()) this.removeWorker(id);
    for (const w of dump.workers) this.loadWorker(w.workerId, w.events);
  }

  stats(): IndexStats {
    const perWorker: Record<InstanceId, number> = {};
    for (const id of this.slots.ids()) perWorker[id] = this.perWorker[this.slots.slotOf(id)!]!;
    return {
      nodes: this.tree.nodeCount,
      entries: this.entries,
      workers: this.slots.size,
      perWorker,
      slabBytes: this.tree.slabBytes,
    };
  }

  private slotFor(workerId: InstanceId): number {
    const slot = this.slots.acquire(workerId);
    if (slot >= this.perWorker.length) {
      const next = new Int32Array(Math.max(this.perWorker.length * 2, slot + 1));
      next.set(this.perWorker);
      this.perWorker = next;
    }
    this.tree.ensureWorkerCapacity(this.slots.highWater);
    return slot;
  }

  private applyStored(slot: number, parentHash: string | undefined, blocks: readonly KvStoredBlock[]): void {
    const tree = this.tree;
    let parent: RadixNode | undefined = parentHash === undefined ? tree.root : this.bySeq.get(parentHash);
    for (let i = 0; i < blocks.length; i++) {
      const b = blocks[i]!;
      let node = this.bySeq.get(b.blockHash);
      if (node === undefined) {
        const local = parseU64(b.tokensHash);
        if (local === undefined) {
          // The rest of the chain hangs off this block, so none of it can be placed.
          this.anomalies.malformedHashes++;
          return;
        }
        node = tree.createNode(local, b.blockHash);
        this.bySeq.set(b.blockHash, node);
        if (parent === undefined) this.anomalies.orphanBlocks++;
        else if (!tree.link(parent, node)) this.anomalies.labelConflicts++;
      } else if (node.parent === undefined && parent !== undefined) {
        // An orphan whose parent is now known: hang it (and its subtree) in place.
        if (!tree.link(parent, node)) this.anomalies.labelConflicts++;
      }
      if (tree.addWorker(node, slot)) {
        this.perWorker[slot]!++;
        this.entries++;
      }
      parent = node;
    }
  }

  private applyRemoved(slot: number, hashes: readonly string[]): void {
    for (let i = 0; i < hashes.length; i++) {
      const node = this.bySeq.get(hashes[i]!);
      if (node !== undefined && this.tree.removeWorker(node, slot)) {
        this.perWorker[slot]!--;
        this.entries--;
      } else {
        this.anomalies.unknownRemovals++;
      }
    }
  }

  private clearSlot(slot: number): void {
    if (this.perWorker[slot] === 0) return;
    // Deleting from a Map while iterating it is safe: pruned nodes are simply not visited.
    for (const node of this.bySeq.values()) {
      if (this.tree.removeWorker(node, slot)) this.entries--;
    }
    this.perWorker[slot] = 0;
  }
}

const U64_MAX = (1n << 64n) - 1n;

function parseU64(text: string): bigint | undefined {
  if (typeof text !== 'string' || text.length === 0 || text.length > 20) return undefined;
  try {
    const v = BigInt(text);
    return v >= 0n && v <= U64_MAX ? v : undefined;
  } catch {
    return undefined;
  }
}
