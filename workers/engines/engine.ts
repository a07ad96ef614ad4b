/**
 * The engine contract: an engine only runs steps. The scheduler and block manager decide what
 * runs; the engine computes one forward pass for a batch and samples the next token of each
 * sequence that asks for one. Every engine (mocker, native CPU, native CUDA) implements it.
 */
import type { SamplingOptions } from '../../proto/wire.js';
import type { LoraAdapterSpec } from '../lora/peft-adapter.js';

export interface StepSequence {
  /** Scheduler-unique sequence id, stable across steps (and across preemption). */
  seqId: number;
  /** Token ids to compute this step: a prefill chunk, or the one last token for decode. */
  tokenIds: Int32Array;
  /** Position of tokenIds[0] in the sequence (= tokens already in the KV cache). */
  startPos: number;
  /** Physical KV block ids covering positions [0, startPos + tokenIds.length). */
  blockTable: Int32Array;
  /** False for a prefill chunk that does not finish the prompt: compute KV, sample nothing. */
  sample: boolean;
  sampling: SamplingOptions;
  /** Number of top logprobs wanted; undefined = none, 0 = only the sampled token's logprob. */
  logprobs?: number;
  /**
   * All token ids of the sequence so far (prompt + generated), for penalties and the mocker's
   * deterministic tokens. Shared, not copied, by the scheduler.
   */
  history: ArrayLike<number>;
  /** Number of prompt tokens at the front of history (penalties apply to generated tokens). */
  numPromptTokens: number;
  /** Per-request seed source for sampling. */
  requestSeed: number;
  /**
   * Structured output: the tokens this sample may take, as a bitmask (bit id&31 of word id>>5,
   * XGrammar's layout; grammar/contract.ts). Only on sample=true sequences with a grammar. The
   * engine samples among set bits only (disallowed logits are -inf before greedy/top-k/top-p).
   * Owned by the engine loop and rewritten each step: read it during step(), keep no reference.
   */
  allowedTokens?: Uint32Array;
  /** Multi-LoRA: the adapter slot (Engine.loadLora) applied to this sequence; undefined = the base model. */
  loraSlot?: number;
  /**
   * Speculative decoding: the last numDraftTokens of tokenIds are drafts to verify (sample is
   * true). The engine samples after the last real token and after each draft, keeps the drafts
   * its samples agree with and returns them plus the token sampled after them (SampledToken.following).
   * With `allowedTokens`, it holds numDraftTokens + 1 rows, one per sampled position.
   */
  numDraftTokens?: number;
  /**
   * Speculative decoding: after this step, ask the engine's drafter for up to this many drafts
   * (SampledToken.drafts). Set (0 included) on every sampled sequence of a speculating worker:
   * the drafter follows each such sequence's returned tokens, asked for drafts or not.
   */
  proposeDrafts?: number;
}

export interface StepBatch {
  sequences: StepSequence[];
  /**
   * Fraction of the worker's KV blocks in use once this step's blocks are allocated (0..1).
   * Optional; the mocker's perf model reads it, real engines may ignore it.
   */
  kvUsage?: number;
  /**
   * Structured output: fills `allowedTokens` of the constrained sequences (JS work on the
   * caller's thread). An engine calls it exactly once per step, before it samples, and after
   * it has launched its forward pass where it can, so mask work overlaps the compute. Absent
   * when no sequence in the batch is constrained.
   */
  prepareSampling?: () => void;
}

/** One returned token with its logprobs (when asked). */
export interface TokenSample {
  tokenId: number;
  logprob?: number;
  topLogprobs?: Array<{ tokenId: number; logprob: number }>;
}

export interface SampledToken extends TokenSample {
  seqId: number;
  /**
   * Speculative decoding, a verify step: the tokens after tokenId that this step returned, in
   * order (tokenId was the first accepted draft or the token sampled in its place; the last
   * one is always a sampled token). `following.length` drafts were accepted.
   */
  following?: TokenSample[];
  /** Speculative decoding: the drafter's proposals for this sequence's next step (proposeDrafts). */
  drafts?: Int32Array;
  /** Per draft, the drafter's estimate that it is accepted given the ones before (NaN: none). */
  draftScores?: Float32Array;
}

/**
 * Speculative decoding: the engine's drafter (native: n-gram or suffix, in C++ beside the step).
 * It keeps per-sequence state between begin and end, fed by the steps that ask it for drafts.
 */
export interface EngineDrafter {
  readonly method: string;
  /** A sequence's tokens so far (prompt and prior outputs); call before its first step. */
  begin(seqId: number, tokens: Int32Array): void;
  /** The sequence ended; `finished`: it completed normally (its output may feed shared state). */
  end(seqId: number, finished: boolean): void;
}

export interface StepResult {
  /** One entry per sequence with sample=true, in batch order. */
  sampled: SampledToken[];
}

export interface EngineInfo {
  kind: 'mocker' | 'native';
  vocabSize: number;
  /** Bytes of KV per token (all layers, K and V), 0 if the engine keeps no real KV. */
  kvBytesPerToken: number;
  numBlocks: number;
  blockSize: number;
  /**
   * Multi-LoRA: false when the engine refuses adapters (the CUDA backend has no LoRA kernels);
   * absent = it applies them iff it has `loadLora`. Published on the model card (`supportsLora`).
   */
  supportsLora?: boolean;
}

export interface Engine {
  readonly info: EngineInfo;
  /** One forward pass; what every engine promises is listed in this folder's README (contract suite). */
  step(batch: StepBatch): Promise<StepResult>;
  /**
   * Multi-LoRA (engines that batch adapters): puts a checked adapter (workers/lora) in a slot,
   * between steps; sequences name it by StepSequence.loraSlot. Absent: the engine has none.
   */
  loadLora?(slot: number, adapter: LoraAdapterSpec): Promise<void>;
  /** Empties a slot after any running step. */
  unloadLora?(slot: number): Promise<void>;
  /** Speculative decoding: the drafter behind StepSequence.proposeDrafts; absent = the engine drafts nothing. */
  readonly drafter?: EngineDrafter;
  /** Release native resources; a later step() rejects with code `unavailable`. */
  close(): Promise<void>;
}
