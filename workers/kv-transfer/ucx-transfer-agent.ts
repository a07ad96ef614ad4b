/**
 * UcxTransferAgent: the KvTransferAgent over the native UCX addon (native/ucx/). One UCP
 * worker per agent with its own progress thread; every pull is one batched read that resolves
 * when all its gets have landed.
 */
import { TandemError } from '../../runtime/errors.js';
import { loadUcxAddon, type RawAgent, type RawAgentOptions, type RawAgentStats } from './addon.js';
import { checkDescriptor, type KvTransferDescriptor } from './descriptor.js';
import { fromAddonError } from './errors.js';
import { KvTransferCounters } from './metrics.js';
import { RANGE_STRIDE, blockRanges, blockSliceRanges } from './ranges.js';
import type { KvPool, KvTransferAgent, PoolSpec, PullOptions, PullResult } from './transfer-agent.js';

export interface UcxTransferAgentOptions extends RawAgentOptions {
  /** Applied to pulls that give no timeout of their own; 0 = none (default 30 s). */
  defaultTimeoutMs?: number;
  /** Share counters with other agents or the worker's metrics; a fresh set otherwise. */
  counters?: KvTransferCounters;
}

const DEFAULT_TIMEOUT_MS = 30_000;

class UcxPool implements KvPool {
  constructor(
    readonly regionId: number,
    readonly baseAddress: string,
    readonly remoteKey: string,
    readonly byteLength: number,
    readonly blockBytes: number,
    readonly layout: string,
    readonly buffer: ArrayBuffer | ArrayBufferView,
  ) {}

  get numBlocks(): number {
    return Math.floor(this.byteLength / this.blockBytes);
  }
}

function checkSpec(spec: PoolSpec): void {
  if (!Number.isSafeInteger(spec.blockBytes) || spec.blockBytes <= 0) {
    throw new TandemError('invalid_argument', `block size ${spec.blockBytes} bytes is not a positive integer`);
  }
  if (spec.layout.length === 0) throw new TandemError('invalid_argument', 'KV layout name is empty');
}

export class UcxTransferAgent implements KvTransferAgent {
  readonly workerAddress: string;
  readonly counters: KvTransferCounters;
  private readonly pools = new Map<number, UcxPool>();
  private readonly defaultTimeoutMs: number;
  private closed = false;

  private constructor(
    private readonly raw: RawAgent,
    options: UcxTransferAgentOptions,
  ) {
    this.workerAddress = raw.address();
    this.counters = options.counters ?? new KvTransferCounters();
    this.defaultTimeoutMs = options.defaultTimeoutMs ?? DEFAULT_TIMEOUT_MS;
  }

  /** Loads the addon (UcxUnavailableError when it is not built) and starts a UCP worker. */
  static create(options: UcxTransferAgentOptions = {}): UcxTransferAgent {
    const addon = loadUcxAddon();
    const raw: RawAgentOptions = {};
    if (options.config !== undefined) raw.config = options.config;
    if (options.busyPollUs !== undefined) raw.busyPollUs = options.busyPollUs;
    if (options.maxGetBytes !== undefined) raw.maxGetBytes = options.maxGetBytes;
    let agent: RawAgent;
    try {
      agent = new addon.Agent(raw);
    } catch (err) {
      throw fromAddonError(err);
    }
    return new UcxTransferAgent(agent, options);
  }

  /** UCX's library version, e.g. '1.13.1'. */
  static ucxVersion(): string {
    return loadUcxAddon().ucxVersion();
  }

  /** True when UCX can register device memory directly (README.md "Device memory"). */
  get cudaSupported(): boolean {
    return this.raw.cudaSupported();
  }

  registerPool(memory: ArrayBuffer | ArrayBufferView, spec: PoolSpec): KvPool {
    checkSpec(spec);
    const region = this.call(() => this.raw.register(memory));
    const pool = new UcxPool(region.id, region.base, region.rkey, region.length, spec.blockBytes, spec.layout, memory);
    this.pools.set(region.id, pool);
    return pool;
  }

