/**
 * Predicted latency of one request on one worker, from the step-time model (perf-model/) and
 * the router's live view of that worker. Pure: numbers in, numbers out; no calibration here
 * (calibration.ts scales the result per worker).
 *
 * The worker runs continuous batching under a token budget B per step: every step carries one
 * token per decoding sequence (D of them) and up to B − D prompt tokens, and costs
 * `prefillMs(prompt tokens) + decodeMs(kvUsage, D)` (perf-model/perf-model.ts). So:
 *
 *   u        = uncached prompt tokens of this request (at least 1: the last token is computed);
 *              hits on a lower tier (tierHits) are not recomputed but cost their onboarding copy
 *   Q        = prompt tokens queued on the worker before this one (routed, first token not back)
 *   current  = the step running when the request arrives: if Q > 0 it is prefilling
 *              min(Q, B − D) of them, else it is a decode step (or nothing, when idle);
 *              RESIDUAL_STEP_FRACTION of it is left, on average
 *   ahead    = Q − current's prompt tokens: queued behind the running step, scheduled FCFS
 *              with this request
 *   TTFT     = RESIDUAL_STEP_FRACTION · step(current) + Σ steps over (ahead + u) in chunks of B − D
 *              + onboarding of tier hits + KV wait
 *   KV wait  = when the blocks booked there, plus what the running streams' outputs will add
 *              (mean output tokens per stream, in blocks), plus this request's new blocks exceed
 *              the pool, the request waits in the worker's queue for streams to end: the excess,
 *              as a share of the blocks the running streams can hold (at most the pool), times
 *              the time a stream takes to finish (mean output tokens × decode step), streams'
 *              remaining lives taken as spread evenly over it. The outputs count because the
 *              router books prompts: a pool its prompts just fit preempts as the streams decode
 *              (bench/latency-routing-virtual.ts: fast workers drawn to 8 prompt prefixes of 120
 *              blocks in a 1024-block pool were predicted a few ms of wait and measured 300+)
 *   ITL      = decodeMs(kvUsage after admission, D + 1): the step time once this request decodes
 *   ITL impact = (D + 1) · ITL − D · decodeMs(kvUsage, D): per-token milliseconds this placement
 *              adds to the worker's streams, its own stream included (D = 0: its own ITL)
 *
 * Worked example (Dynamo's polynomial, B = 8192): an idle worker, 1024-token prompt, nothing
 * cached → TTFT = prefillMs(1024) = 32.5 ms; with 4 sequences decoding at 25% KV use, ¾ of
 * the running decode step (17.6 ms) is left and the prefill step carries the 4 decode tokens:
 * 13.2 + 32.5 + 17.6 = 63.3 ms.
 */
import type { PerfModel } from '../perf-model/index.js';

/** What the router knows about one worker now. */
export interface WorkerLatencyView {
  /** Prompt tokens routed there whose first token has not come back (or its report, if larger). */
  queuedPrefillTokens: number;
  /** Sequences running there: each adds a decode token to every step. */
  runningSequences: number;
  /** KV blocks in use / total, 0..1. */
  kvUsage: number;
  /** KV pool size in blocks (model card), to turn this request's blocks into KV use; unknown: no change. */
  totalBlocks?: number;
  /** KV blocks held or booked there (running and queued sequences); with `totalBlocks`, the KV wait. */
  usedBlocks?: number;
}

/** A cache hit on a lower KV tier (host memory, disk): not recomputed, but copied up first. */
export interface TierHit {
  tier: string;
  tokens: number;
  /** This worker's own onboard time per token from that tier (its report), over `onboardMsPerToken`. */
  msPerToken?: number;
}

/** What the router knows about the request, as seen from one worker. */
export interface RequestLatencyView {
  promptTokens: number;
  /** Leading prompt tokens the worker holds in its engine pool (G1): free. */
  cachedTokens: number;
  /** Further leading tokens the worker holds on lower tiers, after `cachedTokens`. */
  tierHits?: readonly TierHit[];
}

export interface LatencyEstimatorOptions {
  /** Token budget of one engine step (model card `maxNumBatchedTokens`; the scheduler's default 8192). */
  maxBatchedTokens: number;
  blockSize: number;
  /**
   * Milliseconds to onboard one token per lower tier. A tier not listed is treated as a miss
   * (recomputed), the worst case.
   */
  onboardMsPerToken?: Readonly<Record<string, number>>;
  /** Mean output tokens of a stream (the latency cost learns it from finished requests): how long a KV-full worker takes to free blocks. */
  meanOutputTokens?: number;
}

