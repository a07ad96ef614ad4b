/**
 * Decode side of layer-wise streaming in a worker process (`kv_prefetch`, proto/kv-prefetch.ts):
 * copy a hand-off layer range by layer range while the prefill worker still computes it, into
 * a staging pool reserved for the transfer, and hand the blocks to the decode request that
 * names the same transferId.
 *
 *   kv_prefetch(params) ─▶ start: staging pool (params.blockIds.length blocks)
 *       remoteLayerSource(slot) ─▶ streamLayers ─▶ agent.pull(slice = layers [a, b))
 *   decode request arrives ─▶ KvImportService.pull ─▶ adopt(job): wait for the last layers,
 *       memcpy staging → the sequence's blocks, free staging   (failed → today's whole pull)
 *   never claimed ─▶ dropped after `expireMs` (--kv-pull-timeout): polling stops, staging freed
 *   stream failed (prefill gone, slot closed) ─▶ dropped at once
 *
 * Host pools of the same layout only (the mocker's stamped pool, the native CPU pool); other
 * hand-offs are declined and take today's path. The staging pool is memory outside the
 * engine's KV pool, so a prefetch never takes blocks the scheduler counts on.
 */
import type { KvTransferParams } from '../../proto/wire.js';
import type { KvImportJob } from '../engine-loop/index.js';
import type { KvPool, KvTransferAgent, KvTransferDescriptor } from '../kv-transfer/index.js';
import type { LayerStreamResult } from './layer-ready.js';
import { PrefetchTable, streamFromSlot, type LayerPrefetcher } from './prefetch-table.js';

const ADOPT_SLICE_BYTES = 4 << 20;

export interface KvPrefetcherOptions {
  agent: KvTransferAgent;
  /** The engine's (host) KV pool that adopted blocks land in. */
  pool: KvPool;
  /** Drop a prefetch no decode request claimed after this long. */
  expireMs: number;
  /** Per UCX read (slot polls and layer copies). */
  pullTimeoutMs: number;
  /** Every layer landed (for the hidden-share metric and the log). */
  onStreamed?(source: KvTransferParams, result: LayerStreamResult): void;
  /** The stream failed (its staging is freed); `open`: prefetches still held. */
  onFailed?(source: KvTransferParams, err: unknown, open: number): void;
}

function bytesOf(pool: KvPool): Uint8Array | undefined {
  const b = pool.buffer;
  if (b instanceof ArrayBuffer) return new Uint8Array(b);
  if (ArrayBuffer.isView(b)) return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
  return undefined;
}

export class KvPrefetcher implements LayerPrefetcher {
  private readonly table: PrefetchTable<KvPool>;
  /**
   * One staging pool kept after use: a fresh one costs a page fault per 4 KiB on its first
   * copy, which on a CPU box costs more than the copy itself.
   */
  private spare: KvPool | undefined;
  numAdopted = 0;
  private closed = false;

  constructor(private readonly options: KvPrefetcherOptions) {
    this.table = new PrefetchTable<KvPool>(options.expireMs, (staging) => this.free(staging), options);
  }

  /** Prefetches in flight or waiting for their decode request. */
  get size(): number {
    return this.table.size;
  }

  get numStarted(): number {
    return this.table.numStarted;
  }

  get numExpired(): number {
    return this.table.numExpired;
  }

  /** Starts copying; false when this hand-off cannot stream here (then the decode request pulls it whole). */
  start(source: KvTransferParams): boolean {
    const { agent, pool } = this.options;
    const slot = source.kvLayerProgress;
    if (slot === undefined || this.table.has(source.transferId) || source.kvDeviceHandle !== undefined) return false;
    if (source.layout !== pool.layout || source.blockBytes !== pool.blockBytes || bytesOf(pool) === undefined) return false;
    if (!(slot.numLayers >= 1) || source.blockBytes % slot.numLayers !== 0 || source.blockIds.length === 0) return false;
    const n = source.blockIds.length;
    const staging = this.stagingFor(n, source);
    const remote: KvTransferDescriptor = {
      ucxWorkerAddress: source.ucxWorkerAddress,
      remoteKey: source.remoteKey,
      poolBaseAddress: source.poolBaseAddress,
      blockBytes: source.blockBytes,
      layout: source.layout,
      blockIds: source.blockIds,
    };
    const into = Array.from({ length: n }, (_, i) => i);
    const layerBytes = source.blockBytes / slot.numLayers;
    this.table.add(source, staging, (signal) =>
      streamFromSlot(agent, slot, this.options.pullTimeoutMs, signal, async (range) => {
        await agent.pull(remote, staging, into, { slice: { offset: range.first * layerBytes, bytes: (range.end - range.first) * layerBytes }, timeoutMs: this.options.pullTimeoutMs });
      }),
    );
    return true;
  }

  /**
   * The decode request for a prefetched transfer: waits for the last layers, then copies the
   * job's blocks out of staging. 'none' when nothing was prefetched for it.
   */
  async adopt(job: KvImportJob): Promise<'adopted' | 'failed' | 'none'> {
    const entry = this.table.take(job.source.transferId);
    if (entry === undefined) return 'none';
    const result = await entry.done;
    try {
      const n = job.localBlockIds.length;
      if (result === undefined || entry.source.blockIds.length < job.firstBlock + n) return 'failed';
      const bs = entry.source.blockBytes;
      const from = bytesOf(entry.staging)!;
      const to = bytesOf(this.options.pool)!;
      // In slices of ADOPT_SLICE_BYTES with a turn of the event loop between them: an 8B-shaped
      // 4k-token hand-off is 512 MiB, far too long to copy in one go on the loop.
      let since = 0;
      for (let i = 0; i < n; i++) {
        const s = (job.firstBlock + i) * bs;
        to.set(from.subarray(s, s + bs), job.localBlockIds[i]! * bs);
        since += bs;
        if (since >= ADOPT_SLICE_BYTES && i + 1 < n) {
          since = 0;
          await new Promise<void>((resolve) => setImmediate(resolve));
        }
      }
      this.numAdopted++;
      return 'adopted';
    } finally {
      this.free(entry.staging);
    }
  }

  private stagingFor(n: number, source: KvTransferParams): KvPool {
    const spare = this.spare;
    if (spare !== undefined && spare.numBlocks >= n && spare.blockBytes === source.blockBytes && spare.layout === source.layout) {
      this.spare = undefined;
      return spare;
    }
    // Whole powers of two, so a spare fits the next hand-offs of similar size.
    return this.options.agent.allocatePool({ numBlocks: 2 ** Math.ceil(Math.log2(n)), blockBytes: source.blockBytes, layout: source.layout });
  }

  private free(staging: KvPool): void {
    if (!this.closed && (this.spare === undefined || this.spare.numBlocks < staging.numBlocks)) {
      const old = this.spare;
      this.spare = staging;
      if (old === undefined) return;
      staging = old;
    }
    try {
      this.options.agent.releasePool(staging);
    } catch {
      // The agent closed first (shutdown): its pools went with it.
    }
  }

  /** Worker shutdown: stop every prefetch (staging goes back as each settles). */
  close(): void {
    this.closed = true;
    if (this.spare !== undefined) this.free(this.spare);
    this.spare = undefined;
    this.table.close();
  }
}
