/**
 * `--router-mode kv` on a model served by generation and embedding workers: the KV selector
 * routes generation for the generation workers' component only. The embedding worker's card
 * (component `embedding`, `task: 'embed'`) sorts first here (the feed replays cards by key), which is when a selector that
 * took every agg card as a target would hand the KV router the wrong component.
 */
import { describe, expect, it } from 'vitest';
import { KvSelector } from '../../frontend/kv-selector.js';
import type { ModelCard, PreprocessedRequest, RouteTarget } from '../../proto/wire.js';
import type { KvRoutingBackend } from '../../router/adapters/kv-routing-backend.js';
import { MemoryDiscovery } from '../../runtime/discovery/memory-discovery.js';
import { modelKey } from '../../runtime/index.js';

const card = (instanceId: string, over: Partial<ModelCard>): ModelCard => ({
  name: 'm', modelPath: '/m', tokenizerSource: '/m', chatTemplateSource: '/m', contextLength: 100, kvBlockSize: 16, totalKvBlocks: 64,
  maxNumBatchedTokens: 64, role: 'agg', engine: 'mocker', component: 'backend', endpoint: 'generate', instanceId, eosTokenIds: [0], ...over,
});

describe('KvSelector with embedding workers on the same model', () => {
  it('routes generation with the generation component, whichever card came first', async () => {
    const discovery = new MemoryDiscovery();
    await discovery.put(modelKey('tandem', 'm', '0000000000000001'), card('0000000000000001', {
      component: 'embedding', endpoint: 'embed', totalKvBlocks: 0, task: 'embed',
      embedding: { dimensions: 64, pooling: 'last', normalize: true, matryoshka: false },
    }));
    await discovery.put(modelKey('tandem', 'm', '00000000000000a1'), card('00000000000000a1', {}));
    const targets: RouteTarget[] = [];
    const backend: KvRoutingBackend = {
      async route(target, _id, _tokens, candidates) {
        targets.push(target);
        return { kind: 'routed', instanceId: candidates[0]!, overlapBlocks: 0 };
      },
      book: () => undefined,
      firstToken: () => undefined,
      finished: () => undefined,
      close: async () => undefined,
    };
    const selector = await KvSelector.start({ backend, discovery, namespace: 'tandem' });
    try {
      const request: PreprocessedRequest = { requestId: 'r', model: 'm', tokenIds: [1, 2, 3], sampling: {}, stop: { maxTokens: 1, stopTokenIds: [], ignoreEos: true } };
      await selector.select({ model: 'm', request }, ['00000000000000a1']);
      expect(targets).toEqual([{ component: 'backend', blockSize: 16 }]);
    } finally {
      await selector.close();
    }
  });
});
