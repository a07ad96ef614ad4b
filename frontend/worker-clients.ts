/**
 * `WorkerClients`: the frontend's one cache of worker clients, driven by the model-card feed.
 * It keeps one `WorkerClient` open per `component/endpoint` that a live card names, and closes
 * it when no live card names it any more:
 *
 *   card (any role)      → `{component}/{endpoint}`   (generate)
 *   card (role prefill)  → `{component}/kv_release`   (frees pinned blocks after a transfer)
 *   card (role decode, kvLayerStreaming) → `{component}/kv_prefetch` (layer-wise streaming)
 *
 * The model watcher and the prefill pool read clients from here, so a card that goes away
 * closes its clients for both of them.
 */
import { KV_RELEASE_ENDPOINT, type ModelCard } from '../proto/wire.js';
import { KV_PREFETCH_ENDPOINT } from '../proto/wire.js';
import type { ModelCardFeed } from '../runtime/index.js';
import type { WorkerClient, WorkerConnector } from './worker-client.js';

interface LogSink {
  warn(obj: object, msg: string): void;
}

interface Slot {
  /** Card keys that name this endpoint. */
  readonly users: Set<string>;
  client?: WorkerClient;
  pending: Promise<WorkerClient | undefined>;
}

/** `component/endpoint`. */
export function endpointKey(card: Pick<ModelCard, 'component' | 'endpoint'>): string {
  return `${card.component}/${card.endpoint}`;
}

/** Endpoints a live card needs a client for. */
export function endpointsOf(card: ModelCard): string[] {
  const eps = [endpointKey(card)];
  if (card.role === 'prefill') eps.push(endpointKey({ component: card.component, endpoint: KV_RELEASE_ENDPOINT }));
  if (card.role === 'decode' && card.kvLayerStreaming === true) eps.push(endpointKey({ component: card.component, endpoint: KV_PREFETCH_ENDPOINT }));
  return eps;
}

export class WorkerClients {
  private readonly slots = new Map<string, Slot>();
  /** card key → endpoints it holds, so a changed card can move between endpoints. */
  private readonly held = new Map<string, string[]>();
  private readonly unsubscribe: () => void;
  private closed = false;

  constructor(
    feed: ModelCardFeed,
    private readonly connector: WorkerConnector,
    private readonly log?: LogSink,
  ) {
    this.unsubscribe = feed.subscribe((event) => {
      if (event.type === 'removed') this.hold(event.entry.key, []);
      else this.hold(event.entry.key, endpointsOf(event.entry.card));
    });
  }

  /** The connected client for `component/endpoint`, if a live card names it and it is open. */
  get(component: string, endpoint: string): WorkerClient | undefined {
    return this.slots.get(`${component}/${endpoint}`)?.client;
  }

  /** Like `get`, but waits for a client still connecting. */
  async ready(component: string, endpoint: string): Promise<WorkerClient | undefined> {
    return this.slots.get(`${component}/${endpoint}`)?.pending;
  }

  /** `component/endpoint` pairs with a client (open or opening). */
  endpoints(): string[] {
    return [...this.slots.keys()].sort();
  }

  /** Resolves once every client opened so far is connected (tests, start-up readiness). */
  async settled(): Promise<void> {
    await Promise.all([...this.slots.values()].map((slot) => slot.pending));
  }

  close(): void {
    this.closed = true;
    this.unsubscribe();
    for (const slot of this.slots.values()) slot.client?.close();
    this.slots.clear();
    this.held.clear();
  }

  private hold(key: string, endpoints: string[]): void {
    const before = this.held.get(key) ?? [];
    if (endpoints.length === 0) this.held.delete(key);
    else this.held.set(key, endpoints);
    for (const ep of endpoints) this.acquire(ep, key);
    for (const ep of before) if (!endpoints.includes(ep)) this.releaseSlot(ep, key);
  }

  private acquire(ep: string, key: string): void {
    const existing = this.slots.get(ep);
    if (existing !== undefined) {
      existing.users.add(key);
      return;
    }
    const slash = ep.indexOf('/');
    const slot: Slot = { users: new Set([key]), pending: Promise.resolve(undefined) };
    slot.pending = this.connector.connect(ep.slice(0, slash), ep.slice(slash + 1)).then(
      (client) => {
        if (this.closed || this.slots.get(ep) !== slot) {
          client.close();
          return undefined;
        }
        slot.client = client;
        return client;
      },
      (err: unknown) => {
        this.log?.warn({ err, endpoint: ep }, 'could not open worker client');
        // The next card that names the endpoint tries again.
        if (this.slots.get(ep) === slot) this.slots.delete(ep);
        return undefined;
      },
    );
    this.slots.set(ep, slot);
  }

  private releaseSlot(ep: string, key: string): void {
    const slot = this.slots.get(ep);
    if (slot === undefined) return;
    slot.users.delete(key);
    if (slot.users.size > 0) return;
    this.slots.delete(ep);
    slot.client?.close();
  }
}
