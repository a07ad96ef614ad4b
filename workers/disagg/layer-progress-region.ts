/**
 * Layer readiness across processes: "a per-layer sequence number the decode side polls"
 * (issue 24). The prefill worker keeps one 8-byte slot per open hand-off in memory its
 * transfer agent registered; the decode worker reads the slot with the same one-sided UCX
 * read that moves the KV, and feeds the count to streamLayers() as a LayerReadySource.
 *
 *   slot = u32 layersReady ‖ u32 generation        (little-endian)
 *
 * The generation changes every time a slot is reused, so a decode worker polling a hand-off
 * that ended (released, timed out, prefill restarted) fails instead of reading another
 * hand-off's progress.
 */
import type { KvLayerProgressSlot } from '../../proto/wire.js';
import { TandemError } from '../../runtime/errors.js';
import type { KvPool, KvTransferAgent, KvTransferDescriptor } from '../kv-transfer/index.js';
import { PolledLayerSource, type LayerReadySource } from './layer-ready.js';

export const LAYER_PROGRESS_LAYOUT = 'layer-progress.v1';
const SLOT_BYTES = 8;

/** What the decode side needs to poll one hand-off's progress; JSON, sent with the hand-off. */
export interface RemoteLayerProgress {
  descriptor: KvTransferDescriptor;
  generation: number;
  numLayers: number;
}

function viewOf(pool: KvPool): DataView {
  const b = pool.buffer;
  return b instanceof ArrayBuffer ? new DataView(b) : new DataView(b.buffer, b.byteOffset, b.byteLength);
}

/** Prefill side: the slots, in one small pool of the agent's memory. */
export class LayerProgressRegion {
  private readonly pool: KvPool;
  private readonly view: DataView;
  private readonly freeSlots: number[];
  private readonly generations: Uint32Array;

  constructor(
    private readonly agent: KvTransferAgent,
    readonly numSlots: number,
  ) {
    this.pool = agent.allocatePool({ numBlocks: numSlots, blockBytes: SLOT_BYTES, layout: LAYER_PROGRESS_LAYOUT });
    this.view = viewOf(this.pool);
    this.freeSlots = Array.from({ length: numSlots }, (_, i) => numSlots - 1 - i);
    this.generations = new Uint32Array(numSlots);
  }

  /** A slot at 0 layers for a new hand-off, or undefined when all are taken (then no streaming). */
  open(): number | undefined {
    const slot = this.freeSlots.pop();
    if (slot === undefined) return undefined;
    this.generations[slot] = (this.generations[slot]! + 1) >>> 0;
    this.view.setUint32(slot * SLOT_BYTES, 0, true);
    this.view.setUint32(slot * SLOT_BYTES + 4, this.generations[slot]!, true);
    return slot;
  }

  publish(slot: number, layersReady: number): void {
    this.view.setUint32(slot * SLOT_BYTES, layersReady, true);
  }

  /** The hand-off is over; a decode worker still polling the slot fails on the generation. */
  close(slot: number): void {
    this.generations[slot] = (this.generations[slot]! + 1) >>> 0;
    this.view.setUint32(slot * SLOT_BYTES + 4, this.generations[slot]!, true);
    this.freeSlots.push(slot);
  }

  describe(slot: number, numLayers: number): RemoteLayerProgress {
    return { descriptor: this.agent.describe(this.pool, [slot]), generation: this.generations[slot]!, numLayers };
  }

  release(): void {
    this.agent.releasePool(this.pool);
  }
}

/**
 * Decode side: a LayerReadySource that reads the remote slot over UCX every `intervalMs`
 * while waited on. `close()` frees its 8-byte landing pool.
 */
export function remoteLayerSource(
  agent: KvTransferAgent,
  remote: RemoteLayerProgress,
  options: { intervalMs?: number; timeoutMs?: number; signal?: AbortSignal } = {},
): LayerReadySource & { close(): void } {
  const landing = agent.allocatePool({ numBlocks: 1, blockBytes: SLOT_BYTES, layout: LAYER_PROGRESS_LAYOUT });
  const view = viewOf(landing);
  const read = async (): Promise<number> => {
    // A waiter that gave up (prefetch dropped) stops polling a slot that may never move.
    if (options.signal?.aborted) throw new TandemError('cancelled', 'stopped reading the layer progress');
    await agent.pull(remote.descriptor, landing, [0], { timeoutMs: options.timeoutMs ?? 5_000, control: true });
    if (view.getUint32(4, true) !== remote.generation) throw new TandemError('unavailable', 'the hand-off ended on the prefill worker (progress slot reused)');
    return view.getUint32(0, true);
  };
  const source = new PolledLayerSource(remote.numLayers, read, options.intervalMs ?? 0.2);
  return {
    numLayers: remote.numLayers,
    layersReady: () => source.layersReady(),
    whenBeyond: (have) => source.whenBeyond(have),
    doneAtMs: () => source.doneAtMs(),
    close: () => agent.releasePool(landing),
  };
}

/** The slot as it travels in KvTransferParams.kvLayerProgress. */
export function slotToWire(remote: RemoteLayerProgress): KvLayerProgressSlot {
  return { ...remote.descriptor, generation: remote.generation, numLayers: remote.numLayers };
}

export function slotFromWire(slot: KvLayerProgressSlot): RemoteLayerProgress {
  const { generation, numLayers, ...descriptor } = slot;
  return { descriptor, generation, numLayers };
}