  allocatePool(spec: PoolSpec & { numBlocks: number }): KvPool {
    checkSpec(spec);
    if (!Number.isSafeInteger(spec.numBlocks) || spec.numBlocks <= 0) {
      throw new TandemError('invalid_argument', `pool of ${spec.numBlocks} blocks`);
    }
    const region = this.call(() => this.raw.allocate(spec.numBlocks * spec.blockBytes));
    const pool = new UcxPool(region.id, region.base, region.rkey, region.length, spec.blockBytes, spec.layout, region.buffer);
    this.pools.set(region.id, pool);
    return pool;
  }

  /**
   * Deregisters the pool; an allocated pool's buffer is detached (byteLength 0) and freed.
   * Refused (invalid_argument) while pulls into it are in flight.
   */
  releasePool(pool: KvPool): void {
    if (!this.pools.has(pool.regionId)) return;
    this.call(() => this.raw.deregister(pool.regionId));
    this.pools.delete(pool.regionId);
  }

  describe(pool: KvPool, blockIds: number[]): KvTransferDescriptor {
    for (const id of blockIds) {
      if (!Number.isSafeInteger(id) || id < 0 || id >= pool.numBlocks) {
        throw new TandemError('invalid_argument', `block ${id} is outside the pool (${pool.numBlocks} blocks)`);
      }
    }
    return {
      ucxWorkerAddress: this.workerAddress,
      remoteKey: pool.remoteKey,
      poolBaseAddress: pool.baseAddress,
      blockBytes: pool.blockBytes,
      blockIds,
      layout: pool.layout,
    };
  }

  async pull(
    descriptor: KvTransferDescriptor,
    pool: KvPool,
    localBlockIds: ArrayLike<number>,
    options: PullOptions = {},
  ): Promise<PullResult> {
    if (this.closed) throw new TandemError('unavailable', 'KV transfer agent is closed');
    checkDescriptor(descriptor);
    if (descriptor.layout !== pool.layout || descriptor.blockBytes !== pool.blockBytes) {
      throw new TandemError(
        'invalid_argument',
        `KV layout mismatch: remote ${descriptor.layout}/${descriptor.blockBytes} B, local ${pool.layout}/${pool.blockBytes} B`,
      );
    }
    for (let i = 0; i < localBlockIds.length; i++) {
      const id = localBlockIds[i]!;
      if (id >= pool.numBlocks) {
        throw new TandemError('invalid_argument', `local block ${id} is outside the pool (${pool.numBlocks} blocks)`);
      }
    }
    const ranges =
      options.slice === undefined
        ? blockRanges(descriptor.blockIds, localBlockIds, pool.blockBytes)
        : blockSliceRanges(descriptor.blockIds, localBlockIds, pool.blockBytes, options.slice.offset, options.slice.bytes);
    const blocks = descriptor.blockIds.length;
    const numRanges = ranges.length / RANGE_STRIDE;
    const timeoutMs = options.timeoutMs ?? this.defaultTimeoutMs;
    const counted = options.control !== true;
    if (counted) this.counters.started();
    try {
      const result = await this.raw.read(
        descriptor.ucxWorkerAddress,
        descriptor.poolBaseAddress,
        descriptor.remoteKey,
        pool.regionId,
        ranges,
        timeoutMs,
      );
      if (counted) this.counters.record({ ok: true, bytes: result.bytes, seconds: result.seconds, blocks, ranges: numRanges });
      return { bytes: result.bytes, seconds: result.seconds, blocks, ranges: numRanges };
    } catch (err) {
      const error = fromAddonError(err);
      if (counted) this.counters.record({ ok: false, bytes: 0, seconds: 0, blocks, ranges: numRanges, code: error.code });
      throw error;
    }
  }

  disconnect(workerAddress: string): void {
    if (this.closed) return;
    this.call(() => this.raw.disconnect(workerAddress));
  }

  /** Endpoint, region and read counts straight from the native agent. */
  stats(): RawAgentStats {
    return this.raw.stats();
  }

  /** Pending pulls reject with 'unavailable'; allocated pool buffers are detached. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.pools.clear();
    this.raw.close();
  }

  private call<T>(fn: () => T): T {
    if (this.closed) throw new TandemError('unavailable', 'KV transfer agent is closed');
    try {
      return fn();
    } catch (err) {
      throw fromAddonError(err);
    }
  }
}
