/**
 * The model-card edge: `parseModelCard` (proto), `parseModelKey` (runtime/discovery/keys.ts)
 * and `ModelCardFeed`, the one watch of cards every reader shares, run over real (memory)
 * discovery handles that share a store, as separate processes would over etcd.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { parseModelCard, type ModelCard } from '../../proto/wire.js';
import { MemoryDiscovery, MemoryDiscoveryStore } from '../../runtime/discovery/memory-discovery.js';
import { modelKey, parseModelKey } from '../../runtime/discovery/keys.js';
import { ModelCardFeed, type CardEvent } from '../../runtime/discovery/model-card-feed.js';
import { waitFor } from '../fixtures/discovery-events.js';

function card(overrides: Partial<ModelCard> = {}): ModelCard {
  return {
    name: 'm',
    modelPath: '/models/m',
    tokenizerSource: '/models/m',
    chatTemplateSource: '/models/m',
    contextLength: 4096,
    kvBlockSize: 16,
    totalKvBlocks: 1000,
    maxNumBatchedTokens: 8192,
    role: 'agg',
    engine: 'mocker',
    component: 'backend',
    endpoint: 'generate',
    instanceId: '00000000000000aa',
    eosTokenIds: [2],
    ...overrides,
  };
}

describe('parseModelCard', () => {
  it('accepts a full card, with or without the optional fields, and keeps it as is', () => {
    const full = card({ ucxWorkerAddress: 'abcd', kvBytesPerToken: 1024, architecture: 'Qwen3MoeForCausalLM', parameters: { total: 30_532_110_336, active: 3_353_020_416, experts: { count: 128, topK: 8 } } });
    expect(parseModelCard(full)).toEqual({ ok: true, card: full });
    expect(parseModelCard(card())).toEqual({ ok: true, card: card() });
  });

  it.each([
    ['null', null, 'not an object'],
    ['an array', [card()], 'not an object'],
    ['a string', 'card', 'not an object'],
    ['no name', { ...card(), name: undefined }, 'name must be a non-empty string'],
    ['an empty name', card({ name: '' }), 'name must be a non-empty string'],
    ['a numeric component', { ...card(), component: 7 }, 'component must be a non-empty string'],
    ['no endpoint', { ...card(), endpoint: undefined }, 'endpoint must be a non-empty string'],
    ['no tokenizer source', { ...card(), tokenizerSource: undefined }, 'tokenizerSource must be a non-empty string'],
    ['a fractional context length', card({ contextLength: 10.5 }), 'contextLength must be a positive integer'],
    ['a zero block size', card({ kvBlockSize: 0 }), 'kvBlockSize must be a positive integer'],
    ['a string block count', { ...card(), totalKvBlocks: '1000' }, 'totalKvBlocks must be a non-negative integer'],
    ['a negative block count', card({ totalKvBlocks: -1 }), 'totalKvBlocks must be a non-negative integer'],
    ['an unknown role', { ...card(), role: 'router' }, 'role must be one of agg, prefill, decode'],
    ['an unknown engine', { ...card(), engine: 'vllm' }, 'engine must be one of mocker, native'],
    ['a short instance id', card({ instanceId: 'aa' }), 'instanceId must be 16 lowercase hex digits'],
    ['an upper-case instance id', card({ instanceId: '00000000000000AA' }), 'instanceId must be 16 lowercase hex digits'],
    ['eos ids that are not token ids', { ...card(), eosTokenIds: [2, -1] }, 'eosTokenIds must be an array of token ids'],
    ['no eos ids', { ...card(), eosTokenIds: undefined }, 'eosTokenIds must be an array of token ids'],
    ['a numeric UCX address', { ...card(), ucxWorkerAddress: 5 }, 'ucxWorkerAddress must be a string'],
    ['a negative kvBytesPerToken', card({ kvBytesPerToken: -4 }), 'kvBytesPerToken must be a non-negative number'],
    ['a numeric architecture', { ...card(), architecture: 7 }, 'architecture must be a string'],
    ['more active than total parameters', card({ parameters: { total: 10, active: 11 } }), 'parameters must be {total, active} integers with 0 <= active <= total'],
    ['fractional parameters', card({ parameters: { total: 10.5, active: 1 } }), 'parameters must be {total, active} integers with 0 <= active <= total'],
    ['top-k above the expert count', card({ parameters: { total: 10, active: 2, experts: { count: 4, topK: 5 } } }), 'parameters.experts must be {count, topK} integers with 1 <= topK <= count'],
    ['experts that are not an object', { ...card(), parameters: { total: 10, active: 2, experts: 8 } }, 'parameters.experts must be {count, topK} integers with 1 <= topK <= count'],
  ])('rejects %s, naming the field', (_what, value, reason) => {
    expect(parseModelCard(value)).toEqual({ ok: false, reason });
  });
});

describe('parseModelKey', () => {
  it('splits namespace, model and instance id', () => {
    expect(parseModelKey('v1/models/tandem/m/00000000000000aa')).toEqual({ namespace: 'tandem', model: 'm', instanceId: '00000000000000aa' });
    expect(parseModelKey(modelKey('ns2', 'llama', '0123456789abcdef'), 'ns2')).toEqual({ namespace: 'ns2', model: 'llama', instanceId: '0123456789abcdef' });
  });

  it('keeps slashes inside the model name (Hugging Face ids)', () => {
    expect(parseModelKey('v1/models/tandem/Qwen/Qwen3-0.6B/00000000000000aa')).toEqual({ namespace: 'tandem', model: 'Qwen/Qwen3-0.6B', instanceId: '00000000000000aa' });
  });

  it.each([
    ['another prefix', 'v1/instances/tandem/backend/generate/00000000000000aa'],
    ['no model segment', 'v1/models/tandem/00000000000000aa'],
    ['an empty model segment', 'v1/models/tandem//00000000000000aa'],
    ['an empty namespace', 'v1/models//m/00000000000000aa'],
    ['a short instance id', 'v1/models/tandem/m/aa'],
    ['an upper-case instance id', 'v1/models/tandem/m/00000000000000AA'],
    ['a trailing slash', 'v1/models/tandem/m/00000000000000aa/'],
  ])('rejects %s', (_what, key) => {
    expect(parseModelKey(key)).toBeUndefined();
  });

  it('rejects a key from another namespace when one is asked for', () => {
    expect(parseModelKey('v1/models/other/m/00000000000000aa', 'tandem')).toBeUndefined();
  });
});

describe('ModelCardFeed', () => {
  let store = new MemoryDiscoveryStore();
  const handles: MemoryDiscovery[] = [];
  const feeds: ModelCardFeed[] = [];

  afterEach(async () => {
    for (const f of feeds.splice(0)) f.close();
    for (const h of handles.splice(0)) await h.close();
  });

  function handle(): MemoryDiscovery {
    const h = new MemoryDiscovery({ store });
    handles.push(h);
    return h;
  }

  async function startFeed(warnings: object[] = []): Promise<ModelCardFeed> {
    const feed = await ModelCardFeed.start(handle(), 'tandem', { warn: (obj) => warnings.push(obj) });
    feeds.push(feed);
    return feed;
  }

  /** A "worker": its own discovery handle (lease) that puts one card under its instance id. */
  async function worker(overrides: Partial<ModelCard> = {}): Promise<{ d: MemoryDiscovery; card: ModelCard; key: string }> {
    const d = handle();
    const c = card({ ...overrides, instanceId: d.instanceId });
    const key = modelKey('tandem', c.name, d.instanceId);
    await d.put(key, c);
    return { d, card: c, key };
  }

  it('loads the cards that exist at start, then follows adds and removals', async () => {
    store = new MemoryDiscoveryStore();
    const a = await worker({ name: 'm' });
    const feed = await startFeed();
    expect(feed.cards().map((e) => e.key)).toEqual([a.key]);
    expect(feed.card('m', a.d.instanceId)).toEqual(a.card);

    const b = await worker({ name: 'other', role: 'prefill', component: 'prefill' });
    await waitFor('second card', () => feed.cards().length === 2);
    expect(feed.models()).toEqual(['m', 'other']);
    expect(feed.get(b.key)).toMatchObject({ model: 'other', instanceId: b.d.instanceId });

    await a.d.close();
    await waitFor('first card gone', () => feed.cards().length === 1);
    expect(feed.card('m', a.d.instanceId)).toBeUndefined();
    expect(feed.models()).toEqual(['other']);
  });

  it('a role filter shows each subscriber its own slice, including cards that change role', async () => {
    store = new MemoryDiscoveryStore();
    const feed = await startFeed();
    const routable: CardEvent[] = [];
    const prefill: CardEvent[] = [];
    feed.subscribe((e) => routable.push(e), { roles: ['agg', 'decode'] });
    feed.view({ roles: ['prefill'] }).subscribe((e) => prefill.push(e));

    const w = await worker({ role: 'decode', component: 'decode' });
    await waitFor('decode card', () => routable.length === 1);
    expect(routable[0]).toMatchObject({ type: 'added', entry: { key: w.key } });
    expect(prefill).toEqual([]);

    // The same key re-registers as a prefill worker: one view loses it, the other gains it.
    await w.d.put(w.key, { ...w.card, role: 'prefill', component: 'prefill' });
    await waitFor('role switch', () => prefill.length === 1);
    expect(routable.map((e) => e.type)).toEqual(['added', 'removed']);
    expect(prefill[0]).toMatchObject({ type: 'added', entry: { key: w.key, card: { role: 'prefill' } } });

    // A refreshed value inside the filter is a 'changed', with the previous value attached.
    await w.d.put(w.key, { ...w.card, role: 'prefill', component: 'prefill', totalKvBlocks: 7 });
    await waitFor('refresh', () => prefill.length === 2);
    expect(prefill[1]).toMatchObject({ type: 'changed', entry: { card: { totalKvBlocks: 7 } }, previous: { card: { totalKvBlocks: 1000 } } });

    await w.d.close();
    await waitFor('card gone', () => prefill.length === 3);
    expect(prefill[2]).toMatchObject({ type: 'removed', entry: { key: w.key } });
    expect(routable).toHaveLength(2);
  });

  it('replays the live cards to a late subscriber, filtered by model and component', async () => {
    store = new MemoryDiscoveryStore();
    await worker({ name: 'a' });
    const b = await worker({ name: 'b', component: 'backend2' });
    const feed = await startFeed();
    const seen: string[] = [];
    feed.subscribe((e) => seen.push(`${e.type} ${e.entry.model}`), { component: 'backend2' });
    expect(seen).toEqual(['added b']);
    expect(feed.cards({ model: 'b' }).map((e) => e.key)).toEqual([b.key]);
    expect(feed.models({ roles: ['prefill'] })).toEqual([]);
  });

  it('ignores malformed cards, warns once per key, and drops a live card that turns malformed', async () => {
    store = new MemoryDiscoveryStore();
    const warnings: object[] = [];
    const feed = await startFeed(warnings);
    const events: CardEvent[] = [];
    feed.subscribe((e) => events.push(e));

    const bad = handle();
    const badKey = modelKey('tandem', 'm', bad.instanceId);
    await bad.put(badKey, { name: 'm', role: 'agg' });
    await bad.put(badKey, { name: 'm', role: 'agg', again: true });
    // A card whose instance id is not its key's, and a key that is not a card key at all.
    await bad.put(modelKey('tandem', 'x', bad.instanceId), card({ name: 'x', instanceId: '0000000000000001' }));
    await bad.put('v1/models/tandem/no-instance', card());
    const good = await worker();
    await waitFor('good card', () => events.length === 1);
    expect(events[0]).toMatchObject({ type: 'added', entry: { key: good.key } });
    expect(feed.cards().map((e) => e.key)).toEqual([good.key]);
    expect(warnings).toHaveLength(3);
    expect(warnings[0]).toMatchObject({ key: badKey, reason: 'modelPath must be a non-empty string' });
    expect(warnings[1]).toMatchObject({ reason: 'card instanceId differs from its key' });
    expect(warnings[2]).toMatchObject({ key: 'v1/models/tandem/no-instance' });

    await good.d.put(good.key, { ...good.card, contextLength: 'long' });
    await waitFor('card dropped', () => events.length === 2);
    expect(events[1]).toMatchObject({ type: 'removed', entry: { key: good.key } });
    expect(feed.cards()).toEqual([]);
    expect(warnings).toHaveLength(4);
  });

  it('a listener that throws does not keep the others from seeing the card', async () => {
    store = new MemoryDiscoveryStore();
    const warnings: object[] = [];
    const feed = await startFeed(warnings);
    const seen: string[] = [];
    feed.subscribe(() => {
      throw new Error('broken consumer');
    });
    feed.subscribe((e) => seen.push(e.entry.key));
    const w = await worker();
    await waitFor('second listener', () => seen.length === 1);
    expect(seen).toEqual([w.key]);
    expect(warnings).toHaveLength(1);
  });

  it('after close and unsubscribe, nothing more is delivered', async () => {
    store = new MemoryDiscoveryStore();
    const feed = await startFeed();
    const a: string[] = [];
    const b: string[] = [];
    const stop = feed.subscribe((e) => a.push(e.entry.key));
    feed.subscribe((e) => b.push(e.entry.key));
    await worker({ name: 'one' });
    await waitFor('first', () => a.length === 1 && b.length === 1);
    stop();
    await worker({ name: 'two' });
    await waitFor('second', () => b.length === 2);
    expect(a).toHaveLength(1);
    const control = await startFeed();
    feed.close();
    await worker({ name: 'three' });
    await waitFor('control feed sees the third card', () => control.cards().length === 3);
    expect(b).toHaveLength(2);
    expect(feed.cards()).toHaveLength(2);
  });
});
