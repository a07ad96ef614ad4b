/**
 * What the scheduler takes and hands back. The plan is the engine's StepBatch plus the
 * bookkeeping the loop reports; outcomes are plain data the loop turns into token deltas.
 */
import type { FinishReason, LoadMetrics } from '../../proto/wire.js';
import type { SampledToken, StepBatch } from '../engines/engine.js';
import type { KvTierPolicy, OnboardCosts, OnboardSource } from '../block-manager/kv-tier-policy.js';
import type { Speculator } from '../speculative/speculator.js';

export interface SchedulerConfig {
  numBlocks: number;
  /** Tokens per KV block; default 16. */
  blockSize?: number;
  /** Token budget of one step (prefill chunks + decodes); default 8192. */
  maxNumBatchedTokens?: number;
  /** Most sequences running at once; default 256. */
  maxNumSeqs?: number;
  /** Longest sequence (prompt + output) accepted; default unlimited (the pool still bounds it). */
  maxModelLen?: number;
  /** Default true. */
  enablePrefixCaching?: boolean;
  /**
   * Leave a waiting sequence waiting while a running one computes its next uncached prefix
   * blocks, then admit it with those blocks as a prefix hit (see shared-prefill.ts). Default
   * true; needs prefix caching.
   */
  deferSharedPrefill?: boolean;
  /** Most steps one sequence may be deferred that way in its life; default 64. */
  maxDeferSteps?: number;
  /**
   * KV tiers below the pool (G2 host, G3 disk): evicted blocks are tracked for offload, and a
   * prefix that misses the pool is onboarded from them when copying beats recomputing.
   */
  kvTiers?: { policy: KvTierPolicy; costs: OnboardCosts };
  /**
   * Multi-LoRA (`--max-loras`): most distinct adapters among running sequences, so a step
   * never mixes more. Default unlimited. A waiting sequence of a further adapter waits; behind
   * it no new sequence of any adapter is admitted (base-model ones still are), so the running
   * adapters drain and it cannot starve.
   */
  maxLoras?: number;
  /**
   * Speculative decoding (workers/speculative/): decoding sequences verify the drafts the
   * engine proposed, as many as this speculator's policy says pay in each step.
   */
  speculative?: Speculator;
}

export const SCHEDULER_DEFAULTS = {
  blockSize: 16,
  maxNumBatchedTokens: 8192,
  maxNumSeqs: 256,
  deferSharedPrefill: true,
  maxDeferSteps: 64,
} as const;

export type AddSequenceResult =
  | { type: 'added'; seqId: number }
  | { type: 'rejected'; code: 'invalid_argument' | 'resource_exhausted'; message: string };

export interface SchedulePlan {
  batch: StepBatch;
  /** Tokens computed by this step (prefill chunks + one per decode). */
  numScheduledTokens: number;
  /** Prompt (or recompute) tokens in the step, the perf model's `t`. */
  numPrefillTokens: number;
  numDecodeSeqs: number;
  /** Speculative decoding: draft tokens the step verifies (in numScheduledTokens too). */
  numDraftTokens: number;
  /** Sequences preempted (blocks freed, back to waiting) while building this plan. */
  preemptedSeqIds: number[];
  /** Waiting sequences left waiting because a running one is computing their prefix. */
  deferredSeqIds: number[];
  /**
   * Sequences admitted this step whose leading KV must now be imported (remote prefill).
   * They are not in the batch; the caller pulls, then calls completeTransfer().
   */
  transfers: KvImportStart[];
  /**
   * Sequences admitted this step whose next prefix blocks come from the KV tiers. Like
   * transfers: not in the batch; the caller copies the sources in, then completeTransfer().
   */
  onboards: KvOnboardStart[];
}

/** A sequence whose blocks firstBlock.. are copied in from G2/G3 (sources[i] → localBlockIds[i]). */
export interface KvOnboardStart {
  seqId: number;
  localBlockIds: Int32Array;
  firstBlock: number;
  sources: OnboardSource[];
}

/** A remote-prefill sequence that got its blocks: import KV into them, then completeTransfer. */
export interface KvImportStart {
  seqId: number;
  requestId: string;
  /** Local block ids for the imported tokens (a copy), starting at block index firstBlock. */
  localBlockIds: Int32Array;
  /** Leading blocks already present from the local prefix cache: not imported. */
  firstBlock: number;
  /** Tokens whose KV the import covers in total (counted from position 0). */
  numTokens: number;
}

export type CompleteTransferResult = 'running' | 'recompute' | 'freed' | 'unknown';

export interface Usage {
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
}

export interface FinishedSequence {
  seqId: number;
  requestId: string;
  reason: FinishReason;
  usage: Usage;
}

/** One sampled token that now belongs to a sequence's output. */
export type SequenceOutput = SampledToken;

export interface StepOutcome {
  /** Sampled tokens in batch order (aborted sequences left out). */
  outputs: SequenceOutput[];
  /** Sequences that finished with this step, after their last output. */
  finished: FinishedSequence[];
}

/** LoadMetrics minus the fields only the worker process knows. */
export type SchedulerLoad = Omit<LoadMetrics, 'workerId' | 'timestampMs'>;
