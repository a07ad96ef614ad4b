/**
 * What `runtime profile` measures, planned from the worker's limits (its model card): a sweep of
 * ISLs for prefill and a grid of context length × concurrency for decode. Pure: no I/O.
 *
 * Prefill ISLs stay within one step (≤ max batched tokens) so a measured TTFT is one prefill step,
 * which is what the perf model's `prefill` curve means. Decode points stop below the worker's KV
 * capacity (KV_FILL of it, so nothing is preempted), and each point's output length is long
 * enough that every stream is decoding together for a while after the staggered prefills (the
 * window ITL is read from; see measure.ts).
 */

export interface WorkerLimits {
  contextLength: number;
  kvBlockSize: number;
  totalKvBlocks: number;
  maxNumBatchedTokens: number;
}

export interface SweepOptions {
  /** Prefill ISLs; default: 128 · 2^k up to the limit, plus the limit. */
  isls?: number[];
  /** Decode context lengths (ISL of each stream); default: 256 · 4^k up to the context length. */
  contexts?: number[];
  /** Decode concurrencies; default 1, 8, 64, … plus the most that fit in the KV cache. */
  concurrencies?: number[];
  /** The most streams to run at once (the worker's --max-num-seqs); default 256. */
  maxConcurrency?: number;
  /** TTFT samples per ISL (the median is kept); default 3. */
  samples?: number;
  /** Fewer points: first and last ISL/context, concurrency 1 and the most that fit. */
  quick?: boolean;
}

export interface PrefillPoint {
  isl: number;
  samples: number;
}

export interface DecodePoint {
  contextLength: number;
  concurrency: number;
  /** Tokens each stream generates: the staggered prefill steps plus a steady decode window. */
  osl: number;
}

export interface SweepPlan {
  prefill: PrefillPoint[];
  decode: DecodePoint[];
}

/** Share of the KV blocks the largest decode point may fill at its end. */
export const KV_FILL = 0.9;
/** Decode steps every stream of a point spends decoding together (the measured window). */
const STEADY_STEPS = 24;
const QUICK_STEADY_STEPS = 12;

export function planSweep(limits: WorkerLimits, options: SweepOptions = {}): SweepPlan {
  const quick = options.quick ?? false;
  // Three even when quick: their median shrugs off one stalled request, where the median of two
  // is their mean (quick saves its time on the points, not the samples).
  const samples = options.samples ?? 3;
  const maxConcurrency = options.maxConcurrency ?? 256;
  const steady = quick ? QUICK_STEADY_STEPS : STEADY_STEPS;

  const islCap = Math.max(1, Math.min(limits.contextLength - 1, limits.maxNumBatchedTokens));
  let isls = options.isls ?? geometric(128, 2, islCap);
  isls = unique(isls.filter((x) => x >= 1 && x <= islCap));
  if (quick && options.isls === undefined) isls = ends(isls);

  // Room for the generated tokens: at least 64 below the context length.
  const ctxCap = Math.max(16, limits.contextLength - 64);
  let contexts = options.contexts ?? geometric(256, 4, ctxCap);
  contexts = unique(contexts.filter((x) => x >= 1 && x <= ctxCap));
  if (quick && options.contexts === undefined) contexts = ends(contexts);

  const osl = (c: number, ctx: number) => Math.ceil((c * ctx) / limits.maxNumBatchedTokens) + steady;
  // A point fits when its streams end inside 90 % of the KV blocks and within the context length.
  const fits = (c: number, ctx: number) =>
    ctx + osl(c, ctx) <= limits.contextLength && c * Math.ceil((ctx + osl(c, ctx)) / limits.kvBlockSize) <= KV_FILL * limits.totalKvBlocks;
  const decode: DecodePoint[] = [];
  for (const ctx of contexts) {
    let cMax = maxConcurrency;
    while (cMax > 1 && !fits(cMax, ctx)) cMax--;
    if (!fits(cMax, ctx)) continue; // not even one stream of this context fits
    let cs = options.concurrencies ?? [...geometric(1, 8, cMax, false), cMax];
    cs = unique(cs.filter((c) => c >= 1 && c <= cMax));
    if (quick && options.concurrencies === undefined) cs = ends(cs);
    for (const c of cs) decode.push({ contextLength: ctx, concurrency: c, osl: osl(c, ctx) });
  }
  return { prefill: isls.map((isl) => ({ isl, samples })), decode };
}

/** Requests the plan sends, for the progress bar. */
export function planSize(plan: SweepPlan): number {
  return plan.prefill.reduce((n, p) => n + p.samples, 0) + plan.decode.reduce((n, p) => n + p.concurrency, 0);
}

/** start · factor^k below `cap`, then `cap` itself unless the last point is within 25 % of it. */
function geometric(start: number, factor: number, cap: number, withCap = true): number[] {
  const out: number[] = [];
  for (let x = start; x < cap; x *= factor) out.push(x);
  if (withCap && (out.length === 0 || cap > out[out.length - 1]! * 1.25)) out.push(cap);
  return out;
}

function unique(xs: number[]): number[] {
  return [...new Set(xs.map((x) => Math.round(x)))].sort((a, b) => a - b);
}

function ends(xs: number[]): number[] {
  return xs.length <= 2 ? xs : [xs[0]!, xs[xs.length - 1]!];
}
