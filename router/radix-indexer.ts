/**
 * `RadixIndexer`: the exact prefix index, fed by worker KV events (docs/design.md "KV events").
 *
 * Two views of the same nodes:
 *   - the prefix tree (`PrefixArena`), edges labelled by local hash under the parent, for
 *     matching requests;
 *   - `bySeq`, sequence hash → node id, for applying events: a Stored event names its parent by
 *     sequence hash and Removed names blocks by sequence hash.
 * A node is shared by every worker that holds that block; which workers is a bitset row.
 * Hashes arrive as u64 decimal strings (the wire form); they are parsed once into u32 halves
 * (`U64Parser`) and formatted back only for dumps and `blocksOf`. Nothing on the apply path
 * allocates per block: see router/README.md "Key representation".
 *
 * Events are applied in the order given; ordering and gaps are the `EventSequencer`'s job.
 */
import { isLowerTierEvent, type InstanceId, type KvEventData, type KvStoredBlock } from '../proto/wire.js';
import type { BlockHashInput, IndexDump, IndexStats, KvIndexer, OverlapScores, WorkerBlocksDump } from './indexer.js';
import { toBigints } from './indexer.js';
import { MatchBuffer, NONE, PrefixArena, ROOT } from './prefix-arena.js';
import { formatU64, U64Parser } from './u64-decimal.js';
import { KeyTable } from './u64-table.js';
import { WorkerSlots } from './worker-slots.js';

/** Things in the event stream that could not be applied as written; counted, never thrown. */
export interface IndexAnomalies {
  /** Stored blocks whose parent the index has never seen: kept, but unreachable for matching. */
  orphanBlocks: number;
  /** A parent already had a different child with the same local hash (collision or bad chain). */
  labelConflicts: number;
  /** Removed named a block this worker did not hold. */
  unknownRemovals: number;
  /** Stored hashes (block or tokens) that were not u64 decimals; the rest of that chain is skipped. */
  malformedHashes: number;
}

export class RadixIndexer implements KvIndexer {
  /** (0, sequence hash) → node id. */
  private readonly bySeq = new KeyTable(4096);
  private readonly tree = new PrefixArena((id) => {
    this.bySeq.delete(0, this.tree.seq, 2 * id);
  });
  private readonly parser = new U64Parser();
  /** Parsed hashes: [0, 1] parent or block sequence hash, [2, 3] local hash. */
  private readonly key = new Int32Array(4);
  private readonly slots = new WorkerSlots();
  private perWorker = new Int32Array(32);
  // Per worker slot, the last block it stored: a Stored event's parent is usually the last
  // block of that worker's previous event (prefill chunks, decode blocks), so the parent is
  // found by a string compare instead of a parse and a table probe. (id, generation) guards
  // against the node having been freed since.
  private lastHash: Array<string | undefined> = [];
  private lastNode = new Int32Array(32);
  private lastGen = new Int32Array(32);
  private entries = 0;
  private readonly matchBuf = new MatchBuffer();
  readonly anomalies: IndexAnomalies = { orphanBlocks: 0, labelConflicts: 0, unknownRemovals: 0, malformedHashes: 0 };

  /** Apply one event's data for `workerId` (registering the worker if new). */
  applyEvent(workerId: InstanceId, data: KvEventData): void {
    // Host and disk tier events (medium 'cpu' / 'disk') are not the device pool's blocks.
    if (isLowerTierEvent(data)) return;
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
    return this.matchBuf.scores(this.tree.match(toBigints(localHashes), this.matchBuf, this.slots.highWater), this.slots);
  }

  /** Sequence hashes (wire strings) the index believes `workerId` holds. */
  blocksOf(workerId: InstanceId): string[] {
    const slot = this.slots.slotOf(workerId);
    if (slot === undefined) return [];
    const out: string[] = [];
    const t = this.tree;
    for (let id = ROOT + 1; id < t.highWater; id++) {
      if (t.isLive(id) && t.hasWorker(id, slot)) out.push(formatU64(t.seq[2 * id]!, t.seq[2 * id + 1]!));
    }
    return out;
  }

