/**
 * The raw N-API surface of tandem_native.node and its loader. Arrays cross as flat typed
 * arrays (layouts below), never per-token objects; the addon copies them synchronously, so a
 * caller may reuse its buffers as soon as step() returns its promise.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { NativeUnavailableError } from './errors.js';

/** Int32 fields per sequence in `seqMeta`. */
export const SEQ_META_STRIDE = 11;
export const SeqMeta = {
  numTokens: 0,
  startPos: 1,
  blockOffset: 2,
  numBlocks: 3,
  sample: 4,
  /** -1: no logprobs; 0: the sampled token's only; n: plus n top alternatives. */
  topLogprobs: 5,
  historyOffset: 6,
  historyLen: 7,
  numPrompt: 8,
  /** Logit bias entries of this sequence in step()'s biasIds/biasValues. */
  biasOffset: 9,
  biasLen: 10,
} as const;

/** Speculative decoding: Int32 fields per sequence in step()'s `specMeta`. */
export const SPEC_META_STRIDE = 3;
export const SpecMeta = {
  /** The last numDrafts of its tokens are drafts to verify (it must be sampled). */
  numDrafts: 0,
  /** After the step, the drafter proposes up to this many tokens for it (0: none). */
  proposeDrafts: 1,
  /** The drafter's key for it (draftBegin), -1 = none. */
  draftKey: 2,
} as const;

/** Speculative decoding at load: the engine's drafter (native/src/spec/drafter.h). */
export interface LoadSpeculativeOptions {
  method: 'ngram' | 'suffix';
  /** Most drafts one sequence verifies in a step (1..64). */
  numSpeculativeTokens: number;
  /** ngram: the n range of the lookup. */
  promptLookupMin?: number;
  promptLookupMax?: number;
  /** suffix: tree depth, drafts per matched token, probability floor, the global tree's bound in tokens. */
  suffixMaxDepth?: number;
  suffixMaxSpecFactor?: number;
  suffixMinTokenProb?: number;
  suffixCacheTokens?: number;
}

/** Float64 fields per sequence in `sampling`. */
export const SAMPLING_STRIDE = 8;
export const SamplingField = {
  temperature: 0,
  topP: 1,
  topK: 2,
  minP: 3,
  presencePenalty: 4,
  frequencyPenalty: 5,
  repetitionPenalty: 6,
  seed: 7,
} as const;

export interface LoadEngineOptions {
  /** Hugging Face model directory (config.json + *.safetensors). */
  modelDir: string;
  /** 'cpu' (default), 'cuda' / 'cuda:N', or 'simt' (the CUDA backend's kernels on the host; tests). */
  device?: string;
  /** KV pool size in blocks; wins over memoryBudgetBytes. */
  numBlocks?: number;
  /** KV pool size as a byte budget, when numBlocks is not given. */
  memoryBudgetBytes?: number;
  /** Tokens per KV block (default 16, docs/design.md). */
  blockSize?: number;
  /** Host compute threads (default: all cores). */
  threads?: number;
  /** GPU: without numBlocks or memoryBudgetBytes, the KV pool takes this share of device memory (default 0.9). */
  gpuMemoryUtilization?: number;
  /** GPU: activations are sized for this many tokens per step (default 8192; a worker passes its scheduler's token budget). */
  maxBatchTokens?: number;
  /** GPU: logits rows and decode graphs for up to this many sequences (default 256; a worker passes its scheduler's max). */
  maxSeqs?: number;
  /** GPU: replay decode steps from captured CUDA graphs (default true; false = eager). */
  cudaGraphs?: boolean;
  /** GPU: 'auto' (cuBLASLt where it loads), 'cublaslt', or 'own' (our kernels). */
  gemm?: 'auto' | 'cublaslt' | 'own';
  /** KV pool element type: 'auto' (f32 on the CPU, bf16 on GPUs), 'bf16', or 'fp8' (e4m3 with the checkpoint's k/v scales). */
  kvCacheDtype?: 'auto' | 'bf16' | 'fp8';
  /** Weights: the checkpoint's own config (unset), 'fp8' (quantize linear layers at load), 'none' (dequantize an FP8 checkpoint). */
  quantization?: 'fp8' | 'none';
  /** FP8 weights: 'auto' (the checkpoint's activation scheme, W8A8) or 'w8a16' (activations unquantized; tests, benches). */
  fp8Compute?: 'auto' | 'w8a16';
  /**
   * Caller-owned KV pool (e.g. a UCX `allocatePool` buffer, which a peer reads over shared
   * memory without this process's CPU): exactly numBlocks × kvBytesPerBlock bytes (see
   * `describeKvLayout`); with numBlocks unset the block count is taken from its size. The
   * handle keeps it referenced; its owner must keep it mapped until the engine is closed.
   */
  kvPool?: ArrayBuffer;
  /** Speculative decoding: load a drafter (the GPU also sizes its verify rows for it). */
  speculative?: LoadSpeculativeOptions;
}

