/**
 * One request-state model for the worker: a Sequence carries counters and everything else is
 * derived. Prefill is simply "computed tokens catching up with all tokens", so chunked prefill
 * (several steps to catch up) and preemption by recompute (reset computed to 0) need no extra
 * states.
 *
 *   tokens:   [ prompt ........................ | outputs ...... ]
 *   computed: [ KV in cache ........ )            numComputedTokens
 *   cached:   [ prefix hit ... )                  numCachedTokens (first admission)
 */
import type { FinishReason, SamplingOptions, StopOptions } from '../proto/wire.js';

export const SEQUENCE_STATUS = {
  waiting: 'waiting',
  running: 'running',
  /** Admitted with blocks, waiting for its leading KV to arrive from a prefill worker. */
  transferring: 'transferring',
  finished: 'finished',
} as const;
export type SequenceStatus = (typeof SEQUENCE_STATUS)[keyof typeof SEQUENCE_STATUS];

export interface SequenceInit {
  seqId: number;
  requestId: string;
  promptTokenIds: ArrayLike<number>;
  sampling: SamplingOptions;
  stop: StopOptions;
  /** Seed source for the engine's sampling (the mocker's deterministic tokens). */
  requestSeed: number;
  logprobs?: number;
  /** Keep the blocks after finishing (prefill-only hand-off) until the owner releases them. */
  pinOnFinish?: boolean;
  /**
   * Trailing promptTokenIds that were generated before (migration, or the first token of a
   * remote prefill): they count as output for penalties and positions, not for this request's
   * stop limits or usage.
   */
  numPriorOutputTokens?: number;
  /** The first N tokens' KV will be imported from a prefill worker instead of computed. */
  numRemoteTokens?: number;
  /** Multi-LoRA: the adapter's lora_id (router/hashing.ts loraIdOf); its blocks are keyed by it. */
  loraId?: number;
  /** Multi-LoRA: the engine slot holding the adapter (engines that batch adapters). */
  loraSlot?: number;
}

export class Sequence {
  readonly seqId: number;
  readonly requestId: string;
  readonly sampling: SamplingOptions;
  readonly stop: StopOptions;
  readonly requestSeed: number;
  readonly logprobs: number | undefined;
  readonly pinOnFinish: boolean;
  readonly numPromptTokens: number;
  readonly numPriorOutputTokens: number;
  /** Multi-LoRA: the adapter's lora_id, undefined for the base model. */
  readonly loraId: number | undefined;
  readonly loraSlot: number | undefined;
  /** Leading tokens whose KV comes from a remote prefill; 0 once imported or given up. */
  numRemoteTokens: number;
  /** Aborted while its import was in flight: blocks are freed when the import settles. */
  isAbortedInTransfer = false;

  status: SequenceStatus = SEQUENCE_STATUS.waiting;
  finishReason: FinishReason | undefined;
  /** Tokens whose KV is in the cache; prefill is this catching up with numTokens. */
  numComputedTokens = 0;
  /** Prefix-cache hit at first admission; reported as usage.cachedTokens. */
  numCachedTokens = 0;
  numPreemptions = 0;
  /** Whether numCachedTokens was set (a resume after preemption must not overwrite it). */
  hasBeenAdmitted = false;
  /** Leading blocks already offered to the prefix cache (hit, or hashed once computed). */
  numCommittedBlocks = 0;
  /** Steps this sequence waited for a running one to compute its shared prefix (bounded). */
  numDeferredSteps = 0;

  // ---- speculative decoding (workers/speculative/) ----
  /** Drafts the engine proposed for the next step, and the drafter's estimate per draft; undefined = none. */
  draftTokens: Int32Array | undefined;
  draftScores: Float32Array | undefined;
  /** Draft tokens the engine judged (up to and including each step's first rejection) and accepted. */
  numDraftTokensJudged = 0;
  numDraftTokensAccepted = 0;
  /** The policy's predicted acceptances of the judged drafts, summed (its per-sequence correction). */
  draftExpected = 0;
  /** Steps since this sequence last verified drafts (the policy's probe of a sequence it turned off). */
  numStepsSinceVerify = 0;
  private verifyBuf: Int32Array | undefined;

  /** Prompt + outputs, grown by doubling so a decode step appends without allocating. */
  private tokenBuf: Int32Array;
  private tokenLen: number;
  /** Physical block ids, in order; owned by the block manager, grown by doubling. */
  private blockBuf: Int32Array;
  private blockLen = 0;
  /** Cached view for blockTableView(); dropped whenever the table changes. */
  private blockView: Int32Array | undefined;
  /**
   * Chained (seq) hashes of this sequence's full blocks, computed lazily and kept across
   * preemption: the hash depends only on the tokens, so a resume does not rehash.
   */
  readonly seqHashes: bigint[] = [];
  readonly localHashes: bigint[] = [];

