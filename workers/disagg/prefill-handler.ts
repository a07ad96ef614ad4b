/**
 * The prefill worker's `generate` and `kv_release` (docs/disaggregation.md "What happens to a request", steps 1 and 3).
 *
 *   generate(prefillOnly req) ─▶ EngineLoop (max_tokens 1, pinOnFinish) ─▶ first token
 *      ├─ the first token ends the request (stop id, or max_tokens 1) → free blocks, final delta
 *      └─ otherwise → PinnedBlocks.pin → ONE delta { first, usage, finishReason, kvTransfer }
 *   kv_release({ transferId }) ─▶ PinnedBlocks.release → EngineLoop.releasePinned
 *
 * A cancelled prefill (the caller left before the answer) frees its blocks through the engine
 * loop; once the answer with kvTransfer is out, only kv_release or the timeout free them.
 *
 * Layer-wise streaming (request.kvLayerStreaming, worker --kv-layer-streaming): once the step
 * that completes the prompt has written its first layer, an EARLY delta goes out first:
 *   { tokenIds: [], kvTransfer: { transferId, blockIds, …, kvLayerProgress: slot } }
 * and the slot (layer-progress-region.ts) follows the step's layers. The answer then pins
 * under the same transferId. The slot closes when the pin ends or no hand-off follows, so a
 * decode worker still reading it fails instead of copying freed blocks.
 */
import type { InstanceId, KvLayoutDescriptor, KvPlacement, KvReleaseRequest, KvReleaseResponse, KvTransferParams, PreprocessedRequest, TokenDelta, TokenLogprob } from '../../proto/wire.js';
import type { KvStageRequest, KvStageResponse } from '../../proto/wire.js';
import type { RequestContext } from '../../runtime/index.js';
import type { EngineLoop } from '../engine-loop/index.js';
import type { KvPool, KvTransferAgent } from '../kv-transfer/index.js';
import type { PinnedBlocks } from './pinned-blocks.js';
import type { LayerReadySource } from './layer-ready.js';
import type { LayerPublisher } from './layer-publisher.js';
import { slotToWire, type LayerProgressRegion } from './layer-progress-region.js';

/** A prefill worker started with --kv-layer-streaming. */
export interface PrefillStreaming {
  publisher: LayerPublisher;
  region: LayerProgressRegion;
}


export interface PrefillHandlerDeps {
  loop: EngineLoop;
  agent: KvTransferAgent;
  pool: KvPool;
  pinned: PinnedBlocks;
  instanceId: InstanceId;
  /** Sent with each hand-off so the decode side can convert and pick a transport. */
  layout?: KvLayoutDescriptor;
  placement?: KvPlacement;
  /**
   * A device pool (device-kv-setup.ts): copies blocks into the host pool UCX serves, on a decode
   * worker's `kv_stage` call (the staged path), and the handle a same-node peer maps the pool by.
   */
  stage?(blockIds: number[]): Promise<void>;
  deviceHandle?: string;
  streaming?: PrefillStreaming;
}

export class PrefillHandler {
  /** Device pools: block ids of each open hand-off, for kv_stage. */
  private readonly pinnedIds = new Map<string, number[]>();
  /** Streaming: the progress slot of each announced hand-off. */
  private readonly slots = new Map<string, number>();

  constructor(private readonly deps: PrefillHandlerDeps) {}

