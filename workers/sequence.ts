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
    this.numPromptTokens = init.promptTokenIds.length;
    const cap = Math.max(16, this.numPromptTokens + Math.min(init.stop.maxTokens, 1024));
    this.tokenBuf = new Int32Array(cap);
    for (let i = 0; i < this.numPromptTokens; i++) this.tokenBuf[i] = init.promptTokenIds[i]!;
    this.tokenLen = this.numPromptTokens;
    this.blockBuf = new Int32Array(Math.max(4, Math.ceil(cap / 16)));
  }

  get numTokens(): number {
    return this.tokenLen;
  }
  get numOutputTokens(): number {
    return this.tokenLen - this.numPromptTokens;
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
