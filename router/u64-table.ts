/**
 * `KeyTable`: an open-addressing hash map from a key (a: i32, hi: u32, lo: u32) to an i32 value,
 * stored inline in one Int32Array (16 bytes a slot: key and value share a cache line). The
 * radix indexer keys sequence hashes as (0, hash) and tree edges as (parent node, local hash).
 * A u64 is passed as an `Int32Array` and an offset of its [hi, lo] pair: random u32 halves are
 * mostly outside V8's small-integer range, and passing them as numbers through a call that is
 * not inlined boxes each one in a fresh heap number (that was a third of the apply time in GC).
 *
 * Why not `Map<string, node>`: every stored block cost a lookup and an insert on a fresh
 * 20-character string (hashing it, comparing through pointers to heap strings) plus the Map's
 * own entry objects for the GC to trace. Here a probe is one cache line and nothing is
 * allocated per entry. Linear probing with backward-shift deletion (no tombstones), load ≤ 1/2.
 */

// A slot's value word holds value + 1, so a fresh (zeroed) array is all empty slots: growing
// needs no fill pass over the new array.
const EMPTY = 0;
const STRIDE = 4; // a, hi, lo, value + 1

export class KeyTable {
  private slots: Int32Array;
  private mask: number;
  private count = 0;

  constructor(initialCapacity = 1024) {
    let cap = 16;
    while (cap < initialCapacity * 2) cap *= 2;
    this.slots = new Int32Array(cap * STRIDE);
    this.mask = cap - 1;
  }

  get size(): number {
    return this.count;
  }

  /** The value for the key, or -1 when absent (values are ≥ 0). */
  get(a: number, key: Int32Array, at: number): number {
    const s = this.slots;
    const mask = this.mask;
    const hi = key[at]!;
    const lo = key[at + 1]!;
    for (let i = slotOf(a, hi, lo, mask); ; i = (i + 1) & mask) {
      const at = i * STRIDE;
      const v = s[at + 3]!;
      if (v === EMPTY) return -1;
      if (s[at + 2] === lo && s[at + 1] === hi && s[at] === a) return v - 1;
    }
  }

  /** Insert or overwrite; `value` ≥ 0. */
  set(a: number, key: Int32Array, at: number, value: number): void {
    if ((this.count + 1) * 2 > this.mask + 1) this.grow();
    this.insert(a, key[at]!, key[at + 1]!, value);
  }

  private insert(a: number, hi: number, lo: number, value: number): void {
    const s = this.slots;
    const mask = this.mask;
    for (let i = slotOf(a, hi, lo, mask); ; i = (i + 1) & mask) {
      const at = i * STRIDE;
      if (s[at + 3] === EMPTY) {
        s[at] = a;
        s[at + 1] = hi;
        s[at + 2] = lo;
        s[at + 3] = value + 1;
        this.count++;
        return;
      }
      if (s[at + 2] === lo && s[at + 1] === hi && s[at] === a) {
        s[at + 3] = value + 1;
        return;
      }
    }
  }

  /** Remove the key; true when it was present. */
  delete(a: number, key: Int32Array, at: number): boolean {
    const s = this.slots;
    const mask = this.mask;
    const hi = key[at]!;
    const lo = key[at + 1]!;
    let i = slotOf(a, hi, lo, mask);
    for (; ; i = (i + 1) & mask) {
      const at = i * STRIDE;
      if (s[at + 3] === EMPTY) return false;
      if (s[at + 2] === lo && s[at + 1] === hi && s[at] === a) break;
    }
    // Backward shift: pull later entries of the run into the hole unless they would move
    // before their home slot.
    let hole = i;
    for (let j = (i + 1) & mask; ; j = (j + 1) & mask) {
      const at = j * STRIDE;
      if (s[at + 3] === EMPTY) break;
      const home = slotOf(s[at]!, s[at + 1]!, s[at + 2]!, mask);
      if (((j - home) & mask) >= ((j - hole) & mask)) {
        s.copyWithin(hole * STRIDE, at, at + STRIDE);
        hole = j;
      }
    }
    s[hole * STRIDE + 3] = EMPTY;
    this.count--;
    return true;
  }

  clear(): void {
    this.slots.fill(0);
    this.count = 0;
  }

  /** Bytes held by the slot array. */
  get bytes(): number {
    return this.slots.byteLength;
  }

  private grow(): void {
    const old = this.slots;
    const cap = (this.mask + 1) * 2;
    const s = new Int32Array(cap * STRIDE);
    const mask = cap - 1;
    // Keys are distinct: each goes to the first empty slot of its run, no comparisons.
    for (let from = 0; from < old.length; from += STRIDE) {
      if (old[from + 3] === EMPTY) continue;
      let i = slotOf(old[from]!, old[from + 1]!, old[from + 2]!, mask);
      while (s[i * STRIDE + 3] !== EMPTY) i = (i + 1) & mask;
      const to = i * STRIDE;
      s[to] = old[from]!;
      s[to + 1] = old[from + 1]!;
      s[to + 2] = old[from + 2]!;
      s[to + 3] = old[from + 3]!;
    }
    this.slots = s;
    this.mask = mask;
  }
}

/** Keys are XXH3 outputs, but tests and bad peers send small or structured ones: mix anyway. */
function slotOf(a: number, hi: number, lo: number, mask: number): number {
  let h = Math.imul(lo ^ Math.imul(hi, 0x9e3779b1) ^ Math.imul(a, 0x85ebca77), 0xc2b2ae3d);
  h ^= h >>> 15;
  return h & mask;
}
