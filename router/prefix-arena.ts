/**
 * `PrefixArena`: the prefix tree both indexers share (`RadixIndexer`, fed by KV events, and
 * `ApproxIndexer`, learned from routing decisions), as struct-of-arrays.
 *
 * Edges are labelled by LOCAL block hash under a parent node, as in Dynamo's radix tree: a local
 * hash alone is ambiguous (the same 16 tokens occur after many prefixes), but the path from the
 * root fixes the whole prefix, so "local hash under this parent" names exactly one sequence
 * hash, and a request is matched with the local hashes it already has. Which workers hold a
 * node is one bit per worker slot (a row of u32 words), so matching is a running AND of the
 * active set with each node's row: O(depth × words), however many workers share the prefix.
 *
 * A node is an integer id into typed arrays (hashes as u32 halves, links as ids), not a JS
 * object holding bigints and a Map: storing a block allocates nothing and the GC has nothing
 * to trace however large the index grows. Typed arrays cannot hold `undefined`, so inside this
 * file and its two callers "no node" is `NONE` (-1); it never crosses the `KvIndexer` interface
 * (router/README.md, guardrail 3).
 *
 * Children: a node's children form a doubly linked sibling list (for pruning and walks). A
 * parent with a single child (most nodes: prefixes are chains) is looked up by comparing that
 * child's label; once a parent has two or more children, all of its edges are also in `edges`
 * (a `KeyTable` keyed by (parent, local hash)), so lookup stays O(1) at the root's fan-out.
 */
import type { OverlapScores } from './indexer.js';
import { KeyTable } from './u64-table.js';
import type { WorkerSlots } from './worker-slots.js';

export const ROOT = 0;
/** "No node" in an id slot (parent of the root or of an orphan, a missing child). */
export const NONE = -1;

/** Reusable output of `PrefixArena.match`: `count` (slot, depth) pairs, depth ≥ 1. */
export class MatchBuffer {
  slots = new Int32Array(64);
  depths = new Int32Array(64);
  count = 0;

  ensure(capacity: number): void {
    if (this.slots.length >= capacity) return;
    let n = this.slots.length;
    while (n < capacity) n *= 2;
    this.slots = new Int32Array(n);
    this.depths = new Int32Array(n);
  }

  /** The matches as the `KvIndexer` answer: worker id → depth (slots no longer held are left out). */
  scores(maxDepth: number, workers: WorkerSlots): OverlapScores {
    const depths = new Map<string, number>();
    for (let i = 0; i < this.count; i++) {
      const id = workers.idOf(this.slots[i]!);
      if (id !== undefined) depths.set(id, this.depths[i]!);
    }
    return { depths, maxDepth };
  }
}

export class PrefixArena {
  private cap = 1024;
  /** Sequence hash of node i at [2i] (high half), [2i + 1] (low half), as int32 bit patterns. */
  seq = new Int32Array(this.cap * 2);
  /** Local hash (the edge label), same layout. */
  loc = new Int32Array(this.cap * 2);
  /** Parent id; `NONE` for the root and for orphans (stored before their parent was seen). */
  parent = new Int32Array(this.cap).fill(NONE);
  private firstChild = new Int32Array(this.cap).fill(NONE);
  private nextSib = new Int32Array(this.cap).fill(NONE);
  private prevSib = new Int32Array(this.cap).fill(NONE);
  workerCount = new Int32Array(this.cap);
  private live = new Uint8Array(this.cap);
  /** Bumped when an id is freed, so a cached id can be checked for reuse (`generation`). */
  private gen = new Int32Array(this.cap);
  private words = 1;
  private bits = new Uint32Array(this.cap * this.words);
  // Int32: bit 31 stays a small int (no uint32 → double conversions and deopts in `match`).
  private active = new Int32Array(this.words);
  private freeIds: number[] = [];
  private nextId = ROOT + 1;
  private liveNodes = 0;
  private readonly edges = new KeyTable(1024);
  // Scratch to split a bigint into [hi, lo] without allocating (little-endian: lo first).
  private readonly split64 = new BigUint64Array(1);
  private readonly split32 = new Int32Array(this.split64.buffer);
  private readonly key = new Int32Array(2);

  constructor(private readonly onDrop: (node: number) => void) {
    this.live[ROOT] = 1;
  }

  /** Nodes currently allocated (excluding the root). */
  get nodeCount(): number {
    return this.liveNodes;
  }

  /** Ids below this may be live; iterate `1 ≤ id < highWater` with `isLive`. */
  get highWater(): number {
    return this.nextId;
  }

  get slabBytes(): number {
    return this.bits.byteLength;
  }

