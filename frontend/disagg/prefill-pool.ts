/**
 * The frontend's view of the prefill pool: the model cards with role 'prefill' in the
 * process's card feed, each routable while its instance record for `prefill/generate`
 * exists. The model watcher hides prefill cards from whole-request routing; the pool is the
 * view that shows them. Clients (generate, and kv_release to free pinned blocks) come from
 * the shared cache (frontend/worker-clients.ts), which closes them when their cards go.
 */
import {
  KV_RELEASE_ENDPOINT,
  type InstanceId,
  type KvReleaseRequest,
  type KvReleaseResponse,
  type KvTransferParams,
  type ModelCard,
  type PreprocessedRequest,
  type TokenDelta,
} from '../../proto/wire.js';
import { KV_PREFETCH_ENDPOINT, type KvPrefetchRequest, type KvPrefetchResponse } from '../../proto/wire.js';
import type { ModelCardFeed } from '../../runtime/index.js';
import { UnavailableError } from '../../runtime/errors.js';
import { ModelCatalog } from '../model-catalog.js';
import type { WorkerConnector } from '../worker-client.js';
import { endpointKey, type WorkerClients } from '../worker-clients.js';

const DEFAULT_PREFILL_COMPONENT = 'prefill';
const RELEASE_TIMEOUT_MS = 5000;

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
  /**
   * Layer-wise streaming: hand an early kvTransfer to the decode worker of `decodeCard`
   * (`kv_prefetch`). Resolves whether it started copying; never rejects.
   */
  prefetch?(decodeCard: ModelCard, params: KvTransferParams): Promise<boolean>;
}

export class PrefillPool implements PrefillWorkers {
  private readonly catalog = new ModelCatalog();
  private readonly unsubscribe: () => void;

  /**
   * `connector` is only for a release whose prefill card is already gone (the process may
   * still hold the blocks): a one-shot client, closed after the call.
   */
  constructor(
    feed: ModelCardFeed,
    private readonly clients: WorkerClients,
    private readonly connector: WorkerConnector,
    private readonly log?: LogSink,
  ) {
    this.unsubscribe = feed.subscribe(
      (event) => {
        if (event.type === 'removed') this.catalog.remove(event.entry.key);
        else this.catalog.put(event.entry.key, event.entry.card);
      },
      { roles: ['prefill'] },
    );
  }

  /** Resolves once every client opened so far is connected (tests). */
  async settled(): Promise<void> {
    await this.clients.settled();
  }

  candidates(model: string): InstanceId[] {
    const cards = this.catalog.cards(model);
    if (!cards) return [];
    const out: InstanceId[] = [];
    for (const [id, card] of cards) {
      const client = this.clients.get(card.component, card.endpoint);
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
    const client = this.clients.get(card.component, card.endpoint);
    if (!client) throw new UnavailableError(`no connection to ${endpointKey(card)}`);
    return client.generate(request, instanceId, signal);
  }

  async release(model: string, params: KvTransferParams): Promise<void> {
    const component = this.catalog.card(model, params.prefillInstanceId)?.component ?? DEFAULT_PREFILL_COMPONENT;
    let oneShot = false;
    try {
      let client = await this.clients.ready(component, KV_RELEASE_ENDPOINT);
      if (client === undefined) {
        client = await this.connector.connect(component, KV_RELEASE_ENDPOINT);
        oneShot = true;
      }
      try {
        const request: KvReleaseRequest = { transferId: params.transferId };
        const answers = client.call<KvReleaseRequest, KvReleaseResponse>(request, params.prefillInstanceId, AbortSignal.timeout(RELEASE_TIMEOUT_MS));
        for await (const _ of answers) {
          // drain: `released: false` (already freed) is as good as true here
        }
      } finally {
        if (oneShot) client.close();
      }
    } catch (err) {
      // The worker frees unclaimed blocks after --kv-release-timeout anyway.
      this.log?.warn({ err, prefillInstanceId: params.prefillInstanceId, transferId: params.transferId }, 'kv_release failed');
    }
  }

  async prefetch(decodeCard: ModelCard, params: KvTransferParams): Promise<boolean> {
    try {
      const client = await this.clients.ready(decodeCard.component, KV_PREFETCH_ENDPOINT);
      if (client === undefined) return false;
      let started = false;
      const answers = client.call<KvPrefetchRequest, KvPrefetchResponse>({ kvTransfer: params }, decodeCard.instanceId, AbortSignal.timeout(RELEASE_TIMEOUT_MS));
      for await (const r of answers) started ||= r.started === true;
      return started;
    } catch (err) {
      // The decode request pulls the blocks whole, as without streaming.
      this.log?.warn({ err, decodeInstanceId: decodeCard.instanceId, transferId: params.transferId }, 'kv_prefetch failed');
      return false;
    }
  }

  /** Stop following the feed. The feed and the client cache belong to whoever made them. */
  close(): void {
    this.unsubscribe();
  }
}