export const DEFAULT_LATENCY_ESTIMATOR_OPTIONS: LatencyEstimatorOptions = { maxBatchedTokens: 8192, blockSize: 16, meanOutputTokens: 128 };

/**
 * The share of the running step still ahead of a request that arrives during it. Half, if every
 * step were as long as every other; but an arrival is likelier to land in a long (prefill) step
 * than in a short (decode) one (the inspection paradox: E[S²] / 2E[S]), so more than half. 0.75
 * is what the mocker's own model measures across ISL 128–2048 and light to saturating load
 * (test/router/latency-estimator.test.ts): predictions within −6%…+14% of measured TTFT there,
 * where ½ read 25% low near saturation and a whole step 25% high.
 */
export const RESIDUAL_STEP_FRACTION = 0.75;

export interface LatencyEstimate {
  /** Time to first token on this worker, ms (uncalibrated). */
  ttftMs: number;
  /** Per-token latency on this worker once the request decodes, ms (uncalibrated). */
  itlMs: number;
  /** Per-token ms this placement adds across the worker's streams, its own included. */
  itlImpactMs: number;
  /** Prompt tokens this request computes there. */
  prefillTokens: number;
  /** Part of `ttftMs` spent waiting for KV blocks to free (0 while the pool has room). */
  kvWaitMs: number;
}

export function estimateLatency(model: PerfModel, worker: WorkerLatencyView, req: RequestLatencyView, options: LatencyEstimatorOptions = DEFAULT_LATENCY_ESTIMATOR_OPTIONS): LatencyEstimate {
  const d = Math.max(0, Math.floor(worker.runningSequences));
  const kv = clamp01(worker.kvUsage);
  const chunk = Math.max(1, options.maxBatchedTokens - d);
  const decodeNow = d > 0 ? model.decodeMs(kv, d) : 0;

  let onboardMs = 0;
  let tierTokens = 0;
  for (const hit of req.tierHits ?? []) {
    const perToken = hit.msPerToken ?? options.onboardMsPerToken?.[hit.tier];
    if (perToken === undefined || hit.tokens <= 0) continue;
    onboardMs += perToken * hit.tokens;
    tierTokens += hit.tokens;
  }
  const prefillTokens = Math.max(1, req.promptTokens - Math.max(0, req.cachedTokens) - tierTokens);

  const queued = Math.max(0, worker.queuedPrefillTokens);
  const current = Math.min(queued, chunk);
  const currentStepMs = current > 0 ? model.prefillMs(current) + decodeNow : decodeNow;
  const requestBlocks = Math.ceil(req.promptTokens / options.blockSize);
  const kvWaitMs = kvWait(model, worker, requestBlocks - Math.floor((req.promptTokens - prefillTokens) / options.blockSize) + 1, kv, d, options);
  const ttftMs = RESIDUAL_STEP_FRACTION * currentStepMs + stepsMs(model, queued - current + prefillTokens, chunk, decodeNow) + onboardMs + kvWaitMs;

  const kvAfter = worker.totalBlocks !== undefined && worker.totalBlocks > 0 ? clamp01(kv + requestBlocks / worker.totalBlocks) : kv;
  const itlMs = model.decodeMs(kvAfter, d + 1);
  return { ttftMs, itlMs, itlImpactMs: (d + 1) * itlMs - d * decodeNow, prefillTokens, kvWaitMs };
}

/** Waiting for `newBlocks` to fit in the worker's pool (see the header). */
function kvWait(model: PerfModel, worker: WorkerLatencyView, newBlocks: number, kv: number, d: number, options: LatencyEstimatorOptions): number {
  const total = worker.totalBlocks;
  const used = worker.usedBlocks;
  if (total === undefined || used === undefined || total <= 0 || used <= 0) return 0;
  const outputBlocks = d * Math.ceil((options.meanOutputTokens ?? 128) / options.blockSize);
  const excess = used + outputBlocks + newBlocks - total;
  if (excess <= 0) return 0;
  const streamMs = (options.meanOutputTokens ?? 128) * model.decodeMs(kv, Math.max(1, d));
  return (excess / Math.min(used, total)) * streamMs;
}

/** Milliseconds of the steps that compute `tokens` prompt tokens, `chunk` per step, each also decoding. */
function stepsMs(model: PerfModel, tokens: number, chunk: number, decodeMs: number): number {
  const full = Math.floor(tokens / chunk);
  const rest = tokens - full * chunk;
  let ms = full * (model.prefillMs(chunk) + decodeMs);
  if (rest > 0) ms += model.prefillMs(rest) + decodeMs;
  return ms;
}

function clamp01(v: number): number {
  return v < 0 ? 0 : v > 1 ? 1 : v;
}
