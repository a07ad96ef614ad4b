/**
 * The mocker's step timing (pure). A step's simulated time comes from its shape:
 *
 *   stepMs = (t > 0 ? prefillMs(t) : 0) + (d > 0 ? decodeMs(p, d) : 0)
 *
 * t = prompt (or recompute) tokens computed in the step, d = decoding sequences, p = fraction
 * of KV blocks in use. A mixed step pays both: the prefill chunk and the decode tokens share one
 * forward pass, but the fits were measured on pure steps, and adding them is the conservative
 * (slower) reading that keeps chunked prefill from looking free.
 *
 * Default: Dynamo's published polynomial fit.
 *   prefillMs(t) = 4.209989e-7·t² + 1.518344e-2·t + 16.50142      (t = 1000 → 32.106 ms)
 *   decodeMs(p)  = max(1, −25.74·p² + 54.01·p + 5.74)              (p = 0.5 → 26.31 ms)
 * Profile mode: measured points, linearly interpolated (see InterpolatedPerfModel).
 */
import { ConfigError } from '../../../runtime/errors.js';

export interface StepShape {
  prefillTokens: number;
  numDecodeSeqs: number;
  /** KV blocks in use / total, 0..1. */
  kvUsage: number;
}

export interface PerfModel {
  /** Milliseconds to prefill `tokens` new tokens in one step. */
  prefillMs(tokens: number): number;
  /** Milliseconds of one decode step at KV usage `kvUsage` with `batchSize` sequences. */
  decodeMs(kvUsage: number, batchSize: number): number;
}

export const DECODE_FLOOR_MS = 1;

export class PolynomialPerfModel implements PerfModel {
  constructor(
    readonly prefill: readonly [a2: number, a1: number, a0: number] = [4.209989e-7, 1.518344e-2, 16.50142],
    readonly decode: readonly [b2: number, b1: number, b0: number] = [-25.74, 54.01, 5.74],
  ) {}

  prefillMs(tokens: number): number {
    const [a2, a1, a0] = this.prefill;
    return a2 * tokens * tokens + a1 * tokens + a0;
  }

  decodeMs(kvUsage: number, _batchSize: number): number {
    const [b2, b1, b0] = this.decode;
    const p = clamp01(kvUsage);
    return Math.max(DECODE_FLOOR_MS, b2 * p * p + b1 * p + b0);
  }
}

/** Simulated milliseconds of one step, before the speedup ratio. */
export function stepTimeMs(model: PerfModel, shape: StepShape): number {
  let ms = 0;
  if (shape.prefillTokens > 0) ms += model.prefillMs(shape.prefillTokens);
  if (shape.numDecodeSeqs > 0) ms += model.decodeMs(shape.kvUsage, shape.numDecodeSeqs);
  return ms;
}

/**
 * A profile file's content. Points need not be sorted.
 *   { "prefill": { "tokens": [128, 1024, 4096], "ms": [18.4, 33.0, 95.1] },
 *     "decode":  { "kvUsage": [0, 0.5, 1], "ms": [5.7, 26.3, 34.0] } }
 * or a decode grid over KV usage and batch size (ms[i][j] at kvUsage[i], batchSize[j]):
 *     "decode":  { "kvUsage": [0, 1], "batchSize": [1, 64], "ms": [[5, 9], [20, 34]] }
 */
export interface PerfProfile {
  prefill: { tokens: number[]; ms: number[] };
  decode: { kvUsage: number[]; ms: number[] } | { kvUsage: number[]; batchSize: number[]; ms: number[][] };
}

/**
 * Linear interpolation of measured points. Decode values are clamped at the measured range
 * (KV usage is bounded anyway); prefill extends the last segment past the largest measured
 * prompt, since time keeps growing with tokens.
 */
export class InterpolatedPerfModel implements PerfModel {
  private readonly prefillX: number[];
  private readonly prefillY: number[];
  private readonly kv: number[];
  private readonly batch: number[] | undefined;
  /** Rows per kv point: one value (1-D) or one per batch size (grid). */
  private readonly decodeRows: number[][];

  constructor(profile: PerfProfile) {
    const pre = sortedPairs(profile.prefill.tokens, profile.prefill.ms, 'prefill');
    this.prefillX = pre.x;
    this.prefillY = pre.y;
    const d = profile.decode;
    if ('batchSize' in d) {
      if (d.ms.length !== d.kvUsage.length || d.ms.some((row) => row.length !== d.batchSize.length)) {
        throw new ConfigError('perf profile: decode.ms must be a kvUsage × batchSize grid');
      }
      const kvOrder = argsort(d.kvUsage);
      const bOrder = argsort(d.batchSize);
      this.kv = kvOrder.map((i) => d.kvUsage[i]!);
      this.batch = bOrder.map((j) => d.batchSize[j]!);
      this.decodeRows = kvOrder.map((i) => bOrder.map((j) => d.ms[i]![j]!));
    } else {
      const s = sortedPairs(d.kvUsage, d.ms, 'decode');
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

/** Validates a parsed profile (from JSON) into a model; ConfigError on a bad shape. */
export function perfModelFromProfile(raw: unknown): InterpolatedPerfModel {
  const p = raw as Partial<PerfProfile> | null;
  if (p === null || typeof p !== 'object' || !p.prefill || !p.decode) {
    throw new ConfigError('perf profile: needs "prefill" and "decode" sections');
  }
  return new InterpolatedPerfModel(p as PerfProfile);
}

function sortedPairs(x: unknown, y: unknown, what: string): { x: number[]; y: number[] } {
  if (!Array.isArray(x) || !Array.isArray(y) || x.length !== y.length || x.length === 0) {
    throw new ConfigError(`perf profile: ${what} needs two equal, non-empty arrays of points`);
  }
  if (![...x, ...y].every((v) => typeof v === 'number' && Number.isFinite(v))) {
    throw new ConfigError(`perf profile: ${what} points must be finite numbers`);
  }
  const order = argsort(x as number[]);
  return { x: order.map((i) => (x as number[])[i]!), y: order.map((i) => (y as number[])[i]!) };
}

function argsort(values: number[]): number[] {
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

function clamp01(v: number): number {
  return v < 0 ? 0 : v > 1 ? 1 : v;
}
