/**
 * The free list: a doubly linked list over block ids in typed arrays, so taking a cached block
 * back out of the middle (a prefix hit on a freed block) is O(1) and nothing allocates.
 * The head is evicted first. Cached blocks are pushed at the tail (least recently used first
 * out); blocks holding nothing reusable are pushed at the head so they are spent before any
 * cached block.
 */
const NONE = -1;

export class FreeBlockQueue {
  private readonly prev: Int32Array;
  private readonly next: Int32Array;
  private readonly member: Uint8Array;
  private head = NONE;
  private tail = NONE;
  private count = 0;

  /** Starts with every block free, in id order. */
  constructor(numBlocks: number) {
    this.prev = new Int32Array(numBlocks).fill(NONE);
    this.next = new Int32Array(numBlocks).fill(NONE);
    this.member = new Uint8Array(numBlocks);
    for (let b = 0; b < numBlocks; b++) this.pushTail(b);
  }

  get size(): number {
    return this.count;
  }

  has(blockId: number): boolean {
    return this.member[blockId] === 1;
  }

  /** Oldest block, or undefined when the queue is empty. */
  popHead(): number | undefined {
    if (this.head === NONE) return undefined;
    const b = this.head;
    this.remove(b);
    return b;
  }

  pushTail(blockId: number): void {
    this.prev[blockId] = this.tail;
    this.next[blockId] = NONE;
    if (this.tail === NONE) this.head = blockId;
    else this.next[this.tail] = blockId;
    this.tail = blockId;
    this.member[blockId] = 1;
    this.count++;
  }

  pushHead(blockId: number): void {
    this.next[blockId] = this.head;
    this.prev[blockId] = NONE;
    if (this.head === NONE) this.tail = blockId;
    else this.prev[this.head] = blockId;
    this.head = blockId;
    this.member[blockId] = 1;
    this.count++;
  }

  remove(blockId: number): void {
    const p = this.prev[blockId]!;
    const n = this.next[blockId]!;
    if (p === NONE) this.head = n;
    else this.next[p] = n;
    if (n === NONE) this.tail = p;
    else this.prev[n] = p;
    this.prev[blockId] = NONE;
    this.next[blockId] = NONE;
    this.member[blockId] = 0;
    this.count--;
  }

  /** Block ids from head (next evicted) to tail; for tests and debugging. */
  toArray(): number[] {
    const out: number[] = [];
    for (let b = this.head; b !== NONE; b = this.next[b]!) out.push(b);
    return out;
  }
}
