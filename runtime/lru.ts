/**
 * The one LRU map of the code base: a Map whose insertion order is its recency order, bounded
 * in entries and, optionally, in a weight (bytes) that `weigh` gives each value. Reading with
 * `get` refreshes an entry; `peek` does not. Eviction drops the least recently used entries
 * until both bounds hold again; a value heavier than the whole weight bound is not kept.
 */
export interface LruOptions<V> {
  /** Most entries kept (default: unbounded). */
  maxEntries?: number;
  /** Most total weight kept (default: unbounded); needs `weigh`. */
  maxWeight?: number;
  /** A value's weight, read once when it is set (e.g. its bytes). Default 0. */
  weigh?: (value: V) => number;
  /** Called for each entry evicted by a bound (not for delete/clear/replacement). */
  onEvict?: (key: unknown, value: V) => void;
}

export class LruMap<K, V> {
  private readonly map = new Map<K, { value: V; weight: number }>();
  private total = 0;
  readonly maxEntries: number;
  readonly maxWeight: number;

  constructor(private readonly options: LruOptions<V> = {}) {
    this.maxEntries = options.maxEntries ?? Infinity;
    this.maxWeight = options.maxWeight ?? Infinity;
  }

  get size(): number {
    return this.map.size;
  }

  /** Total weight of the entries kept. */
  get weight(): number {
    return this.total;
  }

  has(key: K): boolean {
    return this.map.has(key);
  }

  /** The value, made the most recently used. */
  get(key: K): V | undefined {
    const entry = this.map.get(key);
    if (entry === undefined) return undefined;
    this.map.delete(key);
    this.map.set(key, entry);
    return entry.value;
  }

  /** The value, recency unchanged. */
  peek(key: K): V | undefined {
    return this.map.get(key)?.value;
  }

  /** Insert or replace as the most recently used, then evict down to the bounds. */
  set(key: K, value: V): this {
    this.delete(key);
    const weight = this.options.weigh?.(value) ?? 0;
    this.map.set(key, { value, weight });
    this.total += weight;
    this.evict();
    return this;
  }

  delete(key: K): boolean {
    const entry = this.map.get(key);
    if (entry === undefined) return false;
    this.map.delete(key);
    this.total -= entry.weight;
    return true;
  }

  clear(): void {
    this.map.clear();
    this.total = 0;
  }

  keys(): IterableIterator<K> {
    return this.map.keys();
  }

  private evict(): void {
    for (const [key, entry] of this.map) {
      if (this.map.size <= 1 || (this.map.size <= this.maxEntries && this.total <= this.maxWeight)) return;
      this.map.delete(key);
      this.total -= entry.weight;
      this.options.onEvict?.(key, entry.value);
    }
  }
}
