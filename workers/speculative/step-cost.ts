/**
 * What a step of t tokens costs, for the draft policy (pure: observations in, estimates out).
 *
 *   MeasuredStepCost  the native engine's: step times measured by the engine loop, kept per
 *                     token count (exact up to 16, then about 1.25x apart), each the median of
 *                     its last 9 measurements (a busy machine's slow step moves it little), used
 *                     once it has 3, and made non-decreasing in tokens (noise never makes more
 *                     tokens look free); between measured counts it interpolates, above the
 *                     largest it extends the slope of the two largest, and with one it assumes
 *                     time proportional to tokens (pessimistic: drafts look expensive until
 *                     probes measure a larger step).
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
  /** Measurements a bucket keeps (its estimate is their median: a slow step of a busy machine moves it little). */
  private readonly window: number;
  /** Measurements a bucket needs before it counts as measured. */
  private readonly minSamples: number;
  private readonly samples = new Map<number, number[]>();
  private readonly next = new Map<number, number>();
  private estimates: Map<number, number> | undefined;
  private sorted: number[] | undefined;

  constructor(options: { window?: number; minSamples?: number } = {}) {
    this.window = options.window ?? 9;
    this.minSamples = options.minSamples ?? 3;
  }

  /** A step of `tokens` tokens took `ms` milliseconds. */
  observe(tokens: number, ms: number): void {
    if (!(tokens >= 1) || !(ms > 0) || !Number.isFinite(ms)) return;
    const b = costBucket(tokens);
    let ring = this.samples.get(b);
    if (ring === undefined) this.samples.set(b, (ring = []));
    if (ring.length < this.window) ring.push(ms);
    else {
      const at = this.next.get(b) ?? 0;
      ring[at] = ms;
      this.next.set(b, (at + 1) % this.window);
    }
    this.estimates = undefined;
  }

  /** Whether a step of this many tokens has been measured enough (its bucket). */
  has(tokens: number): boolean {
    return (this.samples.get(costBucket(tokens))?.length ?? 0) >= this.minSamples;
  }

  get numBuckets(): number {
    return this.measured().size;
  }

  stepMs(tokens: number): number {
    const est = this.measured();
    const buckets = this.sorted!;
    if (buckets.length === 0) return Math.max(1, tokens);  // nothing measured: proportional, in arbitrary units
    const t = Math.max(1, tokens);
    const b = costBucket(t);
    // More tokens never cost less: below the largest measured bucket under t, never cheaper than it.
    let lo = -1;
    for (let i = 0; i < buckets.length && buckets[i]! <= b; i++) lo = i;
    const floor = lo >= 0 ? est.get(buckets[lo]!)! : 0;
    const exact = est.get(b);
    if (exact !== undefined) return Math.max(exact, floor);
    const hi = lo + 1 < buckets.length ? lo + 1 : -1;
    if (lo >= 0 && hi >= 0) {
      // Interpolate between the measured buckets around it, by token count.
      const t0 = bucketTokens(buckets[lo]!), t1 = bucketTokens(buckets[hi]!);
      const m0 = floor, m1 = Math.max(est.get(buckets[hi]!)!, floor);
      return m0 + ((m1 - m0) * (t - t0)) / Math.max(1, t1 - t0);
    }
    if (lo < 0) return est.get(buckets[0]!)!;  // below every measurement: no cheaper than the smallest
    // Above every measurement: the slope of the two largest, or proportional with one.
    const top = buckets[lo]!;
    const t1 = bucketTokens(top);
    if (lo === 0) return (floor * t) / t1;
    const prev = buckets[lo - 1]!;
    const slope = Math.max(0, (floor - est.get(prev)!) / Math.max(1, t1 - bucketTokens(prev)));
    return floor + slope * (t - t1);
  }

  /** Median per bucket with enough measurements, made non-decreasing in tokens. */
  private measured(): Map<number, number> {
    if (this.estimates !== undefined) return this.estimates;
    const keys = [...this.samples.keys()].filter((b) => this.samples.get(b)!.length >= this.minSamples).sort((a, b) => a - b);
    const est = new Map<number, number>();
    let running = 0;
    for (const b of keys) {
      const xs = [...this.samples.get(b)!].sort((x, y) => x - y);
      const m = xs.length % 2 ? xs[(xs.length - 1) / 2]! : (xs[xs.length / 2 - 1]! + xs[xs.length / 2]!) / 2;
      running = Math.max(running, m);
      est.set(b, running);
    }
    this.estimates = est;
    this.sorted = keys;
    return est;
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
