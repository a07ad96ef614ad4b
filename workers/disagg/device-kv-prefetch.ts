/**
 * Layer-wise streaming between device pools on one node (`kv_prefetch` on a decode worker whose
 * KV pool is in device memory; docs/disaggregation.md "Layer-wise streaming"): while the prefill
 * worker still computes, copy its hand-off layer range by layer range over the IPC mapping of its
 * pool (SIMT: shared memory) into staging blocks of this worker's own device pool, guided by the
 * prefill's layer progress (its engine's layerProgress(), published in a slot read over UCX).
 *
 *   kv_prefetch(params) ─▶ start: staging blocks from the reserved tail of the pool
 *       remoteLayerSource(slot) ─▶ streamLayers ─▶ kvCopyFromPeer(peer, src, staging, layers [a, b))
 *   decode request ─▶ DeviceKvImporter.pull ─▶ adopt(job): wait for the last layers, then one
 *       device copy staging → the sequence's blocks (kvCopyFromPeer on our own pool), free staging
 *   never claimed ─▶ dropped after `expireMs`; stream failed (prefill gone) ─▶ dropped at once
 *
 * The staging blocks are the last `reserved` blocks of the pool, which the scheduler never sees
 * (the worker starts its scheduler with numBlocks − reserved), so a prefetch never takes blocks
 * the scheduler counts on. A hand-off that does not fit them, or that is not a same-node device
 * peer, is declined and takes the whole-copy path.
 */
import type { KvTransferParams } from '../../proto/wire.js';
import type { KvImportJob } from '../engine-loop/index.js';
import type { NativeEngine } from '../engines/native/index.js';
import { blocksCovering, peerLayout, type KvLayoutDescriptor, type KvTransferAgent } from '../kv-transfer/index.js';
import { PrefetchTable, streamFromSlot, type LayerPrefetcher, type PrefetchHooks } from './prefetch-table.js';

/** Staging blocks a decode worker keeps out of its scheduler for layer-wise prefetches. */
export function stagingBlocksFor(numBlocks: number, contextTokens: number, blockSize: number): number {
  // Two full-context hand-offs in flight, at most a quarter of the pool.
  return Math.max(0, Math.min(Math.floor(numBlocks / 4), 2 * Math.ceil(contextTokens / blockSize)));
}

export type DevicePrefetchEngine = Pick<NativeEngine, 'kvCopyFromPeer' | 'kvExportHandle' | 'kvOpenPeer' | 'kvCopyLayout'>;

export interface DeviceKvPrefetcherOptions extends PrefetchHooks {
  agent: KvTransferAgent;
  engine: DevicePrefetchEngine;
  /** This pool's layout; staging blocks hold the hand-off in it (converted on the way). */
  layout: KvLayoutDescriptor;
  /** The reserved tail of the pool: blocks [first, first + count). */
  staging: { first: number; count: number };
  /** The mapped pool of the hand-off's prefill instance (the importer's peer cache), or undefined. */
  peerFor(source: KvTransferParams): number | undefined;
  expireMs: number;
  pullTimeoutMs: number;
}

export class DeviceKvPrefetcher implements LayerPrefetcher {
  private readonly table: PrefetchTable<number[]>;
  private readonly free: number[];
  private self: number | undefined;
  numAdopted = 0;

  constructor(private readonly options: DeviceKvPrefetcherOptions) {
    const { first, count } = options.staging;
    this.free = Array.from({ length: count }, (_, i) => first + count - 1 - i);
    this.table = new PrefetchTable<number[]>(options.expireMs, (blocks) => this.free.push(...blocks), options);
  }

  get size(): number {
    return this.table.size;
  }

  /** Staging blocks held by prefetches (the rest of the reserved tail is free). */
  get stagingBlocksInUse(): number {
    return this.options.staging.count - this.free.length;
  }

  start(source: KvTransferParams): boolean {
    const slot = source.kvLayerProgress;
    if (slot === undefined || source.kvDeviceHandle === undefined || this.table.has(source.transferId) || !(slot.numLayers >= 1)) return false;
    const local = this.options.layout;
    const remote = peerLayout(source.layout, source.kvLayout);
    if (remote === undefined || remote.numLayers !== local.numLayers || remote.numKvHeads !== local.numKvHeads || remote.headDim !== local.headDim || slot.numLayers !== local.numLayers) return false;
    // The hand-off's tokens in our block size, and the source blocks that hold them.
    const n = Math.ceil(source.numTokens / local.blockSize);
    const span = blocksCovering(0, source.numTokens, remote.blockSize);
    if (n === 0 || n > this.free.length || source.blockIds.length < span.numBlocks) return false;
    let peer: number | undefined;
    try {
      peer = this.options.peerFor(source);
    } catch {
      peer = undefined;
    }
    if (peer === undefined) return false;
    const blocks = this.free.splice(this.free.length - n, n).reverse();
    const srcIds = Int32Array.from(source.blockIds.slice(0, span.numBlocks));
    const dstIds = Int32Array.from(blocks);
    const { engine, agent } = this.options;
    this.table.add(source, blocks, (signal) =>
      streamFromSlot(agent, slot, this.options.pullTimeoutMs, signal, (range) => engine.kvCopyFromPeer(peer, srcIds, dstIds, [range.first, range.end], 0)),
    );
    return true;
  }

  async adopt(job: KvImportJob): Promise<'adopted' | 'failed' | 'none'> {
    const entry = this.table.take(job.source.transferId);
    if (entry === undefined) return 'none';
    const result = await entry.done;
    try {
      const n = job.localBlockIds.length;
      if (result === undefined || entry.staging.length < job.firstBlock + n) return 'failed';
      // One device copy inside our own pool: staging → the sequence's blocks, same layout.
      const self = this.selfPeer();
      await this.options.engine.kvCopyFromPeer(self, Int32Array.from(entry.staging.slice(job.firstBlock, job.firstBlock + n)), Int32Array.from(job.localBlockIds), undefined, 0);
      this.numAdopted++;
      return 'adopted';
    } catch {
      return 'failed';
    } finally {
      this.free.push(...entry.staging);
    }
  }

  close(): void {
    this.table.close();
  }

  /** Our own pool opened as a peer (the engine recognizes its own handle and maps nothing). */
  private selfPeer(): number {
    if (this.self !== undefined) return this.self;
    const handle = this.options.engine.kvExportHandle();
    if (handle === null) throw new Error('the device pool cannot be exported');
    this.self = this.options.engine.kvOpenPeer(handle, this.options.engine.kvCopyLayout);
    return this.self;
  }
}