/** Pool sizing for a set of load options, from config.json alone (no weights). */
export interface RawKvLayout {
  numBlocks: number;
  blockSize: number;
  numLayers: number;
  numKvHeads: number;
  headDim: number;
  kvBytesPerToken: number;
  kvBytesPerBlock: number;
  kvLayout: string;
  kvDtype: KvPoolDtype;
}

/** Element type of a KV pool: fp8_e4m3 holds K / k_scale and V / v_scale (the model's per-layer scales). */
export type KvPoolDtype = 'f32' | 'bf16' | 'fp8_e4m3';

export interface RawEngineInfo {
  architecture: string;
  vocabSize: number;
  hiddenSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  maxPositionEmbeddings: number;
  eosTokenIds: number[];
  kvBytesPerToken: number;
  kvBytesPerBlock: number;
  numBlocks: number;
  blockSize: number;
  kvLayout: string;
  /** The pool is caller-owned memory (loadEngine's kvPool or adoptKvPool). */
  kvPoolExternal: boolean;
  /** False for a GPU pool: kvPool() refuses, no host transfer agent can read it in place. */
  kvPoolOnHost: boolean;
  /** Element type of the KV pool. */
  kvDtype: KvPoolDtype;
  /** The model's e4m3 KV scales, [layer][K, V] (1.0 where the checkpoint has none): what converts to or from an fp8_e4m3 pool. */
  kvScales: number[];
  /** The weights' quantization, e.g. 'fp8 weights per 128x128 block, activations dynamic per token and 128-column group', or 'none'. */
  quantization: string;
  /** 'cpu', 'cuda' or 'simt'. */
  backend: string;
  /** One line: the device and how it computes (GEMM library, graphs). */
  device: string;
  /** The backend has LoRA kernels (Engine::supports_lora); absent from addons built before the field. */
  supportsLora?: boolean;
  threads: number;
}

/** One backend of this build and whether it can run here. */
export interface BackendStatus {
  name: string;
  available: boolean;
  /** Why not, when unavailable (e.g. no CUDA driver). */
  reason?: string;
  /** e.g. the GPU's name. */
  detail?: string;
  /** The FP8 paths this backend runs here (weights, KV cache); absent when unavailable. */
  fp8?: string;
}

export interface RawStepResult {
  /**
   * Per sampled sequence in batch order, `emitted[i]` tokens: 1, or in a verify step its
   * accepted drafts plus the token sampled after them. Flattened in batch order.
   */
  tokens: Int32Array;
  /** Tokens per sampled sequence (absent from addons built before speculative decoding: all 1). */
  emitted?: Int32Array;
  /** Speculative decoding: per sampled sequence, how many drafts the drafter proposed (flattened in `drafts`). */
  draftCounts?: Int32Array;
  drafts?: Int32Array;
  /** Per draft, the drafter's estimate that it is accepted (NaN: none). */
  draftScores?: Float32Array;
  /** NaN where logprobs were not asked (one per returned token). */
  logprobs: Float32Array;
  /** Row width of topIds/topLogprobs (max asked this step); rows padded with -1 / NaN. */
  topStride: number;
  topIds: Int32Array;
  topLogprobs: Float32Array;
  /** [sampled][vocab], only when returnLogits was set. */
  logits?: Float32Array;
}

