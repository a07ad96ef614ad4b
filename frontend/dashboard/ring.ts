/**
 * Fixed-capacity ring buffers: everything the dashboard keeps is bounded by one of these, so
 * memory does not grow with traffic or uptime.
 */

/** The last `capacity` items, oldest overwritten first. */
export class Ring<T> {
  private readonly items: (T | undefined)[];
  private next = 0;
  private count = 0;

  constructor(readonly capacity: number) {
    this.items = new Array(capacity);
  }

  push(item: T): void {
    this.items[this.next] = item;
    this.next = (this.next + 1) % this.capacity;
    if (this.count < this.capacity) this.count++;
  }

  get size(): number {
    return this.count;
  }

  /** Oldest first. */
  toArray(): T[] {
    const out: T[] = new Array(this.count);
    const start = (this.next - this.count + this.capacity) % this.capacity;
    for (let i = 0; i < this.count; i++) out[i] = this.items[(start + i) % this.capacity]!;
    return out;
  }
}

/** Timestamped samples (ms, value) in two typed arrays: no allocation per sample. */
export class SampleRing {
  private readonly times: Float64Array;
  private readonly values: Float64Array;
  private next = 0;
  private count = 0;

  constructor(readonly capacity: number) {
    this.times = new Float64Array(capacity);
    this.values = new Float64Array(capacity);
  }

  push(tMs: number, value: number): void {
    this.times[this.next] = tMs;
    this.values[this.next] = value;
    this.next = (this.next + 1) % this.capacity;
    if (this.count < this.capacity) this.count++;
  }

  /** Values with time ≥ sinceMs, in no particular order. */
  valuesSince(sinceMs: number): number[] {
    const out: number[] = [];
    for (let i = 0; i < this.count; i++) if (this.times[i]! >= sinceMs) out.push(this.values[i]!);
    return out;
  }

  /** Sum of values with time in (startMs, endMs]: consecutive windows count each sample once. */
  sumBetween(startMs: number, endMs: number): number {
    let sum = 0;
    for (let i = 0; i < this.count; i++) {
      const t = this.times[i]!;
      if (t > startMs && t <= endMs) sum += this.values[i]!;
    }
    return sum;
  }
}

/** Nearest-rank percentile of `values` (sorted in place); null when empty. */
export function percentile(sorted: readonly number[], q: number): number | null {
  if (sorted.length === 0) return null;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[rank]!;
}

export function percentiles(values: number[]): { p50: number | null; p90: number | null; p99: number | null } {
  values.sort((a, b) => a - b);
  return { p50: percentile(values, 0.5), p90: percentile(values, 0.9), p99: percentile(values, 0.99) };
}
