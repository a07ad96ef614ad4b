/**
 * Follows model cards under `v1/models/{ns}/` in discovery and keeps one WorkerClient per
 * `component/endpoint` the cards name. A worker is routable only while both its card and its
 * instance record exist, and only when its role can run a whole request (agg or decode).
 */
import type { InstanceId, ModelCard, PreprocessedRequest, TokenDelta } from '../proto/wire.js';
import type { Discovery, WatchHandle } from '../runtime/discovery/discovery.js';
import { modelPrefix } from '../runtime/discovery/keys.js';
import { TandemError, UnavailableError } from '../runtime/errors.js';
import { ModelCatalog, endpointKey, type CatalogChange } from './model-catalog.js';
import type { WorkerClient, WorkerConnector } from './worker-client.js';

/** One served model as the request pipeline sees it. */
export interface ServedModel {
  readonly name: string;
  /** Instances a request may be routed to now, sorted. */
  candidates(): InstanceId[];
  card(instanceId: InstanceId): ModelCard | undefined;
  /** Any current card (tokenizer source, block size); undefined once the model is gone. */
  primaryCard(): ModelCard | undefined;
  /** Smallest context length over the model's cards: a request must fit on every worker. */
  contextLength(): number;
  generate(request: PreprocessedRequest, instanceId: InstanceId, signal: AbortSignal): AsyncIterable<TokenDelta>;
}

interface LogSink {
  warn(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
}

interface ClientSlot {
  client?: WorkerClient;
  pending: Promise<WorkerClient | undefined>;
}

export class ModelWatcher {
  private readonly catalog = new ModelCatalog();
  private readonly clients = new Map<string, ClientSlot>();
  private readonly views = new Map<string, ServedModel>();
  private readonly listeners = new Set<(change: CatalogChange) => void>();
  private watch: WatchHandle | undefined;
  private closed = false;

  private constructor(
    private readonly connector: WorkerConnector,
    private readonly log: LogSink | undefined,
  ) {}

  static async start(discovery: Discovery, namespace: string, connector: WorkerConnector, log?: LogSink): Promise<ModelWatcher> {
    const watcher = new ModelWatcher(connector, log);
    watcher.watch = await discovery.watch<ModelCard>(modelPrefix(namespace), (event) => {
      if (event.type === 'added') watcher.onPut(event.key, event.value);
      else watcher.onRemove(event.key);
    });
    return watcher;
  }

  names(): string[] {
    return this.catalog.names();
  }

  model(name: string): ServedModel | undefined {
    return this.views.get(name);
  }

  /** Subscribe to model and instance changes; returns an unsubscribe function. */
  onChange(listener: (change: CatalogChange) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Resolves once every client opened so far is connected (tests, startup readiness). */
  async settled(): Promise<void> {
    await Promise.all([...this.clients.values()].map((slot) => slot.pending));
  }

  close(): void {
    this.closed = true;
    this.watch?.close();
    this.watch = undefined;
    for (const slot of this.clients.values()) slot.client?.close();
    this.clients.clear();
    this.listeners.clear();
  }

  private onPut(key: string, card: ModelCard): void {
    if (!isModelCard(card)) {
      this.log?.warn({ key }, 'ignoring malformed model card');
      return;
    }
    this.ensureClient(endpointKey(card));
    this.emit(this.catalog.put(key, card));
  }

  private onRemove(key: string): void {
    this.emit(this.catalog.remove(key));
    const used = this.catalog.endpoints();
    for (const [ep, slot] of this.clients) {
      if (used.has(ep)) continue;
      slot.client?.close();
      this.clients.delete(ep);
    }
  }

  private emit(changes: CatalogChange[]): void {
    for (const change of changes) {
      if (change.type === 'model_added') {
        this.views.set(change.name, this.createView(change.name));
        this.log?.info({ model: change.name }, 'model added');
      } else if (change.type === 'model_removed') {
        this.views.delete(change.name);
        this.log?.info({ model: change.name }, 'model removed');
      }
      for (const listener of this.listeners) listener(change);
    }
  }

  private ensureClient(ep: string): void {
    if (this.clients.has(ep)) return;
    const slash = ep.indexOf('/');
    const slot: ClientSlot = { pending: Promise.resolve(undefined) };
    slot.pending = this.connector.connect(ep.slice(0, slash), ep.slice(slash + 1)).then(
      (client) => {
        if (this.closed || this.clients.get(ep) !== slot) {
          client.close();
          return undefined;
        }
        slot.client = client;
        return client;
      },
      (err: unknown) => {
        this.log?.warn({ err, endpoint: ep }, 'could not open worker client');
        if (this.clients.get(ep) === slot) this.clients.delete(ep);
        return undefined;
      },
    );
    this.clients.set(ep, slot);
  }

  private clientFor(card: ModelCard): WorkerClient | undefined {
    return this.clients.get(endpointKey(card))?.client;
  }

  private createView(name: string): ServedModel {
    const catalog = this.catalog;
    const watcher = this;
    return {
      name,
      candidates() {
        const cards = catalog.cards(name);
        if (!cards) return [];
        const out: InstanceId[] = [];
        let live: Set<InstanceId> | undefined;
        let liveFor: WorkerClient | undefined;
        for (const [id, card] of cards) {
          if (card.role === 'prefill') continue;
          const client = watcher.clientFor(card);
          if (!client) continue;
          if (client !== liveFor) {
            live = new Set(client.instanceIds());
            liveFor = client;
          }
          if (live!.has(id)) out.push(id);
        }
        return out.sort();
      },
      card: (instanceId) => catalog.card(name, instanceId),
      primaryCard() {
        const cards = catalog.cards(name);
        if (!cards) return undefined;
        for (const card of cards.values()) if (card.role !== 'prefill') return card;
        return cards.values().next().value;
      },
      contextLength() {
        let min = Infinity;
        for (const card of catalog.cards(name)?.values() ?? []) if (card.role !== 'prefill') min = Math.min(min, card.contextLength);
        return min;
      },
      generate(request, instanceId, signal) {
        const card = catalog.card(name, instanceId);
        if (!card) throw new UnavailableError(`instance ${instanceId} no longer serves ${name}`);
        const client = watcher.clientFor(card);
        if (!client) throw new TandemError('unavailable', `no connection to ${endpointKey(card)}`);
        return client.generate(request, instanceId, signal);
      },
    };
  }
}

function isModelCard(value: unknown): value is ModelCard {
  const card = value as Partial<ModelCard> | null;
  return (
    typeof card === 'object' &&
    card !== null &&
    typeof card.name === 'string' &&
    card.name.length > 0 &&
    typeof card.component === 'string' &&
    typeof card.endpoint === 'string' &&
    typeof card.contextLength === 'number'
  );
}
