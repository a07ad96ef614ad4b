/**
 * NativeEngine: the Engine contract over the C++ model runner in native/. A step is
 * flattened to typed arrays (BatchMarshal), run on a native thread, and its flat results are
 * turned back into SampledTokens. Steps are serialized: a second step() waits for the first.
 */
import { performance } from 'node:perf_hooks';
import { fromNativeError, loadAddon, NativeEngineError, type RawEngineHandle, type RawEngineInfo, type RawStepResult } from '../../../native/index.js';
import type { LoadEngineOptions, LoadSpeculativeOptions, RawKvCopyLayout, RawKvLayout } from '../../../native/index.js';
import type { Engine, EngineDrafter, EngineInfo, SampledToken, StepBatch, StepResult, TokenSample } from '../engine.js';
import { BatchMarshal } from './batch-marshal.js';
import type { LoraAdapterSpec } from '../../lora/peft-adapter.js';

/** What createNativeEngine takes: the addon's load options (native/lib/binding.ts documents each); unset sizes get the defaults below. */
export type NativeEngineOptions = LoadEngineOptions;

/** The pool a load with these options would have, from config.json alone (no weights). */
export type NativeKvLayout = RawKvLayout;

/** Model facts the worker needs beyond EngineInfo (model card, stop tokens). */
export type NativeModelInfo = RawEngineInfo;

/** Where one step's wall time went: TypeScript (marshal + unmarshal) versus the native call. */
export interface StepTiming {
  marshalMs: number;
  nativeMs: number;
  unmarshalMs: number;
}

/** The CPU backend's KV pool without --num-gpu-blocks or --kv-cache-memory. */
export const DEFAULT_KV_MEMORY_BYTES = 512 * 1024 * 1024;

/** True for devices whose KV pool lives in device memory (cuda, cuda:N, simt). */
export function isGpuDevice(device: string | undefined): boolean {
  return device !== undefined && device !== 'cpu';
}

function sizing(options: NativeEngineOptions): Omit<LoadEngineOptions, 'kvPool'> {
  const device = options.device ?? 'cpu';
  const numBlocks = options.numBlocks ?? 0;
  // A GPU pool is sized by the device's free memory (gpuMemoryUtilization) unless told otherwise.
  const memoryBudgetBytes = numBlocks > 0 ? 0 : (options.memoryBudgetBytes ?? (isGpuDevice(device) ? 0 : DEFAULT_KV_MEMORY_BYTES));
  return {
    modelDir: options.modelDir,
    device,
    numBlocks,
    memoryBudgetBytes,
    blockSize: options.blockSize ?? 16,
    threads: options.threads ?? 0,
    ...(options.gpuMemoryUtilization !== undefined ? { gpuMemoryUtilization: options.gpuMemoryUtilization } : {}),
    ...(options.maxBatchTokens !== undefined ? { maxBatchTokens: options.maxBatchTokens } : {}),
    ...(options.maxSeqs !== undefined ? { maxSeqs: options.maxSeqs } : {}),
    ...(options.cudaGraphs !== undefined ? { cudaGraphs: options.cudaGraphs } : {}),
    ...(options.gemm !== undefined ? { gemm: options.gemm } : {}),
    ...(options.kvCacheDtype !== undefined ? { kvCacheDtype: options.kvCacheDtype } : {}),
    ...(options.quantization !== undefined ? { quantization: options.quantization } : {}),
    ...(options.fp8Compute !== undefined ? { fp8Compute: options.fp8Compute } : {}),
    ...(options.speculative !== undefined ? { speculative: options.speculative } : {}),
  };
}

export async function createNativeEngine(options: NativeEngineOptions): Promise<NativeEngine> {
  const addon = loadAddon();
  try {
    const handle = await addon.loadEngine({ ...sizing(options), ...(options.kvPool !== undefined ? { kvPool: options.kvPool } : {}) });
    return new NativeEngine(handle, options.speculative);
  } catch (err) {
    throw fromNativeError(err);
  }
}

/** Synchronous and cheap (config.json only): size a transfer agent's pool before loading. */
export function describeNativeKvLayout(options: Omit<NativeEngineOptions, 'kvPool'>): NativeKvLayout {
  const addon = loadAddon();
  try {
    return addon.describeKvLayout(sizing(options));
  } catch (err) {
    throw fromNativeError(err);
  }
}

