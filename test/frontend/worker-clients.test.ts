/**
 * The frontend's one client cache (frontend/worker-clients.ts) over the one card feed: a
 * client lives exactly as long as some live card names its endpoint, for the model watcher
 * and the prefill pool alike. Cards come from worker "processes" (own discovery handles on a
 * shared memory store), so a card goes away the way a lease does.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { PrefillPool } from '../../frontend/disagg/prefill-pool.js';
import { ModelWatcher } from '../../frontend/model-watcher.js';
import type { WorkerClient, WorkerConnector } from '../../frontend/worker-client.js';
import { WorkerClients } from '../../frontend/worker-clients.js';
import type { InstanceId, KvReleaseRequest, KvReleaseResponse, KvTransferParams, ModelCard } from '../../proto/wire.js';
import { modelKey } from '../../runtime/discovery/keys.js';
import { MemoryDiscovery, MemoryDiscoveryStore } from '../../runtime/discovery/memory-discovery.js';
import { ModelCardFeed } from '../../runtime/discovery/model-card-feed.js';
import { waitFor } from './harness.js';
import { makeCard } from './fakes.js';

/** A connector that records every client it opens, its calls, and whether it was closed. */
class RecordingConnector implements WorkerConnector {
  readonly opened: RecordedClient[] = [];
  /** Instances every client reports as serving (the instance records). */
  live: InstanceId[] = [];

  async connect(component: string, endpoint: string): Promise<WorkerClient> {
    const client = new RecordedClient(`${component}/${endpoint}`, this);
    this.opened.push(client);
    return client;
  }

  open(): string[] {
    return this.opened.filter((c) => !c.closed).map((c) => c.endpoint).sort();
  }
}

class RecordedClient implements WorkerClient {
  closed = false;
  readonly calls: Array<{ request: unknown; instanceId: InstanceId }> = [];
  constructor(
    readonly endpoint: string,
    private readonly connector: RecordingConnector,
  ) {}
  instanceIds(): readonly InstanceId[] {
    return this.connector.live;
  }
  generate(): never {
    throw new Error('not used here');
  }
  call<Req, Resp>(request: Req, instanceId: InstanceId): AsyncIterable<Resp> {
    if (this.closed) throw new Error(`${this.endpoint}: call on a closed client`);
    this.calls.push({ request, instanceId });
    const answer: KvReleaseResponse = { released: true };
    return (async function* () {
      yield answer as Resp;
    })();
  }
  close(): void {
    this.closed = true;
  }
}

