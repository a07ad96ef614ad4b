/**
 * The frontend's view of the prefill pool: model cards with role 'prefill' under
 * `v1/models/{ns}/`, each routable while its instance record for `prefill/generate` exists.
 * The model watcher deliberately hides prefill cards from whole-request routing, so the pool
 * keeps its own watch and its own clients (generate, and kv_release to free pinned blocks).
 */
import type { InstanceId, KvTransferParams, ModelCard, PreprocessedRequest, TokenDelta } from '../../proto/wire.js';
import type { Discovery, WatchHandle } from '../../runtime/discovery/discovery.js';
import { modelPrefix } from '../../runtime/discovery/keys.js';
import { UnavailableError } from '../../runtime/errors.js';
import { ModelCatalog, endpointKey } from '../model-catalog.js';
import type { WorkerClient, WorkerConnector } from '../worker-client.js';

/** Endpoint a prefill worker serves to free a transfer's pinned blocks (protocol step 2). */
export const KV_RELEASE_ENDPOINT = 'kv_release';
const DEFAULT_PREFILL_COMPONENT = 'prefill';

interface LogSink {
  warn(obj: object, msg: string): void;
}

/** What the prefill router needs from the pool; tests can fake it. */
export interface PrefillWorkers {
  /** Live prefill instances for `model`, sorted. */
  candidates(model: string): InstanceId[];
  card(model: string, instanceId: InstanceId): ModelCard | undefined;
  generate(model: string, request: PreprocessedRequest, instanceId: InstanceId, signal: AbortSignal): AsyncIterable<TokenDelta>;
  /** Best effort and idempotent: tell the prefill worker to free a transfer's pinned blocks. */
  release(model: string, params: KvTransferParams): Promise<void>;
}

export class PrefillPool implements PrefillWorkers {
  private readonly catalog = new ModelCatalog();
  private readonly clients = new Map<string, Promise<WorkerClient | undefined>>();
  private readonly ready = new Map<string, WorkerClient>();
  private watch: WatchHandle | undefined;
  private closed = false;

  private constructor(
    private readonly connector: WorkerConnector,
    private readonly log: LogSink | undefined,
  ) {}

  static async start(discovery: Discovery, namespace: string, connector: WorkerConnector, log?: LogSink): Promise<PrefillPool> {
    const pool = new PrefillPool(connector, log);
    pool.watch = await discovery.watch<ModelCard>(modelPrefix(namespace), (event) => {
      if (event.type === 'removed') {
        pool.catalog.remove(event.key);
        return;
      }
      const card = event.value;
      if (card?.role !== 'prefill' || typeof card.name !== 'string' || typeof card.component !== 'string') {
        // A key whose card changed role leaves the pool.
        pool.catalog.remove(event.key);
        return;
      }
      pool.catalog.put(event.key, card);
      pool.client(card.component, card.endpoint);
      pool.client(card.component, KV_RELEASE_ENDPOINT);
    });
    return pool;
  }

  /** Resolves once every client opened so far is connected (tests). */
  async settled(): Promise<void> {
    await Promise.all(this.clients.values());
  }

  candidates(model: string): InstanceId[] {
    const cards = this.catalog.cards(model);
    if (!cards) return [];
    const out: InstanceId[] = [];
    for (const [id, card] of cards) {
      const client = this.ready.get(endpointKey(card));
      if (client && client.instanceIds().includes(id)) out.push(id);
    }
    return out.sort();
  }

  card(model: string, instanceId: InstanceId): ModelCard | undefined {
    return this.catalog.card(model, instanceId);
  }

  generate(model: string, request: PreprocessedRequest, instanceId: InstanceId, signal: AbortSignal): AsyncIterable<TokenDelta> {
    const card = this.catalog.card(model, instanceId);
    if (!card) throw new UnavailableError(`prefill instance ${instanceId} no longer serves ${model}`);
    const client = this.ready.get(endpointKey(card));
    if (!client) throw new UnavailableError(`no connection to ${endpointKey(card)}`);
    return client.generate(request, instanceId, signal);
  }

  async release(model: string, params: KvTransferParams): Promise<void> {
    const component = this.catalog.card(model, params.prefillInstanceId)?.component ?? DEFAULT_PREFILL_COMPONENT;
    try {
      const client = await this.client(component, KV_RELEASE_ENDPOINT);
      if (!client) return;
      // kv_release is not a generation call; the client is typed for the common case only.
      const request = { transferId: params.transferId } as unknown as PreprocessedRequest;
      const signal = AbortSignal.timeout(5000);
      for await (const _ of client.generate(request, params.prefillInstanceId, signal)) {
        // drain: the answer carries nothing we need
      }
    } catch (err) {
      // The worker frees unclaimed blocks after --kv-release-timeout anyway.
      this.log?.warn({ err, prefillInstanceId: params.prefillInstanceId, transferId: params.transferId }, 'kv_release failed');
    }
  }

  close(): void {
    this.closed = true;
    this.watch?.close();
    this.watch = undefined;
    for (const client of this.ready.values()) client.close();
    this.ready.clear();
    this.clients.clear();
  }

  private client(component: string, endpoint: string): Promise<WorkerClient | undefined> {
    const key = `${component}/${endpoint}`;
    let pending = this.clients.get(key);
    if (pending) return pending;
    pending = this.connector.connect(component, endpoint).then(
      (client) => {
        if (this.closed) {
          client.close();
          return undefined;
        }
        this.ready.set(key, client);
        return client;
      },
      (err: unknown) => {
        this.log?.warn({ err, endpoint: key }, 'could not open prefill client');
        this.clients.delete(key);
        return undefined;
      },
    );
    this.clients.set(key, pending);
    return pending;
  }
}