/** Layout name for transfers: the pool layout plus the shape and element type that fix a block's bytes. */
export function nativeKvLayoutName(
  m: Pick<RawKvLayout, 'kvLayout' | 'numLayers' | 'numKvHeads' | 'headDim' | 'blockSize'> & { kvDtype?: RawKvLayout['kvDtype'] },
): string {
  return `${m.kvLayout};layers=${m.numLayers};kv_heads=${m.numKvHeads};head_dim=${m.headDim};block=${m.blockSize};${m.kvDtype ?? 'f32'}`;
}

export class NativeEngine implements Engine {
  readonly info: EngineInfo;
  readonly model: NativeModelInfo;
  /** Timing of the most recent step. */
  lastTiming: StepTiming = { marshalMs: 0, nativeMs: 0, unmarshalMs: 0 };

  private handle: RawEngineHandle | undefined;
  private readonly marshaller: BatchMarshal;
  private tail: Promise<unknown> = Promise.resolve();
  /** A caller-owned pool: its owner detaches it when it frees the memory. */
  private externalPool: ArrayBuffer | undefined;

  /** Speculative decoding: the C++ drafter loaded with the engine (LoadSpeculativeOptions). */
  readonly drafter: EngineDrafter | undefined;

  constructor(handle: RawEngineHandle, speculative?: LoadSpeculativeOptions) {
    this.handle = handle;
    this.drafter =
      speculative === undefined
        ? undefined
        : {
            method: speculative.method,
            begin: (seqId, tokens) => this.handle?.draftBegin(seqId, tokens),
            end: (seqId, finished) => this.handle?.draftEnd(seqId, finished),
          };
    this.model = handle.info();
    if (this.model.kvPoolExternal) this.externalPool = handle.kvPool();
    this.marshaller = new BatchMarshal((this.model.vocabSize + 31) >>> 5);
    this.info = {
      kind: 'native',
      vocabSize: this.model.vocabSize,
      kvBytesPerToken: this.model.kvBytesPerToken,
      numBlocks: this.model.numBlocks,
      blockSize: this.model.blockSize,
      // An addon built before the field: the CPU backend is the one with LoRA kernels.
      supportsLora: this.model.supportsLora ?? this.model.backend === 'cpu',
    };
  }

  /**
   * The engine's KV pool, block-major (`kvLayoutName`), `model.kvBytesPerBlock` bytes per
   * block: the memory a transfer agent registers so peers read blocks in place.
   */
  kvPool(): ArrayBuffer {
    const handle = this.handle;
    if (handle === undefined) throw new NativeEngineError('unavailable', 'native engine is closed');
    return handle.kvPool();
  }

  /** Layout name for transfers: the pool layout plus the shape that fixes a block's bytes. */
  get kvLayoutName(): string {
    return nativeKvLayoutName(this.model);
  }

  /** One line: the backend's device and how it computes (GEMM library, graphs). */
  get deviceDescription(): string {
    return this.model.device;
  }

  /** True when the pool is caller-owned memory (loaded with `kvPool`, or `adoptKvPool`). */
  get kvPoolExternal(): boolean {
    return this.handle?.info().kvPoolExternal ?? false;
  }

  /**
   * Moves the pool into `buffer` (exactly numBlocks × kvBytesPerBlock bytes, e.g. a UCX
   * allocation), freeing the engine's own. Contents are not copied: only before the first
   * step. For workers that load the engine before creating their transfer agent.
   */
  adoptKvPool(buffer: ArrayBuffer): void {
    const handle = this.handle;
    if (handle === undefined) throw new NativeEngineError('unavailable', 'native engine is closed');
    try {
      handle.adoptKvPool(buffer);
    } catch (err) {
      throw fromNativeError(err);
    }
    this.externalPool = buffer;
  }

  // KV movement between workers (issue 24). All copies run on native threads (a GPU's side
  // stream) beside steps and resolve once the data is in place, so a step scheduled after the
  // promise settles sees it. The caller keeps the blocks out of steps while they move.

  /** Blocks `ids` into `dst` (ids.length × kvBytesPerBlock bytes, this pool's layout); layers [l0, l1). */
  async kvReadBlocks(ids: Int32Array, dst: Uint8Array, layers?: [number, number]): Promise<void> {
    try {
      await this.requireHandle().kvReadBlocks(ids, dst, layers);
    } catch (err) {
      throw fromNativeError(err);
    }
  }

  /**
   * Whole blocks of `srcLayout` (default: ours) into blocks `ids`, converting block size and
   * dtype; the source's tokens from `srcFirstToken` land from the first slot of ids[0].
   */
  async kvWriteBlocks(ids: Int32Array, src: Uint8Array, srcLayout?: RawKvCopyLayout, layers?: [number, number], srcFirstToken = 0): Promise<void> {
    try {
      await this.requireHandle().kvWriteBlocks(ids, src, srcLayout, layers, srcFirstToken);
    } catch (err) {
      throw fromNativeError(err);
    }
  }

