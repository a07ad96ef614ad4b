/**
 * What a step of t tokens costs, for the draft policy (pure: observations in, estimates out).
 *
 *   MeasuredStepCost  the native engine's: step times measured by the engine loop, kept per
 *                     token count (exact up to 16, then about 1.25x apart), each an exponential
 *                     average; between measured counts it interpolates, above the largest it
 *                     extends the slope of the two largest, and with one measurement it assumes
 *                     time proportional to tokens (pessimistic: drafts look expensive until a
 *                     probe measures a larger step).
 *   PerfModelStepCost the mocker's: its perf model's decode time plus the prefill curve's
 *                     marginal cost of the extra tokens (perf-model/speculative.ts).
 *
 * Worked example (MeasuredStepCost): measured 10 ms at 1 token and 11 ms at 2 -> 3 tokens: 12 ms
 * (the slope of the last two); measured only 10 ms at 1 -> 3 tokens: 30 ms.
 */
import { verifyStepMs, type PerfModel } from '../../perf-model/index.js';

export interface StepCostModel {
  /** Milliseconds of a step computing `tokens` tokens (decodes, drafts and prefill chunks). */
  stepMs(tokens: number): number;
}

const EXACT_UP_TO = 16;
const GROWTH = 1.25;
const MAX_TOKENS = 1 << 20;

/** The bucket of a token count: exact below 17, then geometric. */
export function costBucket(tokens: number): number {
  const t = Math.max(1, Math.round(tokens));
  if (t <= EXACT_UP_TO) return t;
  return EXACT_UP_TO + Math.ceil(Math.log(t / EXACT_UP_TO) / Math.log(GROWTH));
}

/** The token count a bucket stands for (its upper edge). */
function bucketTokens(bucket: number): number {
  if (bucket <= EXACT_UP_TO) return bucket;
  return Math.min(MAX_TOKENS, Math.floor(EXACT_UP_TO * GROWTH ** (bucket - EXACT_UP_TO)));
}

export class MeasuredStepCost implements StepCostModel {
  /** Weight of a new measurement in its bucket's average. */
  private readonly alpha: number;
  private readonly ms = new Map<number, number>();
  private sorted: number[] | undefined;

  constructor(options: { alpha?: number } = {}) {
    this.alpha = options.alpha ?? 0.2;
  }

  /** A step of `tokens` tokens took `ms` milliseconds. */
  observe(tokens: number, ms: number): void {
    if (!(tokens >= 1) || !(ms > 0) || !Number.isFinite(ms)) return;
    const b = costBucket(tokens);
    const old = this.ms.get(b);
    if (old === undefined) this.sorted = undefined;
    this.ms.set(b, old === undefined ? ms : old + this.alpha * (ms - old));
  }

  /** Whether a step of this many tokens has been measured (its bucket). */
  has(tokens: number): boolean {
    return this.ms.has(costBucket(tokens));
  }

  get numBuckets(): number {
    return this.ms.size;
  }

  stepMs(tokens: number): number {
    const buckets = (this.sorted ??= [...this.ms.keys()].sort((a, b) => a - b));
    if (buckets.length === 0) return Math.max(1, tokens);  // nothing measured: proportional, in arbitrary units
    const t = Math.max(1, tokens);
    const b = costBucket(t);
    const exact = this.ms.get(b);
    if (exact !== undefined) return exact;
    // Interpolate between the measured buckets around it, by token count.
    let lo = -1;
    for (let i = 0; i < buckets.length && buckets[i]! < b; i++) lo = i;
    const hi = lo + 1 < buckets.length ? lo + 1 : -1;
    if (lo >= 0 && hi >= 0) {
      const t0 = bucketTokens(buckets[lo]!), t1 = bucketTokens(buckets[hi]!);
      const m0 = this.ms.get(buckets[lo]!)!, m1 = this.ms.get(buckets[hi]!)!;
      return m0 + ((m1 - m0) * (t - t0)) / Math.max(1, t1 - t0);
    }
    if (lo < 0) {
      // Below every measurement: no cheaper than the smallest one measured.
      return this.ms.get(buckets[0]!)!;
    }
    // Above every measurement: the slope of the two largest, or proportional with one.
    const top = buckets[lo]!;
    const t1 = bucketTokens(top), m1 = this.ms.get(top)!;
    if (lo === 0) return (m1 * t) / t1;
    const prev = buckets[lo - 1]!;
    const t0 = bucketTokens(prev), m0 = this.ms.get(prev)!;
    const slope = Math.max(0, (m1 - m0) / Math.max(1, t1 - t0));
    return m1 + slope * (t - t1);
  }
}

/**
 * The mocker's cost: what its perf model charges a step of that shape (perf-model's
 * verifyStepMs: draft tokens at the prefill curve's margin). The step being planned is set
 * with `shape()` before the policy asks.
 */
export class PerfModelStepCost implements StepCostModel {
  private decodes = 1;
  private prefill = 0;
  private kvUsage = 0;

  constructor(private readonly model: PerfModel) {}

  /** The step being planned: its decoding sequences, prefill tokens and KV usage. */
  shape(numDecodes: number, prefillTokens: number, kvUsage: number): void {
    this.decodes = numDecodes;
    this.prefill = prefillTokens;
    this.kvUsage = kvUsage;
  }

  stepMs(tokens: number): number {
    const drafts = Math.max(0, tokens - this.decodes - this.prefill);
    return verifyStepMs(this.model, { prefillTokens: this.prefill, numDecodeSeqs: this.decodes, kvUsage: this.kvUsage }, drafts);
  }
}
