/**
 * Linear interpolation of measured points (a profile; schema in profile.ts and README.md).
 *
 * Outside the measured range: below the smallest point every curve holds the first value;
 * above the largest, decode (KV usage, batch size) holds the last value, while prefill extends
 * its last segment, since prefill time keeps growing with tokens. A decode grid over KV usage ×
 * batch size is bilinear.
 */
import { clamp01, DECODE_FLOOR_MS, type PerfModel } from './perf-model.js';
import type { PerfProfile } from './profile.js';

export class InterpolatedPerfModel implements PerfModel {
  private readonly prefillX: number[];
  private readonly prefillY: number[];
  private readonly kv: number[];
  private readonly batch: number[] | undefined;
  /** Rows per kv point: one value (1-D) or one per batch size (grid). */
  private readonly decodeRows: number[][];

  /** `profile` must be valid (parsePerfProfile checks a parsed file). */
  constructor(profile: PerfProfile) {
    const pre = sortedPairs(profile.prefill.tokens, profile.prefill.ms);
    this.prefillX = pre.x;
    this.prefillY = pre.y;
    const d = profile.decode;
    if ('batchSize' in d) {
      const kvOrder = argsort(d.kvUsage);
      const bOrder = argsort(d.batchSize);
      this.kv = kvOrder.map((i) => d.kvUsage[i]!);
      this.batch = bOrder.map((j) => d.batchSize[j]!);
      this.decodeRows = kvOrder.map((i) => bOrder.map((j) => d.ms[i]![j]!));
    } else {
      const s = sortedPairs(d.kvUsage, d.ms);
      this.kv = s.x;
      this.batch = undefined;
      this.decodeRows = s.y.map((v) => [v]);
    }
  }

  prefillMs(tokens: number): number {
    return Math.max(0, interp(this.prefillX, this.prefillY, tokens, true));
  }

  decodeMs(kvUsage: number, batchSize: number): number {
    const col = (row: number[]): number =>
      this.batch === undefined ? row[0]! : interp(this.batch, row, batchSize, false);
    const values = this.decodeRows.map(col);
    return Math.max(DECODE_FLOOR_MS, interp(this.kv, values, clamp01(kvUsage), false));
  }
}

function sortedPairs(x: readonly number[], y: readonly number[]): { x: number[]; y: number[] } {
  const order = argsort(x);
  return { x: order.map((i) => x[i]!), y: order.map((i) => y[i]!) };
}

function argsort(values: readonly number[]): number[] {
  return values.map((_, i) => i).sort((a, b) => values[a]! - values[b]!);
}

/** Piecewise-linear y(x) over sorted xs; clamps below, clamps or extrapolates above. */
export function interp(xs: readonly number[], ys: readonly number[], x: number, extrapolateHigh: boolean): number {
  const n = xs.length;
  if (n === 1 || x <= xs[0]!) return ys[0]!;
  if (x >= xs[n - 1]!) {
    if (!extrapolateHigh) return ys[n - 1]!;
    const x0 = xs[n - 2]!;
    const x1 = xs[n - 1]!;
    if (x1 === x0) return ys[n - 1]!;
    return ys[n - 1]! + ((ys[n - 1]! - ys[n - 2]!) / (x1 - x0)) * (x - x1);
  }
  let lo = 0;
  let hi = n - 1;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (xs[mid]! <= x) lo = mid;
    else hi = mid;
  }
  const span = xs[hi]! - xs[lo]!;
  return span === 0 ? ys[lo]! : ys[lo]! + ((ys[hi]! - ys[lo]!) * (x - xs[lo]!)) / span;
}