  /** Bytes of every typed array the arena holds (the whole tree; nothing else is on the heap). */
  get totalBytes(): number {
    return this.cap * (4 * 4 + 6 * 4 + 1) + this.bits.byteLength + this.edges.bytes;
  }

  isLive(id: number): boolean {
    return this.live[id] === 1;
  }

  /** Changes every time `id` is freed: (id, generation) names one node for its whole life. */
  generation(id: number): number {
    return this.gen[id]!;
  }

  ensureWorkerCapacity(slotCount: number): void {
    const need = Math.max(1, Math.ceil(slotCount / 32));
    if (need <= this.words) return;
    const words = Math.max(need, this.words * 2);
    const next = new Uint32Array(this.cap * words);
    for (let r = 0; r < this.nextId; r++) next.set(this.bits.subarray(r * this.words, (r + 1) * this.words), r * words);
    this.bits = next;
    this.words = words;
    this.active = new Int32Array(words);
  }

  /** A new node, not yet linked anywhere; hashes are [hi, lo] pairs at the given offsets. */
  create(seqKey: Int32Array, seqAt: number, locKey: Int32Array, locAt: number): number {
    let id = this.freeIds.pop();
    if (id === undefined) {
      if (this.nextId === this.cap) this.grow();
      id = this.nextId++;
    }
    this.seq[2 * id] = seqKey[seqAt]!;
    this.seq[2 * id + 1] = seqKey[seqAt + 1]!;
    this.loc[2 * id] = locKey[locAt]!;
    this.loc[2 * id + 1] = locKey[locAt + 1]!;
    this.parent[id] = NONE;
    this.firstChild[id] = NONE;
    this.nextSib[id] = NONE;
    this.prevSib[id] = NONE;
    this.workerCount[id] = 0;
    this.live[id] = 1;
    this.liveNodes++;
    return id;
  }

  /** The child of `p` labelled by the [hi, lo] pair at `key[at]`, or `NONE`. */
  child(p: number, key: Int32Array, at: number): number {
    const c = this.firstChild[p]!;
    if (c === NONE) return NONE;
    if (this.nextSib[c] === NONE) return this.loc[2 * c + 1] === key[at + 1] && this.loc[2 * c] === key[at] ? c : NONE;
    return this.edges.get(p, key, at);
  }

  /** Attach `c` under `p`; false (and nothing changes) when `p` has another child with c's label. */
  link(p: number, c: number): boolean {
    const existing = this.child(p, this.loc, 2 * c);
    if (existing !== NONE) return existing === c;
    this.attach(p, c);
    return true;
  }

  /** `link` for a caller that has just seen `child(p, c's label)` return `NONE`. */
  attach(p: number, c: number): void {
    const loc = this.loc;
    const first = this.firstChild[p]!;
    if (first !== NONE) {
      // Going from one child to two: the first one joins the edge table too.
      if (this.nextSib[first] === NONE) this.edges.set(p, loc, 2 * first, first);
      this.edges.set(p, loc, 2 * c, c);
      this.prevSib[first] = c;
    }
    this.nextSib[c] = first;
    this.prevSib[c] = NONE;
    this.firstChild[p] = c;
    this.parent[c] = p;
  }

  hasChildren(id: number): boolean {
    return this.firstChild[id] !== NONE;
  }

  hasWorker(id: number, slot: number): boolean {
    const w = slot >>> 5;
    if (w >= this.words) return false;
    return (this.bits[id * this.words + w]! & (1 << (slot & 31))) !== 0;
  }

  /** Set the worker's bit; true when it was not set before. */
  addWorker(id: number, slot: number): boolean {
    const i = id * this.words + (slot >>> 5);
    const mask = 1 << (slot & 31);
    const word = this.bits[i]!;
    if ((word & mask) !== 0) return false;
    this.bits[i] = word | mask;
    this.workerCount[id]!++;
    return true;
  }

  /** Clear the worker's bit and prune what became empty; true when the bit was set. */
  removeWorker(id: number, slot: number): boolean {
    const w = slot >>> 5;
    if (w >= this.words) return false;
    const i = id * this.words + w;
    const mask = 1 << (slot & 31);
    const word = this.bits[i]!;
    if ((word & mask) === 0) return false;
    this.bits[i] = word & ~mask;
    this.workerCount[id]!--;
    this.pruneUp(id);
    return true;
  }

  forEachWorker(id: number, fn: (slot: number) => void): void {
    const base = id * this.words;
    for (let w = 0; w < this.words; w++) {
      let word = this.bits[base + w]!;
      while (word !== 0) {
        const low = word & -word;
        fn(w * 32 + 31 - Math.clz32(low));
        word ^= low;
      }
    }
  }

