/**
 * PrefillHandler with layer-wise streaming, in process (mocker with 8 modelled layers, the real
 * UCX agent's memory for the progress slot): the early delta comes first with the slot and the
 * transfer id the answer then pins under; the slot follows the layers; a caller that stops
 * reading after the early delta gets its slot closed (the region has ONE slot, so a leak shows
 * as no early delta for the next hand-off).
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { TokenDelta } from '../../proto/wire.js';
import { EngineLoop } from '../../workers/engine-loop/index.js';
import { MockerEngine } from '../../workers/engines/mocker/index.js';
import { LayerPublisher } from '../../workers/disagg/layer-publisher.js';
import { LayerProgressRegion } from '../../workers/disagg/layer-progress-region.js';
import { PinnedBlocks } from '../../workers/disagg/pinned-blocks.js';
import { PrefillHandler } from '../../workers/disagg/prefill-handler.js';
import { isUcxBuilt, UcxTransferAgent } from '../../workers/kv-transfer/index.js';
import { request } from '../workers/builders.js';

describe.skipIf(!isUcxBuilt())('PrefillHandler, layer-wise streaming', () => {
  const cleanup: Array<() => unknown> = [];
  afterEach(async () => {
    for (const fn of cleanup.splice(0).reverse()) await fn();
  });

  function setup() {
    const agent = UcxTransferAgent.create({ config: { TLS: 'tcp' } });
    const publisher = new LayerPublisher(8);
    const mocker = new MockerEngine({ numBlocks: 64, blockSize: 16, numLayers: 8, onLayers: publisher.onLayers, speedupRatio: 0.2 });
    const loop = new EngineLoop({ engine: publisher.wrap(mocker) });
    const pool = agent.allocatePool({ numBlocks: 64, blockBytes: 1024, layout: 'test' });
    const region = new LayerProgressRegion(agent, 1);
    const pinned = new PinnedBlocks({ free: (seq) => loop.releasePinned(seq), releaseTimeoutMs: 60_000 });
    const handler = new PrefillHandler({ loop, agent, pool, pinned, instanceId: 'p1', streaming: { publisher, region } });
    cleanup.push(() => agent.close(), () => loop.close(), () => pinned.releaseAll());
    return { handler, pinned, loop };
  }

  const ctx = (id: string) => ({ signal: new AbortController().signal, requestId: id });
  const prompt = Array.from({ length: 100 }, (_, i) => 3 + i);

  it('sends the early delta first, then the answer pinned under the same transfer id', async () => {
    const { handler, pinned } = setup();
    const deltas: TokenDelta[] = [];
    for await (const d of handler.generate(request('r1', prompt, 8, { prefillOnly: true, kvLayerStreaming: true }), ctx('r1'))) deltas.push(d);
    expect(deltas).toHaveLength(2);
    const [early, answer] = deltas;
    expect(early!.tokenIds).toEqual([]);
    expect(early!.finishReason).toBeUndefined();
    expect(early!.kvTransfer?.kvLayerProgress?.numLayers).toBe(8);
    expect(early!.kvTransfer?.blockIds).toHaveLength(7);
    expect(answer!.tokenIds).toHaveLength(1);
    expect(answer!.kvTransfer?.transferId).toBe(early!.kvTransfer!.transferId);
    expect(answer!.kvTransfer?.blockIds).toEqual(early!.kvTransfer!.blockIds);
    expect(pinned.has(early!.kvTransfer!.transferId)).toBe(true);
  });

  it('without kvLayerStreaming: one delta, as before', async () => {
    const { handler } = setup();
    const deltas: TokenDelta[] = [];
    for await (const d of handler.generate(request('r2', prompt, 8, { prefillOnly: true }), ctx('r2'))) deltas.push(d);
    expect(deltas).toHaveLength(1);
    expect(deltas[0]!.kvTransfer?.kvLayerProgress).toBeUndefined();
  });

  it('a caller that stops reading after the early delta frees the slot for the next hand-off', async () => {
    const { handler } = setup();
    const gen = handler.generate(request('r3', prompt, 8, { prefillOnly: true, kvLayerStreaming: true }), ctx('r3'));
    const first = await gen.next();
    expect((first.value as TokenDelta).kvTransfer?.kvLayerProgress).toBeDefined();
    await gen.return(undefined);
    const deltas: TokenDelta[] = [];
    for await (const d of handler.generate(request('r4', prompt.map((t) => t + 1), 8, { prefillOnly: true, kvLayerStreaming: true }), ctx('r4'))) deltas.push(d);
    expect(deltas[0]!.kvTransfer?.kvLayerProgress).toBeDefined();
    expect(deltas).toHaveLength(2);
  });
});