  dump(): IndexDump {
    const t = this.tree;
    const byWorker = new Map<number, KvEventData[]>();
    const visit = (id: number): void => {
      const p = t.parent[id]!;
      const parentKey = p < 0 || p === ROOT ? undefined : formatU64(t.seq[2 * p]!, t.seq[2 * p + 1]!);
      const block: KvStoredBlock = { blockHash: formatU64(t.seq[2 * id]!, t.seq[2 * id + 1]!), tokensHash: formatU64(t.loc[2 * id]!, t.loc[2 * id + 1]!) };
      t.forEachWorker(id, (slot) => {
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
    t.forEachDescendant(ROOT, visit);
    // Orphan subtrees (parent never seen) are dumped as roots, as before.
    for (let id = ROOT + 1; id < t.highWater; id++) {
      if (!t.isLive(id) || t.parent[id] !== NONE) continue;
      visit(id);
      t.forEachDescendant(id, visit);
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
      const size = Math.max(this.perWorker.length * 2, slot + 1);
      const grow = (a: Int32Array) => {
        const b = new Int32Array(size);
        b.set(a);
        return b;
      };
      this.perWorker = grow(this.perWorker);
      this.lastNode = grow(this.lastNode);
      this.lastGen = grow(this.lastGen);
    }
    this.tree.ensureWorkerCapacity(this.slots.highWater);
    return slot;
  }

  private applyStored(slot: number, parentHash: string | undefined, blocks: readonly KvStoredBlock[]): void {
    const tree = this.tree;
    const seq = this.bySeq;
    const p = this.parser;
    const key = this.key;
    // An unknown (or unparsable) parent leaves the chain orphaned, as a never-seen parent does.
    let parent: number;
    if (parentHash === undefined) parent = ROOT;
    else if (parentHash === this.lastHash[slot] && tree.generation(this.lastNode[slot]!) === this.lastGen[slot] && tree.isLive(this.lastNode[slot]!)) parent = this.lastNode[slot]!;
    else parent = p.parse(parentHash, key, 0) ? seq.get(0, key, 0) : NONE;
    for (let i = 0; i < blocks.length; i++) {
      const b = blocks[i]!;
      // The rest of the chain hangs off this block, so none of it can be placed.
      if (!p.parse(b.blockHash, key, 0)) {
        this.anomalies.malformedHashes++;
        return;
      }
      let node = seq.get(0, key, 0);
      if (node < 0) {
        if (!p.parse(b.tokensHash, key, 2)) {
          this.anomalies.malformedHashes++;
          return;
        }
        node = tree.create(key, 0, key, 2);
        seq.set(0, key, 0, node);
        if (parent < 0) this.anomalies.orphanBlocks++;
        else if (!tree.link(parent, node)) this.anomalies.labelConflicts++;
      } else if (parent >= 0 && tree.parent[node]! < 0) {
        // An orphan whose parent is now known: hang it (and its subtree) in place.
        if (!tree.link(parent, node)) this.anomalies.labelConflicts++;
      }
      if (tree.addWorker(node, slot)) {
        this.perWorker[slot]!++;
        this.entries++;
      }
      parent = node;
    }
    if (parent > ROOT && blocks.length > 0) {
      this.lastHash[slot] = blocks[blocks.length - 1]!.blockHash;
      this.lastNode[slot] = parent;
      this.lastGen[slot] = tree.generation(parent);
    }
  }

  private applyRemoved(slot: number, hashes: readonly string[]): void {
    const p = this.parser;
    const key = this.key;
    for (let i = 0; i < hashes.length; i++) {
      const node = p.parse(hashes[i]!, key, 0) ? this.bySeq.get(0, key, 0) : NONE;
      if (node >= 0 && this.tree.removeWorker(node, slot)) {
        this.perWorker[slot]!--;
        this.entries--;
      } else {
        this.anomalies.unknownRemovals++;
      }
    }
  }

  private clearSlot(slot: number): void {
    if (this.perWorker[slot] === 0) return;
    // Pruning frees ids while we walk; freed ones read as not live and are skipped.
    const t = this.tree;
    for (let id = ROOT + 1; id < t.highWater; id++) {
      if (t.isLive(id) && t.removeWorker(id, slot)) this.entries--;
    }
    this.perWorker[slot] = 0;
  }
}