  constructor(init: SequenceInit) {
    this.seqId = init.seqId;
    this.requestId = init.requestId;
    this.sampling = init.sampling;
    this.stop = init.stop;
    this.requestSeed = init.requestSeed;
    this.logprobs = init.logprobs;
    this.pinOnFinish = init.pinOnFinish ?? false;
    this.loraId = init.loraId;
    this.loraSlot = init.loraSlot;
    this.numPriorOutputTokens = Math.max(0, Math.min(init.numPriorOutputTokens ?? 0, init.promptTokenIds.length - 1));
    this.numPromptTokens = init.promptTokenIds.length - this.numPriorOutputTokens;
    this.numRemoteTokens = init.numRemoteTokens ?? 0;
    const numGiven = init.promptTokenIds.length;
    const cap = Math.max(16, numGiven + Math.min(init.stop.maxTokens, 1024));
    this.tokenBuf = new Int32Array(cap);
    for (let i = 0; i < numGiven; i++) this.tokenBuf[i] = init.promptTokenIds[i]!;
    this.tokenLen = numGiven;
    this.blockBuf = new Int32Array(Math.max(4, Math.ceil(cap / 16)));
  }

  get numTokens(): number {
    return this.tokenLen;
  }
  /** Output tokens including prior ones (what penalties and positions see). */
  get numOutputTokens(): number {
    return this.tokenLen - this.numPromptTokens;
  }
  /** Output tokens generated by this request (what stop limits and usage count). */
  get numNewOutputTokens(): number {
    return this.tokenLen - this.numPromptTokens - this.numPriorOutputTokens;
  }
  /** Tokens still to compute before the next sample (prompt remainder, or 1 when decoding). */
  get numUncomputedTokens(): number {
    return this.tokenLen - this.numComputedTokens;
  }
  get isPrefilling(): boolean {
    return this.numComputedTokens < this.numPromptTokens;
  }
  get isFinished(): boolean {
    return this.status === SEQUENCE_STATUS.finished;
  }
  get lastTokenId(): number {
    return this.tokenBuf[this.tokenLen - 1]!;
  }
  get numBlocks(): number {
    return this.blockLen;
  }

  /** View over all tokens; valid until the next append (a grow swaps the buffer). */
  tokenView(): Int32Array {
    return this.tokenBuf.subarray(0, this.tokenLen);
  }
  tokenSlice(start: number, end: number): Int32Array {
    return this.tokenBuf.subarray(start, end);
  }
  tokenAt(i: number): number {
    return this.tokenBuf[i]!;
  }
  outputTokenIds(): number[] {
    return Array.from(this.tokenBuf.subarray(this.numPromptTokens, this.tokenLen));
  }

  /**
   * The tokens of a verify step: the last token, then the first `k` drafts (a view, valid until
   * the next call).
   */
  verifyTokens(k: number): Int32Array {
    const drafts = this.draftTokens!;
    if (this.verifyBuf === undefined || this.verifyBuf.length < k + 1) this.verifyBuf = new Int32Array(Math.max(8, k + 1));
    this.verifyBuf[0] = this.lastTokenId;
    this.verifyBuf.set(drafts.subarray(0, k), 1);
    return this.verifyBuf.subarray(0, k + 1);
  }

  appendToken(tokenId: number): void {
    if (this.tokenLen === this.tokenBuf.length) this.tokenBuf = grow(this.tokenBuf);
    this.tokenBuf[this.tokenLen++] = tokenId;
  }

  // ---- block table: mutated only by the block manager ----

  blockTableView(): Int32Array {
    return (this.blockView ??= this.blockBuf.subarray(0, this.blockLen));
  }
  blockAt(i: number): number {
    return this.blockBuf[i]!;
  }
  pushBlock(blockId: number): void {
    if (this.blockLen === this.blockBuf.length) this.blockBuf = grow(this.blockBuf);
    this.blockBuf[this.blockLen++] = blockId;
    this.blockView = undefined;
  }
  /** Drops the table's blocks past the first `n` (the block manager frees them). */
  truncateBlocks(n: number): void {
    if (n >= this.blockLen) return;
    this.blockLen = Math.max(0, n);
    this.blockView = undefined;
  }
  clearBlocks(): void {
    this.blockLen = 0;
    this.blockView = undefined;
    this.numCommittedBlocks = 0;
  }
}

function grow(buf: Int32Array): Int32Array {
  const next = new Int32Array(buf.length * 2);
  next.set(buf);
  return next;
}
