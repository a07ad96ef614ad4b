/**
 * The decode side of a hand-off into a device KV pool (a native engine on cuda or simt):
 * KvImportService's bookkeeping (always release the prefill's pins, recompute on failure),
 * with the bytes moved by the engine instead of into a host pool.
 *
 *   transport (transport-choice.ts)   how
 *   cuda-ipc (same node)              kvOpenPeer(handle) once per prefill instance, then one
 *                                     kvCopyFromPeer per hand-off: a gather kernel reading the
 *                                     mapped peer pool on a side stream, converting on the way
 *   ucx-host / staged / ucx-cuda      UCX read of the source's host blocks (its pool, or, for a
 *                                     device prefill, the host copy kv_stage asks it to make) into
 *                                     a staging region, then kvWriteBlocks (host → device, converting)
 *   a layer-wise prefetch (cuda-ipc)  the hand-off was streamed into staging blocks of our pool
 *                                     while the prefill computed (device-kv-prefetch.ts): one
 *                                     device copy into the sequence's blocks
 *
 * Two SIMT workers on one node take the IPC path too (their pools are shared memory mapped by
 * handle), so CI runs the code a GPU pair runs. Peers are mapped once and unmapped when the
 * prefill instance leaves discovery (closePeer) or at close().
 */
import type { InstanceId, KvTransferParams } from '../../proto/wire.js';
import type { KvImportJob } from '../engine-loop/index.js';
import type { NativeEngine } from '../engines/native/index.js';
import { blocksCovering, chooseTransport, legacyPlacement, peerLayout, type KvLayoutDescriptor, type KvPlacement } from '../kv-transfer/index.js';
import { poolBytes } from './converting-pull.js';
import { KvImportService, type KvImportOutcome, type KvImportServiceOptions, DEFAULT_PULL_TIMEOUT_MS } from './kv-importer.js';
import type { LayerPrefetcher } from './prefetch-table.js';

/** What the importer needs of the engine. */
export type DeviceKvEngine = Pick<NativeEngine, 'kvOpenPeer' | 'kvCopyFromPeer' | 'kvClosePeer' | 'kvWriteBlocks'>;

export interface DeviceKvImporterOptions extends KvImportServiceOptions {
  engine: DeviceKvEngine;
  layout: KvLayoutDescriptor;
  placement: KvPlacement;
}

/** SIMT pools are exported like CUDA ones: for the choice, a pair of them is a CUDA pair. */
function forChoice(p: KvPlacement, other: KvPlacement): KvPlacement {
  return p.deviceKind === 'simt' && other.deviceKind === 'simt' ? { ...p, deviceKind: 'cuda' } : p;
}

export class DeviceKvImporter extends KvImportService {
  private readonly peers = new Map<InstanceId, { handle: string; peer: number }>();
  private devicePrefetcher: LayerPrefetcher | undefined;
  numPeerCopies = 0;
  numStagedCopies = 0;

  constructor(private readonly device: DeviceKvImporterOptions) {
    super(device);
  }

  /**
   * Layer-wise streaming into staging blocks of this pool (device-kv-prefetch.ts): hand-offs it
   * prefetched are adopted from it. Set once, after construction (the prefetcher maps peers
   * through this importer).
   */
  useDevicePrefetcher(prefetcher: LayerPrefetcher): void {
    this.devicePrefetcher = prefetcher;
  }

  /** The prefill instance left discovery: unmap its pool. */
  closePeer(instanceId: InstanceId): void {
    const p = this.peers.get(instanceId);
    if (p === undefined) return;
    this.peers.delete(instanceId);
    this.device.engine.kvClosePeer(p.peer);
  }

  /** Unmaps the pools of prefill instances not in `alive` (discovery's current set). */
  retainPeers(alive: readonly InstanceId[]): void {
    const keep = new Set(alive);
    for (const id of [...this.peers.keys()]) if (!keep.has(id)) this.closePeer(id);
  }

  close(): void {
    for (const id of [...this.peers.keys()]) this.closePeer(id);
  }

  get numPeers(): number {
    return this.peers.size;
  }