  /** `{ns}/prefill/generate`. A request without prefillOnly runs as an ordinary (aggregated) one. */
  async *generate(request: PreprocessedRequest, ctx: RequestContext): AsyncGenerator<TokenDelta> {
    const { loop, instanceId } = this.deps;
    if (!request.prefillOnly) {
      for await (const delta of loop.generate(request, ctx.signal)) yield { ...delta, instanceId };
      return;
    }
    const streaming = request.kvLayerStreaming === true ? this.deps.streaming : undefined;
    let seqId: number | undefined;
    // Streaming: the early delta, made synchronously at the first written layer (the sequence
    // is still running then), and a wake-up for the loop below.
    let early: TokenDelta | undefined;
    let wake: () => void = () => undefined;
    let woken: Promise<'early'> | undefined;
    const onAdded = (id: number): void => {
      seqId = id;
      if (streaming === undefined) return;
      woken = new Promise((resolve) => (wake = () => resolve('early')));
      const source = streaming.publisher.watch(id, () => {
        early = this.announce(id, request.tokenIds.length, source);
        wake();
      });
    };
    let announced: string | undefined;
    let completed = false;
    const tokenIds: number[] = [];
    let logprobs: TokenLogprob[] | undefined;
    let last: TokenDelta | undefined;
    const it = loop.generate(request, ctx.signal, { pinOnFinish: true, onAdded })[Symbol.asyncIterator]();
    try {
      let next = it.next();
      for (;;) {
        if (early !== undefined) {
          // Before anything else, even a first token that came meanwhile.
          const delta: TokenDelta = early;
          early = undefined;
          announced = delta.kvTransfer!.transferId;
          yield delta;
          continue;
        }
        const won = woken !== undefined ? await Promise.race([next, woken]) : await next;
        if (won === 'early') {
          woken = undefined;
          continue;
        }
        if (won.done) break;
        const delta = won.value;
        tokenIds.push(...delta.tokenIds);
        if (delta.logprobs) (logprobs ??= []).push(...delta.logprobs);
        last = delta;
        next = it.next();
      }
      if (early !== undefined) {
        const delta: TokenDelta = early;
        early = undefined;
        announced = delta.kvTransfer!.transferId;
        yield delta;
      }
      completed = true;
    } finally {
      // Thrown, or the caller stopped reading: no pin will follow, so the slot goes now.
      const id = completed ? undefined : (announced ?? (early as TokenDelta | undefined)?.kvTransfer?.transferId);
      if (id !== undefined) this.closeSlot(id);
      if (seqId !== undefined) streaming?.publisher.unwatch(seqId);
      await it.return?.(undefined);
    }
    const answer: TokenDelta = { tokenIds, instanceId };
    if (logprobs !== undefined) answer.logprobs = logprobs;
    if (last?.usage !== undefined) answer.usage = last.usage;
    answer.finishReason = last?.finishReason ?? 'cancelled';
    const table = seqId === undefined ? undefined : loop.scheduler.pinnedBlockTable(seqId);
    const endsHere = answer.finishReason !== 'length' || request.stop.maxTokens <= 1 || tokenIds.length === 0;
    if (table === undefined || endsHere) {
      // Nothing to hand off (the first token is the whole answer, or the call was cancelled).
      if (announced !== undefined) this.closeSlot(announced);
      if (seqId !== undefined) loop.releasePinned(seqId);
      yield answer;
      return;
    }
    answer.kvTransfer = this.pin(seqId!, table, request.tokenIds.length, announced);
    yield answer;
  }

  /** A pin ended (released, timed out, shutdown): its progress slot goes back. */
  pinEnded(transferId: string): void {
    this.closeSlot(transferId);
  }

  /**
   * The early delta of a streamed hand-off: the blocks the running step writes, a transfer id
   * the answer will pin under, and the progress slot that follows the step's layers.
   */
  private announce(seqId: number, numTokens: number, source: LayerReadySource): TokenDelta | undefined {
    const { loop, pinned, instanceId } = this.deps;
    const streaming = this.deps.streaming!;
    const table = loop.scheduler.getSequence(seqId)?.blockTableView();
    const n = loop.scheduler.blockManager.blocksFor(numTokens);
    if (table === undefined || table.length < n) return undefined;
    const blockIds = Array.from(table.subarray(0, n));
    const slot = streaming.region.open();
    if (slot === undefined) return undefined;
    const transferId = pinned.newId();
    let params: KvTransferParams;
    try {
      params = this.params(blockIds, numTokens, transferId);
    } catch {
      streaming.region.close(slot);
      return undefined;
    }
    this.slots.set(transferId, slot);
    streaming.region.publish(slot, source.layersReady());
    void this.follow(transferId, slot, source);
    return { tokenIds: [], instanceId, kvTransfer: { ...params, kvLayerProgress: slotToWire(streaming.region.describe(slot, source.numLayers)) } };
  }

