/**
 * The copy seam between the engine pool (G1) and the tiers below it: read whole blocks out of
 * G1, write whole blocks into G1. Always whole blocks, always batched between steps.
 *
 * HostPoolCopier serves pools in host memory (the native CPU engine's `kvPool()` ArrayBuffer,
 * one contiguous region per block: native/src/core/kv_layout.h). A device pool gets its own
 * implementation over the engine's async block reads/writes; nothing else changes. Calls take
 * effect in call order (a read issued before a write to the same block sees the old bytes).
 */
export interface BlockCopier {
  /** Bytes of one block. */
  readonly blockBytes: number;
  /** No real bytes move (the mocker): reads return empty arrays and the host tier keeps no slab. */
  readonly virtual?: boolean;
  /** Copies of G1 blocks `blockIds`, in order. Resolves once the bytes are safe from the next step. */
  readBlocks(blockIds: readonly number[]): Promise<Uint8Array[]>;
  /** Writes `data[i]` into G1 block `blockIds[i]`. `data` may be reused once this resolves. */
  writeBlocks(blockIds: ArrayLike<number>, data: readonly Uint8Array[]): Promise<void>;
}

export class HostPoolCopier implements BlockCopier {
  private readonly pool: Uint8Array;

  constructor(
    pool: ArrayBuffer,
    readonly blockBytes: number,
  ) {
    if (!(Number.isSafeInteger(blockBytes) && blockBytes > 0) || pool.byteLength % blockBytes !== 0) {
      throw new RangeError(`KV pool of ${pool.byteLength} bytes is not a whole number of ${blockBytes}-byte blocks`);
    }
    this.pool = new Uint8Array(pool);
  }

  readBlocks(blockIds: readonly number[]): Promise<Uint8Array[]> {
    const bb = this.blockBytes;
    return Promise.resolve(blockIds.map((id) => this.pool.slice(id * bb, (id + 1) * bb)));
  }

  writeBlocks(blockIds: ArrayLike<number>, data: readonly Uint8Array[]): Promise<void> {
    const bb = this.blockBytes;
    for (let i = 0; i < blockIds.length; i++) {
      const src = data[i]!;
      if (src.byteLength !== bb) return Promise.reject(new RangeError(`block of ${src.byteLength} bytes, expected ${bb}`));
      this.pool.set(src, blockIds[i]! * bb);
    }
    return Promise.resolve();
  }
}

/** What a device-pool engine offers for moving whole blocks to and from host memory (NativeEngine). */
export interface DeviceBlockPort {
  kvReadBlocks(ids: Int32Array, dst: Uint8Array): Promise<void>;
  kvWriteBlocks(ids: Int32Array, src: Uint8Array): Promise<void>;
}

/**
 * A pool in device memory (the CUDA backend; the SIMT harness in tests): one batched read or
 * write per call through the engine's pinned staging, on its native thread, never per block.
 *
 * Calls run one after another, in call order. The engine runs each as its own native work
 * item, and its KV lock excludes them but does not order them: an onboard write issued after
 * the read of an evicted block (the same G1 block, just reallocated) could otherwise land
 * first, and the host tier would keep the onboarded sequence's bytes under the evicted block's
 * hash. The engine's lock serializes them anyway, so the queue costs no parallelism.
 */
export class DevicePoolCopier implements BlockCopier {
  private tail: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly port: DeviceBlockPort,
    readonly blockBytes: number,
  ) {
    if (!(Number.isSafeInteger(blockBytes) && blockBytes > 0)) throw new RangeError(`block bytes must be a positive integer, got ${blockBytes}`);
  }

  readBlocks(blockIds: readonly number[]): Promise<Uint8Array[]> {
    const bb = this.blockBytes;
    const ids = Int32Array.from(blockIds);
    const out = new Uint8Array(ids.length * bb);
    return this.inOrder(async () => {
      await this.port.kvReadBlocks(ids, out);
      return blockIds.map((_, i) => out.subarray(i * bb, (i + 1) * bb));
    });
  }

  writeBlocks(blockIds: ArrayLike<number>, data: readonly Uint8Array[]): Promise<void> {
    const bb = this.blockBytes;
    const src = new Uint8Array(blockIds.length * bb);
    for (let i = 0; i < blockIds.length; i++) {
      const block = data[i]!;
      if (block.byteLength !== bb) return Promise.reject(new RangeError(`block of ${block.byteLength} bytes, expected ${bb}`));
      src.set(block, i * bb);
    }
    // Copied now: the caller may reuse `data` once this resolves, and the queue may start it later.
    const ids = Int32Array.from(blockIds);
    return this.inOrder(() => this.port.kvWriteBlocks(ids, src));
  }

  /** Starts `fn` once every call issued before it has settled. */
  private inOrder<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.tail.then(fn, fn);
    this.tail = next.catch(() => undefined);
    return next;
  }
}

/**
 * The mocker's copier: no bytes, only time. An onboard write takes blocks × blockBytes over the
 * host→device bandwidth (divided by the speedup ratio); an offload read is free, as a device
 * offload overlaps the step on a side stream.
 */
export class SimulatedCopier implements BlockCopier {
  readonly virtual = true;
  /** Simulated (unscaled) milliseconds spent onboarding. */
  simulatedMs = 0;

  constructor(
    readonly blockBytes: number,
    private readonly bytesPerSec: number,
    private readonly speedupRatio = 1,
  ) {}

  readBlocks(blockIds: readonly number[]): Promise<Uint8Array[]> {
    return Promise.resolve(blockIds.map(() => new Uint8Array(0)));
  }

  async writeBlocks(blockIds: ArrayLike<number>): Promise<void> {
    const ms = ((blockIds.length * this.blockBytes) / this.bytesPerSec) * 1000;
    this.simulatedMs += ms;
    await sleepMs(ms / this.speedupRatio);
  }
}

export function sleepMs(ms: number): Promise<void> {
  return ms >= 1 ? new Promise((r) => setTimeout(r, ms)) : new Promise((r) => setImmediate(r));
}
