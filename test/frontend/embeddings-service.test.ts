/**
 * EmbeddingsService without sockets: cards in a memory discovery, workers behind a fake
 * connector. Which instances may embed (embed cards whose client lists them), the refusals
 * (404 unknown model, 400 naming a generation-only model), and the retry on another instance
 * when one is unavailable.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { EmbeddingsService } from '../../frontend/embeddings/index.js';
import { CodecCache } from '../../frontend/codec.js';
import { WorkerHealth } from '../../frontend/worker-health.js';
import type { WorkerClient, WorkerConnector } from '../../frontend/worker-client.js';
import { WorkerClients } from '../../frontend/worker-clients.js';
import type { EmbedRequest, EmbedResponse, InstanceId, ModelCard } from '../../proto/wire.js';
import { MemoryDiscovery } from '../../runtime/discovery/memory-discovery.js';
import { ModelCardFeed, modelKey } from '../../runtime/index.js';
import { UnavailableError } from '../../runtime/errors.js';

const EMBED: Partial<ModelCard> = { component: 'embedding', endpoint: 'embed', task: 'embed', embedding: { dimensions: 2, pooling: 'last', normalize: true, matryoshka: false } };

function card(name: string, instanceId: string, over: Partial<ModelCard>): ModelCard {
  return {
    name, modelPath: '/m', tokenizerSource: '/m', chatTemplateSource: '/m', contextLength: 8, kvBlockSize: 16, totalKvBlocks: 0, maxNumBatchedTokens: 64,
    role: 'agg', engine: 'mocker', component: 'backend', endpoint: 'generate', instanceId, eosTokenIds: [0], ...over,
  };
}

/** One fake client per endpoint: `live` instances, each answering with [id as a number, 0] per input, or failing. */
function connector(live: Set<InstanceId>, failing: Set<InstanceId>, calls: InstanceId[]): WorkerConnector {
  return {
    async connect(): Promise<WorkerClient> {
      return {
        instanceIds: () => [...live],
        generate: () => {
          throw new Error('not used');
        },
        call<Req, Resp>(request: Req, instanceId: InstanceId): AsyncIterable<Resp> {
          calls.push(instanceId);
          return (async function* () {
            if (failing.has(instanceId)) throw new UnavailableError(`instance ${instanceId} went away`);
            const n = (request as EmbedRequest).inputs.length;
            const v = new Float32Array(n * 2).map((_, i) => (i % 2 === 0 ? parseInt(instanceId, 16) : 0));
            yield { dimensions: 2, vectors: new Uint8Array(v.buffer) } satisfies EmbedResponse as Resp;
          })();
        },
        close: () => undefined,
      };
    },
  };
}

const open: Array<() => void> = [];
afterEach(() => {
  while (open.length) open.pop()!();
});

async function service(cards: ModelCard[], live: InstanceId[], failing: InstanceId[] = []) {
  const discovery = new MemoryDiscovery();
  for (const c of cards) await discovery.put(modelKey('tandem', c.name, c.instanceId), c);
  const feed = await ModelCardFeed.start(discovery, 'tandem');
  const calls: InstanceId[] = [];
  const clients = new WorkerClients(feed, connector(new Set(live), new Set(failing), calls));
  await clients.settled();
  open.push(() => {
    clients.close();
    feed.close();
  });
  const codecs = new CodecCache(async () => {
    throw new Error('no tokenizer in this test');
  });
  return { svc: new EmbeddingsService(feed, clients, codecs, new WorkerHealth(5000)), calls };
}

describe('EmbeddingsService', () => {
  it('targets: embed cards whose instance is live; 404 for an unknown model, 400 naming a generation-only one', async () => {
    const { svc } = await service(
      [card('e', '00000000000000a1', EMBED), card('e', '00000000000000a2', EMBED), card('e', '00000000000000b1', {}), card('g', '00000000000000c1', {})],
      ['00000000000000a1', '00000000000000b1', '00000000000000c1'],
    );
    expect(svc.targets('e')).toMatchObject({ instances: ['00000000000000a1'], contextLength: 8, capability: { dimensions: 2 } });
    expect(svc.instanceCount('e')).toBe(1);
    expect(() => svc.targets('nope')).toThrow(expect.objectContaining({ code: 'model_not_found' }));
    expect(() => svc.targets('g')).toThrow(expect.objectContaining({ code: 'invalid_argument', param: 'model', message: expect.stringContaining("'g' does not serve embeddings") }));
    expect(svc.instanceCount('g')).toBe(0);
  });

  it('an unavailable worker: the same request goes to the other one, and the first sits out', async () => {
    const ids = ['00000000000000a1', '00000000000000a2'];
    const { svc, calls } = await service(ids.map((id) => card('e', id, EMBED)), ids, ['00000000000000a1']);
    const signal = new AbortController().signal;
    // Round-robin starts at the first instance: it fails, the second answers.
    const r = await svc.embed('e', 'r1', [[1], [2]], signal);
    expect(calls).toEqual(['00000000000000a1', '00000000000000a2']);
    expect(r.instanceId).toBe('00000000000000a2');
    expect(Array.from(r.vectors)).toEqual([0xa2, 0, 0xa2, 0]);
    expect(r.promptTokens).toBe(2);
    // In cooldown now: the next request goes straight to the second.
    await svc.embed('e', 'r2', [[3]], signal);
    expect(calls.slice(2)).toEqual(['00000000000000a2']);
  });

  it('all embedding workers unavailable: the error is the worker\'s, after trying each once', async () => {
    const ids = ['00000000000000a1', '00000000000000a2'];
    const { svc, calls } = await service(ids.map((id) => card('e', id, EMBED)), ids, ids);
    await expect(svc.embed('e', 'r', [[1]], new AbortController().signal)).rejects.toMatchObject({ code: 'unavailable' });
    expect([...calls].sort()).toEqual(ids);
  });

  it('a pinned instance (x-worker-instance-id) gets the call, without retry; one that does not embed the model is a 404', async () => {
    const ids = ['00000000000000a1', '00000000000000a2'];
    const { svc, calls } = await service([...ids.map((id) => card('e', id, EMBED)), card('e', '00000000000000b1', {})], [...ids, '00000000000000b1'], ['00000000000000a2']);
    const signal = new AbortController().signal;
    expect((await svc.embed('e', 'r', [[1]], signal, '00000000000000a1')).instanceId).toBe('00000000000000a1');
    await expect(svc.embed('e', 'r', [[1]], signal, '00000000000000a2')).rejects.toMatchObject({ code: 'unavailable' });
    expect(calls).toEqual(['00000000000000a1', '00000000000000a2']);
    await expect(svc.embed('e', 'r', [[1]], signal, '00000000000000b1')).rejects.toMatchObject({ code: 'instance_not_found', param: 'x-worker-instance-id' });
  });

  it('token inputs longer than the context are a 400 naming the input', async () => {
    const { svc } = await service([card('e', '00000000000000a1', EMBED)], ['00000000000000a1']);
    const request = { model: 'e', inputs: { kind: 'tokens' as const, tokens: [[1], Array(9).fill(1)] }, encodingFormat: 'float' as const };
    await expect(svc.tokenize(request, 8, new AbortController().signal)).rejects.toMatchObject({ code: 'context_length_exceeded', param: 'input', message: expect.stringContaining('input[1] has 9 tokens') });
  });
});