export interface RawEngineHandle {
  info(): RawEngineInfo;
  step(
    tokens: Int32Array,
    seqMeta: Int32Array,
    blockTables: Int32Array,
    history: Int32Array,
    sampling: Float64Array,
    returnLogits?: boolean,
    /** Logit bias (token id, value) of every sequence back to back; seqMeta points into them. */
    biasIds?: Int32Array,
    biasValues?: Float32Array,
    /**
     * Structured output: per sequence, its row in `allowedMasks` or -1 (unconstrained). A row
     * is ceil(vocabSize / 32) words, bit (id & 31) of word (id >> 5) set = id allowed; the
     * sampler sets every other logit to -inf before greedy / top-k / top-p / min-p.
     */
    maskRows?: Int32Array,
    allowedMasks?: Uint32Array,
    /**
     * Masks come later, through supplyMasks(), which the caller makes while the forward pass
     * runs; sampling waits for it (60 s at most, then the step rejects with `internal`).
     */
    deferMasks?: boolean,
    /** Multi-LoRA: per sequence its adapter slot (loadLora), -1 = the base model. */
    loraSlots?: Int32Array,
    /** Speculative decoding: SPEC_META_STRIDE fields per sequence (SpecMeta). */
    specMeta?: Int32Array,
  ): Promise<RawStepResult>;
  /** Speculative decoding: a sequence's tokens so far for the drafter (`unavailable` without one). */
  draftBegin(key: number, tokens: Int32Array): void;
  /** The drafter drops the sequence; `finished`: it completed (its output may feed the suffix drafter's global tree). */
  draftEnd(key: number, finished: boolean): void;
  /**
   * Reads a LoRA adapter's factors (PEFT tensor names, f32/bf16/f16) and puts it in `slot`
   * between steps. The config was checked by the caller. Rejects `not_found` / `config_invalid`
   * naming the tensor, `unavailable` on a backend without LoRA kernels.
   */
  loadLora(slot: number, spec: { dir: string; rank: number; scale: number; targets: string[] }): Promise<{ numParameters: number }>;
  /** Empties an adapter slot after any running step. */
  unloadLora(slot: number): Promise<void>;
  /**
   * The masks of the step in flight started with deferMasks (layouts as step()'s; no
   * arguments = none this step). Copied before returning. Throws `invalid_argument` when no
   * step waits for masks.
   */
  supplyMasks(maskRows?: Int32Array, allowedMasks?: Uint32Array): void;
  /**
   * The paged KV pool as an ArrayBuffer over the engine's memory (no copy), block-major
   * (`kvLayout`), `kvBytesPerBlock * numBlocks` bytes; for registering with a transfer agent.
   * The buffer keeps the pool alive after close() until it is collected. A caller-owned pool
   * comes back as the very ArrayBuffer that was given.
   */
  kvPool(): ArrayBuffer;
  /**
   * Moves the pool into caller-owned memory of exactly `kvBytesPerBlock * numBlocks` bytes,
   * freeing the engine's own; contents are not copied, so call it before the first step.
   * Throws `invalid_argument` on a size mismatch.
   */
  adoptKvPool(buffer: ArrayBuffer): void;
  /**
   * Embeddings: runs each sequence (`lengths[i]` tokens of `tokens`, back to back) from
   * position 0, pools its final-norm hidden states (`pooling` 0 = last token, 1 = mean) and
   * L2-normalizes when asked; [lengths.length][hiddenSize]. Overwrites the KV pool's first
   * blocks: only for an engine that serves no generation. `cancel` (an Int32Array over a
   * SharedArrayBuffer) is read before each forward pass: once `cancel[0]` is non-zero
   * (`Atomics.store`) the call stops there and rejects with code `cancelled`.
   */
  embed(tokens: Int32Array, lengths: Int32Array, pooling: 0 | 1, normalize: boolean, cancel?: Int32Array): Promise<Float32Array>;
  /**
   * KV movement between workers (issue 24), off the JS thread. Token t of a copy lives in block
   * ids[t / blockSize], slot t % blockSize on each side, so block size and dtype may differ.
   * Pool -> dst: ids.length whole blocks of this pool's layout; only layers [l0, l1) written.
   */
  kvReadBlocks(ids: Int32Array, dst: Uint8Array, layers?: [number, number]): Promise<void>;
  /** src: whole blocks of srcLayout (default: this pool's) -> blocks ids, converting; src's tokens from srcFirstToken (default 0) land from token 0. */
  kvWriteBlocks(ids: Int32Array, src: Uint8Array, srcLayout?: RawKvCopyLayout, layers?: [number, number], srcFirstToken?: number): Promise<void>;
  /** Bytes a peer process maps the pool with (CUDA IPC; SIMT: shared memory); null for a host pool. */
  kvExportHandle(): Uint8Array | null;
  /** Maps a peer's exported pool (its layout, numBlocks included); returns a peer id. */
  kvOpenPeer(handle: Uint8Array, peerLayout: RawKvCopyLayout & { numBlocks: number }): number;
  /** The peer's blocks srcIds into this pool's dstIds (one kernel on a side stream). */
  kvCopyFromPeer(peer: number, srcIds: Int32Array, dstIds: Int32Array, layers?: [number, number], srcFirstToken?: number): Promise<void>;
  kvClosePeer(peer: number): void;
  /** Live view: [forward passes begun, layers whose K/V the latest one has written]. */
  layerProgress(): BigInt64Array | null;
  /** Frees the engine (after any step in flight finishes). */
  close(): void;
}

