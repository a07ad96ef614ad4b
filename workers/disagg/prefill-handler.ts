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
 */
import type { InstanceId, KvLayoutDescriptor, KvPlacement, KvReleaseRequest, KvReleaseResponse, KvTransferParams, PreprocessedRequest, TokenDelta, TokenLogprob } from '../../proto/wire.js';
import type { KvStageRequest, KvStageResponse } from '../../proto/wire.js';
import type { RequestContext } from '../../runtime/index.js';
import type { EngineLoop } from '../engine-loop/index.js';
import type { KvPool, KvTransferAgent } from '../kv-transfer/index.js';
import type { PinnedBlocks } from './pinned-blocks.js';


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
}

export class PrefillHandler {
  /** Device pools: block ids of each open hand-off, for kv_stage. */
  private readonly pinnedIds = new Map<string, number[]>();

  constructor(private readonly deps: PrefillHandlerDeps) {}

  /** `{ns}/prefill/generate`. A request without prefillOnly runs as an ordinary (aggregated) one. */
  async *generate(request: PreprocessedRequest, ctx: RequestContext): AsyncGenerator<TokenDelta> {
    const { loop, instanceId } = this.deps;
    if (!request.prefillOnly) {
      for await (const delta of loop.generate(request, ctx.signal)) yield { ...delta, instanceId };
      return;
    }
    let seqId: number | undefined;
    const tokenIds: number[] = [];
    let logprobs: TokenLogprob[] | undefined;
    let last: TokenDelta | undefined;
    for await (const delta of loop.generate(request, ctx.signal, { pinOnFinish: true, onAdded: (id) => (seqId = id) })) {
      tokenIds.push(...delta.tokenIds);
      if (delta.logprobs) (logprobs ??= []).push(...delta.logprobs);
      last = delta;
    }
    const answer: TokenDelta = { tokenIds, instanceId };
    if (logprobs !== undefined) answer.logprobs = logprobs;
    if (last?.usage !== undefined) answer.usage = last.usage;
    answer.finishReason = last?.finishReason ?? 'cancelled';
    const table = seqId === undefined ? undefined : loop.scheduler.pinnedBlockTable(seqId);
    const endsHere = answer.finishReason !== 'length' || request.stop.maxTokens <= 1 || tokenIds.length === 0;
    if (table === undefined || endsHere) {
      // Nothing to hand off (the first token is the whole answer, or the call was cancelled).
      if (seqId !== undefined) loop.releasePinned(seqId);
      yield answer;
      return;
    }
    answer.kvTransfer = this.pin(seqId!, table, request.tokenIds.length);
    yield answer;
  }

  /** `{ns}/prefill/kv_release`. */
  async *release(request: KvReleaseRequest): AsyncGenerator<KvReleaseResponse> {
    if (typeof request?.transferId === 'string') this.pinnedIds.delete(request.transferId);
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

  private pin(seqId: number, table: Int32Array, numTokens: number): KvTransferParams {
    const { agent, pool, pinned, instanceId, loop } = this.deps;
    const blockIds = Array.from(table.subarray(0, loop.scheduler.blockManager.blocksFor(numTokens)));
    let descriptor;
    try {
      descriptor = agent.describe(pool, blockIds);
    } catch (err) {
      loop.releasePinned(seqId);
      throw err;
    }
    const transferId = pinned.pin(seqId, blockIds.length);
    if (this.deps.stage !== undefined) {
      // Pins end by release or timeout (PinnedBlocks); drop the ids of ended ones now and then.
      if (this.pinnedIds.size > 2 * pinned.size + 64) for (const id of [...this.pinnedIds.keys()]) if (!pinned.has(id)) this.pinnedIds.delete(id);
      this.pinnedIds.set(transferId, blockIds);
    }
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