  /** What a peer on this host maps the pool with; null for a host pool (peers read it over UCX). */
  kvExportHandle(): Uint8Array | null {
    try {
      return this.requireHandle().kvExportHandle();
    } catch (err) {
      throw fromNativeError(err);
    }
  }

  kvOpenPeer(handle: Uint8Array, peerLayout: RawKvCopyLayout & { numBlocks: number }): number {
    try {
      return this.requireHandle().kvOpenPeer(handle, peerLayout);
    } catch (err) {
      throw fromNativeError(err);
    }
  }

  /** The peer's tokens from `srcFirstToken` of `srcIds` into `dstIds` from its first slot. */
  async kvCopyFromPeer(peer: number, srcIds: Int32Array, dstIds: Int32Array, layers?: [number, number], srcFirstToken = 0): Promise<void> {
    try {
      await this.requireHandle().kvCopyFromPeer(peer, srcIds, dstIds, layers, srcFirstToken);
    } catch (err) {
      throw fromNativeError(err);
    }
  }

  kvClosePeer(peer: number): void {
    this.handle?.kvClosePeer(peer);
  }

  /** Live [forward passes begun, layers written by the latest] (null: the backend does not report it). */
  layerProgress(): BigInt64Array | null {
    return this.requireHandle().layerProgress();
  }

  /** The layout this pool's blocks have, for a peer's kvWriteBlocks / kvOpenPeer. */
  get kvCopyLayout(): RawKvCopyLayout & { numBlocks: number } {
    return {
      blockSize: this.model.blockSize,
      dtype: this.model.kvDtype,
      numBlocks: this.model.numBlocks,
      numLayers: this.model.numLayers,
      numKvHeads: this.model.numKvHeads,
      headDim: this.model.headDim,
    };
  }

  private requireHandle(): RawEngineHandle {
    const handle = this.handle;
    if (handle === undefined) throw new NativeEngineError('unavailable', 'native engine is closed');
    return handle;
  }

  step(batch: StepBatch): Promise<StepResult> {
    return this.enqueue(async () => (await this.run(batch, false)).result);
  }

  /** step() plus the raw logits of each sampled row ([sampled][vocab]); for tests and goldens. */
  stepWithLogits(batch: StepBatch): Promise<StepResult & { logits: Float32Array }> {
    return this.enqueue(async () => {
      const { result, raw } = await this.run(batch, true);
      return { ...result, logits: raw.logits ?? new Float32Array(0) };
    });
  }

  /**
   * Embedding worker only (it overwrites the KV pool): pooled, optionally normalized vectors
   * of each sequence, [lengths.length][hiddenSize], computed on a native thread. Serialized
   * with steps. `signal` aborts the call before its next forward pass (a call that has not
   * started yet does not start): it then rejects with code `cancelled`.
   */
  embed(tokens: Int32Array, lengths: Int32Array, pooling: 'last' | 'mean', normalize: boolean, signal?: AbortSignal): Promise<Float32Array> {
    return this.enqueue(async () => {
      const handle = this.handle;
      if (handle === undefined) throw new NativeEngineError('unavailable', 'native engine is closed');
      if (signal?.aborted) throw new NativeEngineError('cancelled', 'embed: cancelled by the caller before it started');
      // The native thread reads this flag between passes; shared memory, so no copy is involved.
      const flag = signal !== undefined ? new Int32Array(new SharedArrayBuffer(4)) : undefined;
      const onAbort = () => Atomics.store(flag!, 0, 1);
      signal?.addEventListener('abort', onAbort, { once: true });
      try {
        return await handle.embed(tokens, lengths, pooling === 'last' ? 0 : 1, normalize, flag);
      } catch (err) {
        throw fromNativeError(err);
      } finally {
        signal?.removeEventListener('abort', onAbort);
      }
    });
  }

  /**
   * Multi-LoRA: reads the adapter's factors on a native thread while steps keep running, then
   * swaps it into the slot between two steps.
   */
  async loadLora(slot: number, adapter: LoraAdapterSpec): Promise<void> {
    const handle = this.handle;
    if (handle === undefined) throw new NativeEngineError('unavailable', 'native engine is closed');
    try {
      await handle.loadLora(slot, { dir: adapter.dir, rank: adapter.rank, scale: adapter.scale, targets: [...adapter.targets] });
    } catch (err) {
      throw fromNativeError(err);
    }
  }

