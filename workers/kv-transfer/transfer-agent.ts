/**
 * The role: an agent that exposes this worker's KV pool to peers and pulls blocks from
 * theirs. `UcxTransferAgent` implements it over UCX; a worker test can substitute its own.
 */
import type { KvTransferDescriptor } from './descriptor.js';
import type { KvTransferCounters } from './metrics.js';

/** A KV pool registered with the agent: the local end of a pull, or the remote end. */
export interface KvPool {
  readonly regionId: number;
  /** Address of block 0, '0x…' (KvTransferParams.poolBaseAddress). */
  readonly baseAddress: string;
  /** Packed remote key, hex (KvTransferParams.remoteKey). */
  readonly remoteKey: string;
  readonly byteLength: number;
  readonly blockBytes: number;
  readonly numBlocks: number;
  /** KV layout name; a pull between pools of different layouts is refused. */
  readonly layout: string;
  /** The pool's bytes (for a pool the agent allocated; the caller's own buffer otherwise). */
  readonly buffer: ArrayBuffer | ArrayBufferView;
}

export interface PullOptions {
  /** Fail with 'deadline_exceeded' (and drop the peer's endpoint) after this long. */
  timeoutMs?: number;
  /**
   * Copy only this byte slice of each block (e.g. a layer range of block_major blocks, for
   * layer-wise streaming); the whole block when unset.
   */
  slice?: { offset: number; bytes: number };
  /**
   * A control read (a layer-progress slot, polled every millisecond while a hand-off streams):
   * kept out of the transfer counters, which describe KV moved.
   */
  control?: boolean;
}

export interface PullResult {
  bytes: number;
  /** Time on the wire as the progress thread saw it. */
  seconds: number;
  blocks: number;
  /** Gets issued after coalescing contiguous blocks. */
  ranges: number;
}

export interface KvTransferAgent {
  /** This worker's UCX address, hex: goes on the model card. */
  readonly workerAddress: string;
  readonly counters: KvTransferCounters;
  /** The UCX build can register device (CUDA) memory; decides the transport (transport-choice.ts). */
  readonly cudaSupported: boolean;

  /** Registers memory the caller owns (kept alive by the agent until release/close). */
  registerPool(memory: ArrayBuffer | ArrayBufferView, spec: PoolSpec): KvPool;
  /** Allocates and registers a host pool (shared-memory backed where UCX can). */
  allocatePool(spec: PoolSpec & { numBlocks: number }): KvPool;
  releasePool(pool: KvPool): void;

  /** Prefill side: the descriptor a decode worker needs to pull `blockIds` from `pool`. */
  describe(pool: KvPool, blockIds: number[]): KvTransferDescriptor;

  /** Decode side: copies the descriptor's blocks into `localBlockIds` of `pool`. */
  pull(descriptor: KvTransferDescriptor, pool: KvPool, localBlockIds: ArrayLike<number>, options?: PullOptions): Promise<PullResult>;

  /** Drops the cached endpoint to a peer (e.g. when its instance leaves discovery). */
  disconnect(workerAddress: string): void;
  close(): void;
}

export interface PoolSpec {
  blockBytes: number;
  layout: string;
}