  protected override async pull(job: KvImportJob): Promise<KvImportOutcome> {
    const { source } = job;
    const n = job.localBlockIds.length;
    if (n === 0) return { ok: true, blocks: 0, bytes: 0, seconds: 0 };
    const started = performance.now();
    if ((await this.devicePrefetcher?.adopt(job)) === 'adopted') {
      return { ok: true, blocks: n, bytes: n * source.blockBytes, seconds: (performance.now() - started) / 1000, transport: 'cuda-ipc', streamed: true };
    }
    const local = this.device.layout;
    const remote = peerLayout(source.layout, source.kvLayout);
    const sourcePlacement = source.kvPlacement ?? legacyPlacement();
    const choice = chooseTransport(forChoice(sourcePlacement, this.device.placement), forChoice(this.device.placement, sourcePlacement));
    const ipc = choice.transport === 'cuda-ipc' && source.kvDeviceHandle !== undefined;
    const transport = ipc ? 'cuda-ipc' : choice.transport;
    const fail = (error: unknown): KvImportOutcome => ({ ok: false, blocks: 0, bytes: 0, seconds: 0, transport, error });
    if (remote === undefined || remote.numLayers !== local.numLayers || remote.numKvHeads !== local.numKvHeads || remote.headDim !== local.headDim) {
      return fail(new Error(`the prefill pool's layout (${source.layout}) is not this model's`));
    }
    const conversion = remote.blockSize !== local.blockSize || remote.dtype !== local.dtype ? (remote.blockSize !== local.blockSize ? (remote.dtype !== local.dtype ? 'block_size+dtype' : 'block_size') : 'dtype') : 'none';
    // Tokens [from, to) land in the local blocks (those before are a local prefix hit); the
    // source span starts at the block holding `from`, `offset` tokens into it.
    const from = job.firstBlock * local.blockSize;
    const to = Math.min(job.numTokens, (job.firstBlock + n) * local.blockSize);
    const span = blocksCovering(from, to, remote.blockSize);
    const offset = from - span.firstBlock * remote.blockSize;
    if (source.blockIds.length < span.firstBlock + span.numBlocks) {
      return fail(new Error(`kvTransfer names ${source.blockIds.length} blocks, ${span.firstBlock + span.numBlocks} needed`));
    }
    const srcIds = Int32Array.from(source.blockIds.slice(span.firstBlock, span.firstBlock + span.numBlocks));
    const dstIds = Int32Array.from(job.localBlockIds);
    const remoteCopyLayout = { blockSize: remote.blockSize, dtype: remote.dtype, numLayers: remote.numLayers, numKvHeads: remote.numKvHeads, headDim: remote.headDim };
    const t0 = performance.now();
    try {
      let bytes: number;
      if (ipc) {
        const peer = this.peer(source, remoteCopyLayout);
        // No timeout: a local device copy ends on its own, and the import must not settle while
        // the copy may still write into the job's blocks.
        await this.device.engine.kvCopyFromPeer(peer, srcIds, dstIds, undefined, offset);
        bytes = span.numBlocks * source.blockBytes;
        this.numPeerCopies++;
      } else {
        bytes = await this.staged(source, srcIds, dstIds, offset);
        this.numStagedCopies++;
      }
      return { ok: true, blocks: n, bytes, seconds: (performance.now() - t0) / 1000, transport, conversion };
    } catch (err) {
      return { ...fail(err), conversion };
    }
  }

  /** The mapped pool of the hand-off's prefill instance (for the layer-wise prefetcher), if it can be mapped. */
  peerFor(source: KvTransferParams): number | undefined {
    const remote = peerLayout(source.layout, source.kvLayout);
    if (remote === undefined || source.kvDeviceHandle === undefined) return undefined;
    const sourcePlacement = source.kvPlacement ?? legacyPlacement();
    const choice = chooseTransport(forChoice(sourcePlacement, this.device.placement), forChoice(this.device.placement, sourcePlacement));
    if (choice.transport !== 'cuda-ipc') return undefined;
    return this.peer(source, { blockSize: remote.blockSize, dtype: remote.dtype, numLayers: remote.numLayers, numKvHeads: remote.numKvHeads, headDim: remote.headDim });
  }

  private peer(source: KvTransferParams, layout: object): number {
    const handle = source.kvDeviceHandle!;
    const cached = this.peers.get(source.prefillInstanceId);
    if (cached !== undefined && cached.handle === handle) return cached.peer;
    if (cached !== undefined) this.closePeer(source.prefillInstanceId);
    const bytes = Buffer.from(handle, 'base64');
    // The handle's header names the pool's size ("tandem-kv-ipc/1 <kind> <bytes>\n"); the
    // engine checks it against the layout.
    const header = /^tandem-kv-ipc\/1 \S+ (\d+)\n/.exec(bytes.subarray(0, 64).toString('latin1'));
    if (header === null) throw new Error('kvDeviceHandle is not a KV pool handle');
    const numBlocks = Math.floor(Number(header[1]) / source.blockBytes);
    const peer = this.device.engine.kvOpenPeer(bytes, { ...layout, numBlocks });
    this.peers.set(source.prefillInstanceId, { handle, peer });
    return peer;
  }

  /** UCX read of the source's host blocks into a staging region, then host → device here. */
  private async staged(source: KvTransferParams, srcIds: Int32Array, dstIds: Int32Array, offset: number): Promise<number> {
    const { agent } = this.device;
    if (source.kvDeviceHandle !== undefined) await this.device.stage?.(source);
    const staging = agent.allocatePool({ numBlocks: srcIds.length, blockBytes: source.blockBytes, layout: source.layout });
    try {
      const stagingIds = Array.from({ length: srcIds.length }, (_, i) => i);
      const result = await agent.pull(
        { ucxWorkerAddress: source.ucxWorkerAddress, remoteKey: source.remoteKey, poolBaseAddress: source.poolBaseAddress, blockBytes: source.blockBytes, layout: source.layout, blockIds: Array.from(srcIds) },
        staging,
        stagingIds,
        { timeoutMs: this.device.pullTimeoutMs ?? DEFAULT_PULL_TIMEOUT_MS },
      );
      const remote = peerLayout(source.layout, source.kvLayout)!;
      await this.device.engine.kvWriteBlocks(dstIds, poolBytes(staging), { blockSize: remote.blockSize, dtype: remote.dtype }, undefined, offset);
      return result.bytes;
    } finally {
      try {
        agent.releasePool(staging);
      } catch {
        // Freed at the agent's close.
      }
    }
  }
}
