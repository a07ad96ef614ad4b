/**
 * The prefix tree shared by the event-fed and the approximate indexers.
 *
 * Edges are labelled by LOCAL block hash under a parent node, as in Dynamo's radix tree: a
 * local hash alone is ambiguous (the same 16 tokens occur after many prefixes), but the path
 * from the root fixes the whole prefix, so "local hash under this parent" names exactly one
 * sequence hash. That lets a request be matched with the local hashes it already has, with no
 * extra chain hashing on the hot path.
 *
 * Which workers hold a node is one bit per worker slot, in a single slab of u32 words
 * (`words` per node row). Matching is then a running AND of the active set with each node's
 * row: O(depth × words), independent of how many workers share the prefix.
 */

/** One cached block. `row` indexes the node's worker bitset in the tree's slab. */
export class RadixNode {
  parent: RadixNode | undefined = undefined;
  /** True while reachable from the root (an orphan's parent was never seen). */
  linked = false;
  /** Most nodes have one child (a chain); the map exists only once there are two. */
  onlyChild: RadixNode | undefined = undefined;
  children: Map<bigint, RadixNode> | undefined = undefined;
  workerCount = 0;
  constructor(
    /** Local (tokens-only) hash: the edge label under the parent. */
    readonly localHash: bigint,
    /** Sequence hash, wire form; absent for nodes learned without events (approximate mode). */
    readonly seqKey: string | undefined,
    readonly row: number,
  ) {}

  get hasChildren(): boolean {
    return this.onlyChild !== undefined || (this.children !== undefined && this.children.size > 0);
  }
}

/** Reusable output of `RadixTree.match`: `count` (slot, depth) pairs, depth ≥ 1. */
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
}

export class RadixTree {
  readonly root = new RadixNode(0n, undefined, -1);
  private words = 1;
  private rowCapacity = 1024;
  private bits = new Uint32Array(this.rowCapacity * this.words);
  private nextRow = 0;
  private readonly freeRows: number[] = [];
  private active = new Uint32Array(this.words);
  private liveNodes = 0;

  constructor(private readonly onDrop?: (node: RadixNode) => void) {
    this.root.linked = true;
  }

  /** Nodes currently allocated (excluding the root). */
  get nodeCount(): number {
    return this.liveNodes;
  }

  /** Bytes held by the worker bitset slab (the rest of the index is JS objects). */
  get slabBytes(): number {
    return this.bits.byteLength;
  }

  /** Widen every row so that `slotCount` worker bits fit. */
  ensureWorkerCapacity(slotCount: number): void {
    const need = Math.max(1, Math.ceil(slotCount / 32));
    if (need <= this.words) return;
    const words = Math.max(need, this.words * 2);
    const next = new Uint32Array(this.rowCapacity * words);
    for (let r = 0; r < this.nextRow; r++) {
      next.set(this.bits.subarray(r * this.words, (r + 1) * this.words), r * words);
    }
    this.bits = next;
    this.words = words;
    this.active = new Uint32Array(words);
  }

  /** A new node, not yet linked anywhere. */
  createNode(localHash: bigint, seqKey: string | undefined): RadixNode {
    let row = this.freeRows.pop();
    if (row === undefined) {
      if (this.nextRow === this.rowCapacity) this.growRows();
      row = this.nextRow++;
    }
    this.liveNodes++;
    return new RadixNode(localHash, seqKey, row);
  }

  child(parent: RadixNode, localHash: bigint): RadixNode | undefined {
    const only = parent.onlyChild;
    if (only !== undefined) return only.localHash === localHash ? only : undefined;
    return parent.children?.get(localHash);
  }

  /**
   * Attach `node` under `parent`. Returns false (and changes nothing) when `parent` already has
   * a different child with the same label: that is a hash collision or an inconsistent chain.
   */
  link(parent: RadixNode, node: RadixNode): boolean {
    const existing = this.child(parent, node.localHash);
    if (existing !== undefined) return existing === node;
    if (parent.children !== undefined) {
      parent.children.set(node.localHash, node);
    } else if (parent.onlyChild === undefined) {
      parent.onlyChild = node;
    } else {
      const only = parent.onlyChild;
      parent.children = new Map([
        [only.localHash, only],
        [node.localHash, node],
      ]);
      parent.onlyChild = undefined;
    }
    node.parent = parent;
    node.linked = parent.linked;
    if (node.linked && node.hasChildren) this.markLinked(node);
    return true;
  }

  hasWorker(node: RadixNode, slot: number): boolean {
    const w = slot >>> 5;
    if (w >= this.words) return false;
    return (this.bits[node.row * this.words + w]! & (1 << (slot & 31))) !== 0;
  }