  /** Copies the step's layer count into the slot until every layer is written or the hand-off ends. */
  private async follow(transferId: string, slot: number, source: LayerReadySource): Promise<void> {
    let have = source.layersReady();
    while (have < source.numLayers) {
      try {
        have = await source.whenBeyond(have);
      } catch {
        return;
      }
      if (this.slots.get(transferId) !== slot) return;
      this.deps.streaming!.region.publish(slot, have);
    }
  }

  private closeSlot(transferId: string): void {
    const slot = this.slots.get(transferId);
    if (slot === undefined) return;
    this.slots.delete(transferId);
    this.deps.streaming?.region.close(slot);
  }

  /** `{ns}/prefill/kv_release`. */
  async *release(request: KvReleaseRequest): AsyncGenerator<KvReleaseResponse> {
    if (typeof request?.transferId === 'string') this.pinnedIds.delete(request.transferId);
    if (typeof request?.transferId === 'string') this.closeSlot(request.transferId);
    yield { released: typeof request?.transferId === 'string' && this.deps.pinned.release(request.transferId) };
  }

  /** `{ns}/prefill/kv_stage` (device pools): device → host copy of a pinned hand-off's blocks. */
  async *stageBlocks(request: KvStageRequest): AsyncGenerator<KvStageResponse> {
    const id = typeof request?.transferId === 'string' ? request.transferId : '';
    const blockIds = this.pinnedIds.get(id);
    if (this.deps.stage === undefined || blockIds === undefined || !this.deps.pinned.has(id)) {
      yield { staged: false };
      return;
    }
    await this.deps.stage(blockIds);
    yield { staged: this.deps.pinned.has(id) };
  }

  private pin(seqId: number, table: Int32Array, numTokens: number, announcedId?: string): KvTransferParams {
    const { pinned, loop } = this.deps;
    const blockIds = Array.from(table.subarray(0, loop.scheduler.blockManager.blocksFor(numTokens)));
    let params;
    try {
      params = this.params(blockIds, numTokens, announcedId ?? '');
    } catch (err) {
      loop.releasePinned(seqId);
      throw err;
    }
    const transferId = pinned.pin(seqId, blockIds.length, ...(announcedId !== undefined ? [announcedId] : []));
    params.transferId = transferId;
    if (this.deps.stage !== undefined) {
      // Pins end by release or timeout (PinnedBlocks); drop the ids of ended ones now and then.
      if (this.pinnedIds.size > 2 * pinned.size + 64) for (const id of [...this.pinnedIds.keys()]) if (!pinned.has(id)) this.pinnedIds.delete(id);
      this.pinnedIds.set(transferId, blockIds);
    }
    return params;
  }

  /** The hand-off's wire params for these blocks (throws when the agent cannot describe them). */
  private params(blockIds: number[], numTokens: number, transferId: string): KvTransferParams {
    const { agent, pool, instanceId } = this.deps;
    const descriptor = agent.describe(pool, blockIds);
    const { layout, placement } = this.deps;
    return {
      prefillInstanceId: instanceId,
      numTokens,
      transferId,
      ...descriptor,
      blockIds,
      ...(layout !== undefined ? { kvLayout: layout } : {}),
      ...(placement !== undefined ? { kvPlacement: placement } : {}),
      ...(this.deps.deviceHandle !== undefined ? { kvDeviceHandle: this.deps.deviceHandle } : {}),
    };
  }
}