describe('WorkerClients', () => {
  let store: MemoryDiscoveryStore;
  const cleanup: Array<() => unknown> = [];

  afterEach(async () => {
    for (const fn of cleanup.splice(0).reverse()) await fn();
  });

  async function setup() {
    store = new MemoryDiscoveryStore();
    const frontendDiscovery = new MemoryDiscovery({ store });
    const connector = new RecordingConnector();
    const feed = await ModelCardFeed.start(frontendDiscovery, 'tandem');
    const clients = new WorkerClients(feed, connector);
    cleanup.push(() => frontendDiscovery.close(), () => feed.close(), () => clients.close());
    return { connector, feed, clients };
  }

  async function addWorker(card: Partial<ModelCard>): Promise<{ id: InstanceId; leave: () => Promise<void> }> {
    const d = new MemoryDiscovery({ store });
    cleanup.push(() => d.close());
    const full = makeCard({ ...card, instanceId: d.instanceId });
    await d.put(modelKey('tandem', full.name, d.instanceId), full);
    return { id: d.instanceId, leave: () => d.close() };
  }

  it('a prefill card going away closes its generate and kv_release clients (the pool leaked them before)', async () => {
    const { connector, feed, clients } = await setup();
    const pool = new PrefillPool(feed, clients, connector);
    cleanup.push(() => pool.close());
    const prefill = await addWorker({ role: 'prefill', component: 'prefill' });
    connector.live = [prefill.id];
    await waitFor(() => connector.open().length === 2);
    await clients.settled();
    expect(connector.open()).toEqual(['prefill/generate', 'prefill/kv_release']);
    expect(pool.candidates('fake-model')).toEqual([prefill.id]);

    await prefill.leave();
    await waitFor(() => connector.open().length === 0);
    expect(connector.opened.map((c) => [c.endpoint, c.closed])).toEqual([
      ['prefill/generate', true],
      ['prefill/kv_release', true],
    ]);
    expect(pool.candidates('fake-model')).toEqual([]);
    expect(clients.endpoints()).toEqual([]);
  });

  it('a decode card with kvLayerStreaming gets a kv_prefetch client; prefetch sends the early hand-off to that instance', async () => {
    const { connector, feed, clients } = await setup();
    const pool = new PrefillPool(feed, clients, connector);
    cleanup.push(() => pool.close());
    await addWorker({ role: 'decode', component: 'decode' });
    const streaming = await addWorker({ role: 'decode', component: 'decode', kvLayerStreaming: true });
    await waitFor(() => connector.open().length === 2);
    await clients.settled();
    expect(connector.open()).toEqual(['decode/generate', 'decode/kv_prefetch']);
    const card = makeCard({ role: 'decode', component: 'decode', kvLayerStreaming: true, instanceId: streaming.id });
    const params = { transferId: 't-1', prefillInstanceId: 'p' } as KvTransferParams;
    await pool.prefetch(card, params);
    const client = connector.opened.find((c) => c.endpoint === 'decode/kv_prefetch')!;
    expect(client.calls).toEqual([{ request: { kvTransfer: params }, instanceId: streaming.id }]);
  });

  it('an endpoint stays open while any live card names it, and closes with the last one', async () => {
    const { connector, feed, clients } = await setup();
    const models = new ModelWatcher(feed, clients);
    cleanup.push(() => models.close());
    const a = await addWorker({});
    const b = await addWorker({});
    connector.live = [a.id, b.id];
    await waitFor(() => models.model('fake-model')?.candidates().length === 2);
    expect(connector.opened.map((c) => c.endpoint)).toEqual(['backend/generate']);

    await a.leave();
    await waitFor(() => models.model('fake-model')?.candidates().length === 1);
    expect(connector.open()).toEqual(['backend/generate']);

    await b.leave();
    await waitFor(() => connector.open().length === 0);
    // The model stays known, without candidates, through its grace period (503s, not 404s).
    expect(models.names()).toEqual(['fake-model']);
    expect(models.isIdle('fake-model')).toBe(true);
    expect(models.model('fake-model')?.candidates()).toEqual([]);
    // A worker that comes back later gets a fresh client.
    const c = await addWorker({});
    connector.live = [c.id];
    await waitFor(() => models.model('fake-model')?.candidates().length === 1);
    expect(connector.opened.map((x) => [x.endpoint, x.closed])).toEqual([
      ['backend/generate', true],
      ['backend/generate', false],
    ]);
  });

  it('the watcher and the pool share one client per endpoint; the watcher never offers a prefill worker', async () => {
    const { connector, feed, clients } = await setup();
    const models = new ModelWatcher(feed, clients);
    const pool = new PrefillPool(feed, clients, connector);
    cleanup.push(() => models.close(), () => pool.close());
    const decode = await addWorker({ role: 'decode', component: 'decode' });
    const prefill = await addWorker({ role: 'prefill', component: 'prefill' });
    connector.live = [decode.id, prefill.id];
    await waitFor(() => pool.candidates('fake-model').length === 1 && models.model('fake-model')?.candidates().length === 1);
    expect(models.model('fake-model')!.candidates()).toEqual([decode.id]);
    expect(pool.candidates('fake-model')).toEqual([prefill.id]);
    expect(connector.opened.map((c) => c.endpoint).sort()).toEqual(['decode/generate', 'prefill/generate', 'prefill/kv_release']);
  });

  it('release sends a typed kv_release request on the cached client; after the card is gone, on a one-shot client it closes', async () => {
    const { connector, feed, clients } = await setup();
    const pool = new PrefillPool(feed, clients, connector);
    cleanup.push(() => pool.close());
    const prefill = await addWorker({ role: 'prefill', component: 'prefill' });
    connector.live = [prefill.id];
    await waitFor(() => pool.candidates('fake-model').length === 1);
    const params: KvTransferParams = {
      prefillInstanceId: prefill.id,
      blockIds: [0],
      numTokens: 16,
      ucxWorkerAddress: '',
      remoteKey: '',
      poolBaseAddress: '0',
      blockBytes: 1024,
      layout: 'test',
      transferId: 't-1',
    };

    await pool.release('fake-model', params);
    const cached = connector.opened.find((c) => c.endpoint === 'prefill/kv_release')!;
    const expected: KvReleaseRequest = { transferId: 't-1' };
    expect(cached.calls).toEqual([{ request: expected, instanceId: prefill.id }]);

    await prefill.leave();
    await waitFor(() => cached.closed);
    await pool.release('fake-model', { ...params, transferId: 't-2' });
    const oneShot = connector.opened.at(-1)!;
    expect(oneShot).not.toBe(cached);
    expect(oneShot.endpoint).toBe('prefill/kv_release');
    expect(oneShot.calls).toEqual([{ request: { transferId: 't-2' }, instanceId: prefill.id }]);
    expect(oneShot.closed).toBe(true);
    expect(connector.open()).toEqual([]);
  });
});