  /** Set the worker's bit; true when it was not set before. */
  addWorker(node: RadixNode, slot: number): boolean {
    const i = node.row * this.words + (slot >>> 5);
    const mask = 1 << (slot & 31);
    const word = this.bits[i]!;
    if ((word & mask) !== 0) return false;
    this.bits[i] = word | mask;
    node.workerCount++;
    return true;
  }

  /** Clear the worker's bit and prune what became empty; true when the bit was set. */
  removeWorker(node: RadixNode, slot: number): boolean {
    const w = slot >>> 5;
    if (w >= this.words) return false;
    const i = node.row * this.words + w;
    const mask = 1 << (slot & 31);
    const word = this.bits[i]!;
    if ((word & mask) === 0) return false;
    this.bits[i] = word & ~mask;
    node.workerCount--;
    this.pruneUp(node);
    return true;
  }

  /** Calls `fn(slot)` for every worker holding `node`. */
  forEachWorker(node: RadixNode, fn: (slot: number) => void): void {
    const base = node.row * this.words;
    for (let w = 0; w < this.words; w++) {
      let word = this.bits[base + w]!;
      while (word !== 0) {
        const low = word & -word;
        fn(w * 32 + 31 - Math.clz32(low));
        word ^= low;
      }
    }
  }

  /** Depth-first over the subtree below `from` (parents before children), excluding `from`. */
  forEachDescendant(from: RadixNode, fn: (node: RadixNode) => void): void {
    const stack: RadixNode[] = [];
    const pushChildren = (n: RadixNode): void => {
      if (n.onlyChild !== undefined) stack.push(n.onlyChild);
      else if (n.children !== undefined) for (const c of n.children.values()) stack.push(c);
    };
    pushChildren(from);
    while (stack.length > 0) {
      const n = stack.pop()!;
      fn(n);
      pushChildren(n);
    }
  }

  /**
   * For each worker, how many LEADING blocks of `localHashes` it holds. Results go to `out`
   * (only workers with depth ≥ 1). Returns the deepest node depth reached by anyone.
   */
  match(localHashes: readonly bigint[], out: MatchBuffer, slotCount: number): number {
    out.count = 0;
    out.ensure(slotCount);
    const n = localHashes.length;
    if (n === 0) return 0;
    let node = this.child(this.root, localHashes[0]!);
    if (node === undefined) return 0;
    const words = this.words;
    const bits = this.bits;
    const active = this.active;
    let any = 0;
    let base = node.row * words;
    for (let w = 0; w < words; w++) {
      active[w] = bits[base + w]!;
      any |= active[w]!;
    }
    if (any === 0) return 0;
    let depth = 1;
    for (; depth < n; depth++) {
      const next = this.child(node, localHashes[depth]!);
      if (next === undefined) break;
      base = next.row * words;
      any = 0;
      for (let w = 0; w < words; w++) {
        const a = active[w]!;
        if (a === 0) continue;
        const keep = a & bits[base + w]!;
        if (keep !== a) this.emit(out, (a & ~keep) >>> 0, w, depth);
        active[w] = keep;
        any |= keep;
      }
      if (any === 0) return depth;
      node = next;
    }
    for (let w = 0; w < words; w++) {
      const a = active[w]!;
      if (a !== 0) this.emit(out, a >>> 0, w, depth);
    }
    return depth;
  }

  private emit(out: MatchBuffer, word: number, w: number, depth: number): void {
    while (word !== 0) {
      const low = word & -word;
      const i = out.count++;
      out.slots[i] = w * 32 + 31 - Math.clz32(low);
      out.depths[i] = depth;
      word = (word ^ low) >>> 0;
    }
  }

  /** Drop `node` if it holds nothing, then walk up while ancestors become empty. */
  pruneUp(start: RadixNode): void {
    let node: RadixNode | undefined = start;
    while (node !== undefined && node !== this.root && node.workerCount === 0 && !node.hasChildren) {
      const parent: RadixNode | undefined = node.parent;
      if (parent !== undefined) this.unlinkChild(parent, node);
      node.parent = undefined;
      node.linked = false;
      this.freeRows.push(node.row);
      this.liveNodes--;
      this.onDrop?.(node);
      node = parent;
    }
  }

  private unlinkChild(parent: RadixNode, node: RadixNode): void {
    if (parent.onlyChild === node) {
      parent.onlyChild = undefined;
      return;
    }
    const map = parent.children;
    if (map === undefined) return;
    map.delete(node.localHash);
    if (map.size === 1) {
      // Back to the single-child fast path.
      parent.onlyChild = map.values().next().value;
      parent.children = undefined;
    }
  }

  private markLinked(from: RadixNode): void {
    this.forEachDescendant(from, (n) => {
      n.linked = true;
    });
  }

  private growRows(): void {
    this.rowCapacity *= 2;
    const next = new Uint32Array(this.rowCapacity * this.words);
    next.set(this.bits);
    this.bits = next;
  }
}