  async unloadLora(slot: number): Promise<void> {
    const handle = this.handle;
    if (handle === undefined) throw new NativeEngineError('unavailable', 'native engine is closed');
    try {
      await handle.unloadLora(slot);
    } catch (err) {
      throw fromNativeError(err);
    }
  }

  async close(): Promise<void> {
    await this.tail.catch(() => undefined);
    this.handle?.close();
    this.handle = undefined;
  }

  private enqueue<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.tail.then(fn, fn);
    this.tail = next.catch(() => undefined);
    return next;
  }

  private async run(batch: StepBatch, returnLogits: boolean): Promise<{ result: StepResult; raw: RawStepResult }> {
    const handle = this.handle;
    if (handle === undefined) throw new NativeEngineError('unavailable', 'native engine is closed');
    // A detached pool means its owner (the transfer agent) already unmapped the memory.
    if (this.externalPool !== undefined && this.externalPool.byteLength === 0) {
      throw new NativeEngineError('unavailable', 'the KV pool was released by its owner (transfer agent closed before the engine)');
    }
    const t0 = performance.now();
    const m = this.marshaller.marshal(batch);
    const t1 = performance.now();
    // Structured output: the forward pass starts first; masks are filled here on the JS
    // thread while it runs on the native one, then handed over before sampling.
    const prepare = batch.prepareSampling;
    let pending: Promise<RawStepResult>;
    try {
      pending = handle.step(m.tokens, m.seqMeta, m.blockTables, m.history, m.sampling, returnLogits, m.biasIds, m.biasValues, m.maskRows, m.allowedMasks, prepare !== undefined, m.loraSlots, m.specMeta);
    } catch (err) {
      throw fromNativeError(err);
    }
    if (prepare !== undefined) {
      try {
        prepare();
        const masks = this.marshaller.marshalMasks(batch);
        handle.supplyMasks(masks.maskRows, masks.allowedMasks);
      } catch (err) {
        // Never leave the native step waiting: release it unmasked (the engine loop rejects
        // its tokens), let it finish, then fail this step with the mask error.
        try {
          handle.supplyMasks();
        } catch {
          // Already released.
        }
        await pending.catch(() => undefined);
        throw fromNativeError(err);
      }
    }
    let raw: RawStepResult;
    try {
      raw = await pending;
    } catch (err) {
      throw fromNativeError(err);
    }
    const t2 = performance.now();
    const sampled = unmarshal(raw, m.sampledSeqIds, batch);
    const t3 = performance.now();
    this.lastTiming = { marshalMs: t1 - t0, nativeMs: t2 - t1, unmarshalMs: t3 - t2 };
    return { result: { sampled }, raw };
  }
}

function unmarshal(raw: RawStepResult, seqIds: number[], batch: StepBatch): SampledToken[] {
  const out: SampledToken[] = new Array(seqIds.length);
  let row = 0;
  let at = 0;  // index of this sequence's first returned token
  let draftAt = 0;
  for (const s of batch.sequences) {
    if (!s.sample) continue;
    const n = raw.emitted?.[row] ?? 1;
    const token: SampledToken = { seqId: seqIds[row]!, ...tokenAt(raw, at, s.logprobs) };
    if (n > 1) {
      const following: TokenSample[] = new Array(n - 1);
      for (let j = 1; j < n; j++) following[j - 1] = tokenAt(raw, at + j, s.logprobs);
      token.following = following;
    }
    const numDrafts = raw.draftCounts?.[row] ?? 0;
    if (numDrafts > 0) {
      token.drafts = raw.drafts!.slice(draftAt, draftAt + numDrafts);
      token.draftScores = raw.draftScores!.slice(draftAt, draftAt + numDrafts);
      draftAt += numDrafts;
    }
    at += n;
    out[row++] = token;
  }
  return out;
}

function tokenAt(raw: RawStepResult, i: number, logprobs: number | undefined): TokenSample {
  const token: TokenSample = { tokenId: raw.tokens[i]! };
  if (logprobs !== undefined) {
    token.logprob = raw.logprobs[i]!;
    if (logprobs > 0) {
      const top: Array<{ tokenId: number; logprob: number }> = [];
      const base = i * raw.topStride;
      for (let k = 0; k < logprobs && k < raw.topStride; k++) {
        const id = raw.topIds[base + k]!;
        if (id < 0) break;
        top.push({ tokenId: id, logprob: raw.topLogprobs[base + k]! });
      }
      token.topLogprobs = top;
    }
  }
  return token;
}
