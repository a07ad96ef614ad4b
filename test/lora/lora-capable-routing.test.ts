/**
 * Workers whose engine refuses adapters (CUDA today) say so on their model card
 * (`supportsLora: false`) and are never candidates for an adapter request: not in the
 * frontend's routing (any router mode), not as the prefill or decode leg of a disaggregated
 * one. Base-model requests still reach them, and a card without the field (an older worker)
 * counts as supporting adapters, as before.
 */
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import type { ServedModel } from '../../frontend/model-watcher.js';
import { PrefillRouter } from '../../frontend/disagg/prefill-router.js';
import type { PrefillWorkers } from '../../frontend/disagg/prefill-pool.js';
import { RoundRobinSelector } from '../../frontend/routing.js';
import { parseModelCard, type InstanceId, type ModelCard, type PreprocessedRequest } from '../../proto/wire.js';
import { makeCard } from '../frontend/fakes.js';
import { startTestFrontend, type TestFrontend } from '../frontend/harness.js';

const SQL = { name: 'sql', loraId: 4242, path: '/adapters/sql' };

describe('LoRA support on the card: HTTP routing', () => {
  let t: TestFrontend | undefined;
  afterEach(async () => {
    await t?.close();
    t = undefined;
  });

  it('adapter requests go only to workers that run adapters; base requests to all of them', async () => {
    const ids: Record<string, InstanceId> = {};
    t = await startTestFrontend({ migrationWaitMs: 0 }, async (cluster) => {
      // A CUDA-like worker that (somehow) lists the adapter, one that runs adapters, and an older card without the field.
      ids.cuda = (await cluster.addWorker({ text: 'x' }, { loras: [SQL], supportsLora: false })).instanceId;
      ids.cpu = (await cluster.addWorker({ text: 'x' }, { loras: [SQL], supportsLora: true })).instanceId;
      ids.old = (await cluster.addWorker({ text: 'x' }, { loras: [SQL] })).instanceId;
    });
    await waitForCandidates(t, 3);
    const client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    for (let i = 0; i < 9; i++) await client.completions.create({ model: 'sql', prompt: `p${i}`, max_tokens: 2 });
    const adapterCalls = t.cluster.allCalls().filter((c) => c.request.lora === 'sql');
    expect(adapterCalls).toHaveLength(9);
    expect(new Set(adapterCalls.map((c) => c.instanceId))).toEqual(new Set([ids.cpu, ids.old]));
    for (let i = 0; i < 6; i++) await client.completions.create({ model: 'fake-model', prompt: `b${i}`, max_tokens: 2 });
    const baseCalls = t.cluster.allCalls().filter((c) => c.request.lora === undefined);
    expect(new Set(baseCalls.map((c) => c.instanceId))).toEqual(new Set([ids.cuda, ids.cpu, ids.old]));
  });

  it('an adapter request whose only worker refuses adapters is not sent to it (503), base requests are', async () => {
    t = await startTestFrontend({ migrationWaitMs: 0 }, async (cluster) => {
      await cluster.addWorker({ text: 'x' }, { loras: [SQL], supportsLora: false });
    });
    await waitForCandidates(t, 1);
    const client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    await expect(client.completions.create({ model: 'sql', prompt: 'p', max_tokens: 2 })).rejects.toMatchObject({ status: 503 });
    expect(t.cluster.allCalls()).toHaveLength(0);
    await expect(client.completions.create({ model: 'fake-model', prompt: 'p', max_tokens: 2 })).resolves.toBeDefined();
  });

  it('the card field is checked: a boolean or absent', () => {
    expect(parseModelCard({ ...makeCard(), supportsLora: false })).toMatchObject({ ok: true });
    expect(parseModelCard(makeCard())).toMatchObject({ ok: true });
    expect(parseModelCard({ ...makeCard(), supportsLora: 'no' })).toEqual({ ok: false, reason: 'supportsLora must be a boolean' });
  });
});

describe('LoRA support on the card: disaggregated legs', () => {
  const cards: Record<InstanceId, Partial<ModelCard>> = {
    d1: { role: 'decode', supportsLora: false },
    d2: { role: 'decode' },
    p1: { role: 'prefill', component: 'prefill', supportsLora: false },
    p2: { role: 'prefill', component: 'prefill', supportsLora: true },
  };
  const card = (id: InstanceId): ModelCard | undefined => (cards[id] ? makeCard({ instanceId: id, ...cards[id] }) : undefined);
  const model: ServedModel = {
    name: 'm',
    candidates: () => ['d1', 'd2'],
    card,
    primaryCard: () => makeCard(),
    contextLength: () => 100_000,
    generate: () => {
      throw new Error('not used');
    },
  };
  const pool: PrefillWorkers = {
    candidates: () => ['p1', 'p2'],
    card: (_m, id) => card(id),
    generate: () => {
      throw new Error('not used');
    },
    release: async () => undefined,
  };
  const request = (lora?: string): PreprocessedRequest => ({
    requestId: 'r',
    model: 'm',
    tokenIds: Array.from({ length: 2000 }, (_, i) => i),
    sampling: {},
    stop: { maxTokens: 8, stopTokenIds: [], ignoreEos: false },
    ...(lora !== undefined ? { lora, loraId: SQL.loraId } : {}),
  });

  it('an adapter request prefills and decodes only on workers that run adapters', async () => {
    const router = new PrefillRouter({ pool, minPrefillTokens: 512 });
    const rr = new RoundRobinSelector();
    for (let i = 0; i < 4; i++) {
      const outcome = await router.route(model, request('sql'), 'd1', rr, false);
      expect(outcome).toMatchObject({ kind: 'disagg', route: { prefillInstance: 'p2', decodeInstance: 'd2' } });
      expect(await router.pickPrefill('m', request('sql'))).toBe('p2');
    }
    // The base model uses both prefill workers.
    const picks = new Set<InstanceId | undefined>();
    for (let i = 0; i < 4; i++) picks.add(await router.pickPrefill('m', request()));
    expect(picks).toEqual(new Set(['p1', 'p2']));
  });
});

async function waitForCandidates(t: TestFrontend, n: number): Promise<void> {
  const deadline = Date.now() + 5000;
  while ((t.frontend.models.model('fake-model')?.candidates().length ?? 0) < n) {
    if (Date.now() > deadline) throw new Error(`fewer than ${n} candidates`);
    await new Promise((r) => setTimeout(r, 5));
  }
}