  /** Depth-first below `from` (each node right before its own subtree), excluding `from`. */
  forEachDescendant(from: number, fn: (id: number) => void): void {
    const stack: number[] = [];
    for (let c = this.firstChild[from]!; c !== NONE; c = this.nextSib[c]!) stack.push(c);
    while (stack.length > 0) {
      const n = stack.pop()!;
      fn(n);
      for (let c = this.firstChild[n]!; c !== NONE; c = this.nextSib[c]!) stack.push(c);
    }
  }

  /**
   * For each worker, how many LEADING blocks of `localHashes` it holds, into `out` (depth ≥ 1
   * only). Returns the deepest depth reached by anyone.
   */
  match(localHashes: readonly bigint[], out: MatchBuffer, slotCount: number): number {
    out.count = 0;
    out.ensure(slotCount);
    const n = localHashes.length;
    if (n === 0) return 0;
    const s64 = this.split64;
    const s32 = this.split32;
    const key = this.key;
    s64[0] = localHashes[0]!;
    key[0] = s32[1]!;
    key[1] = s32[0]!;
    let node = this.child(ROOT, key, 0);
    if (node === NONE) return 0;
    const words = this.words;
    const bits = this.bits;
    const active = this.active;
    let any = 0;
    let base = node * words;
    for (let w = 0; w < words; w++) {
      active[w] = bits[base + w]!;
      any |= active[w]!;
    }
    if (any === 0) return 0;
    let depth = 1;
    for (; depth < n; depth++) {
      s64[0] = localHashes[depth]!;
      key[0] = s32[1]!;
      key[1] = s32[0]!;
      const next = this.child(node, key, 0);
      if (next === NONE) break;
      base = next * words;
      any = 0;
      for (let w = 0; w < words; w++) {
        const a = active[w]!;
        if (a === 0) continue;
        const keep = a & bits[base + w]!;
        if (keep !== a) emit(out, a & ~keep, w, depth);
        active[w] = keep;
        any |= keep;
      }
      if (any === 0) return depth;
      node = next;
    }
    for (let w = 0; w < words; w++) {
      const a = active[w]!;
      if (a !== 0) emit(out, a, w, depth);
    }
    return depth;
  }

  /** Free `id` if it holds nothing and has no children, then walk up while ancestors empty out. */
  pruneUp(start: number): void {
    let id = start;
    while (id > ROOT && this.live[id] === 1 && this.workerCount[id] === 0 && this.firstChild[id] === NONE) {
      const p = this.parent[id]!;
      if (p !== NONE) this.unlink(p, id);
      this.live[id] = 0;
      this.gen[id]!++;
      this.parent[id] = NONE;
      this.freeIds.push(id);
      this.liveNodes--;
      this.onDrop(id);
      id = p;
    }
  }

  private unlink(p: number, c: number): void {
    const prev = this.prevSib[c]!;
    const next = this.nextSib[c]!;
    const many = prev !== NONE || next !== NONE;
    if (prev === NONE) this.firstChild[p] = next;
    else this.nextSib[prev] = next;
    if (next !== NONE) this.prevSib[next] = prev;
    this.nextSib[c] = NONE;
    this.prevSib[c] = NONE;
    if (!many) return;
    this.edges.delete(p, this.loc, 2 * c);
    // Back to a single child: it leaves the edge table (lookup compares it directly).
    const only = this.firstChild[p]!;
    if (this.nextSib[only] === NONE) this.edges.delete(p, this.loc, 2 * only);
  }

  private grow(): void {
    const cap = this.cap * 2;
    const pairs = (a: Int32Array) => {
      const b = new Int32Array(cap * 2);
      b.set(a);
      return b;
    };
    const i32 = (a: Int32Array) => {
      const b = new Int32Array(cap).fill(NONE);
      b.set(a);
      return b;
    };
    this.seq = pairs(this.seq);
    this.loc = pairs(this.loc);
    this.parent = i32(this.parent);
    this.firstChild = i32(this.firstChild);
    this.nextSib = i32(this.nextSib);
    this.prevSib = i32(this.prevSib);
    const wc = new Int32Array(cap);
    wc.set(this.workerCount);
    this.workerCount = wc;
    const live = new Uint8Array(cap);
    live.set(this.live);
    this.live = live;
    const gen = new Int32Array(cap);
    gen.set(this.gen);
    this.gen = gen;
    const bits = new Uint32Array(cap * this.words);
    bits.set(this.bits);
    this.bits = bits;
    this.cap = cap;
  }
}

/** One (slot, depth) per set bit of the int32 `word`; highest bit first, all int32 arithmetic. */
function emit(out: MatchBuffer, word: number, w: number, depth: number): void {
  while (word !== 0) {
    const bit = 31 - Math.clz32(word);
    const i = out.count++;
    out.slots[i] = w * 32 + bit;
    out.depths[i] = depth;
    word ^= 1 << bit;
  }
}