/** A pool layout for KV copies; fields left out are this engine's. */
export interface RawKvCopyLayout {
  blockSize?: number;
  dtype?: KvPoolDtype;
  numBlocks?: number;
  numLayers?: number;
  numKvHeads?: number;
  headDim?: number;
}

export interface NativeAddon {
  loadEngine(options: LoadEngineOptions): Promise<RawEngineHandle>;
  /** Backends usable here: 'cpu', plus 'cuda' when built and a driver and a GPU exist. */
  backends(): string[];
  /** Every backend of the build, with the reason when one is unavailable. */
  backendStatus(): BackendStatus[];
  /** Throws `invalid_argument` / `not_found` / `config_invalid` like loadEngine would. */
  describeKvLayout(options: Omit<LoadEngineOptions, 'kvPool'>): RawKvLayout;
  kvLayout: string;
}

let cached: NativeAddon | undefined;

/** Where the addon may live: $TANDEM_NATIVE_ADDON, then native/build/{Release,Debug}. */
export function addonCandidates(): string[] {
  const here = dirname(fileURLToPath(import.meta.url));
  // Source checkout: native/lib -> native/build. Compiled: dist/native/lib -> <root>/native/build.
  const roots = [resolve(here, '..'), resolve(here, '../../../native')];
  const out: string[] = [];
  if (process.env.TANDEM_NATIVE_ADDON) out.push(resolve(process.env.TANDEM_NATIVE_ADDON));
  for (const root of roots) {
    out.push(join(root, 'build/Release/tandem_native.node'), join(root, 'build/Debug/tandem_native.node'));
  }
  return out;
}

export function isNativeBuilt(): boolean {
  return addonCandidates().some((p) => existsSync(p));
}

/** Loads the addon once; NativeUnavailableError when it is not built. */
export function loadAddon(): NativeAddon {
  if (cached !== undefined) return cached;
  const path = addonCandidates().find((p) => existsSync(p));
  if (path === undefined) {
    throw new NativeUnavailableError(
      'the native engine is not built: run `npm run build:native` (needs a C++ compiler and cmake)',
    );
  }
  try {
    cached = createRequire(import.meta.url)(path) as NativeAddon;
  } catch (err) {
    throw new NativeUnavailableError(`cannot load ${path}: ${(err as Error).message}`, { cause: err });
  }
  return cached;
}
