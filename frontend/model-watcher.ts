/**
 * The request pipeline's view of served models, built from the process's model-card feed
 * (runtime/discovery/model-card-feed.ts) and its worker-client cache (worker-clients.ts).
 * A worker is routable only while both its card and its instance record exist, and only when
 * its role can run a whole request (agg or decode). Clients are opened and closed by the
 * cache as cards come and go; the watcher only reads them. A model whose last card went stays
 * known, without candidates, for `graceMs` (`--model-grace-period`): its requests wait and get
 * 503 `no_instances`, not 404, while its worker restarts (model-catalog.ts).
 */
import type { InstanceId, ModelCard, PreprocessedRequest, TokenDelta } from '../proto/wire.js';
import { servesGeneration } from '../proto/wire.js';
import type { CardEvent, ModelCardFeed } from '../runtime/index.js';
import { TandemError, UnavailableError } from '../runtime/errors.js';
import { ModelCatalog, type CatalogChange } from './model-catalog.js';
import type { WorkerClient } from './worker-client.js';
import { endpointKey, type WorkerClients } from './worker-clients.js';

/** One served model as the request pipeline sees it. */
export interface ServedModel {
  readonly name: string;
  /** Instances a request may be routed to now, sorted. */
  candidates(): InstanceId[];
  card(instanceId: InstanceId): ModelCard | undefined;
  /** Every current card of the model, prefill workers included (LoRA admin reaches them all). */
  allCards?(): ModelCard[];
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

/** How long a model whose workers are all gone stays known by default (`--model-grace-period`). */
export const DEFAULT_MODEL_GRACE_MS = 300_000;

export class ModelWatcher {
  private readonly catalog: ModelCatalog;
  private readonly views = new Map<string, ServedModel>();
  private readonly listeners = new Set<(change: CatalogChange) => void>();
  private readonly unsubscribe: () => void;
  private expiryTimer: NodeJS.Timeout | undefined;

  /** Follows every card in `feed` (all roles: a prefill-only model is still listed). */
  constructor(
    feed: ModelCardFeed,
    private readonly clients: WorkerClients,
    private readonly log?: LogSink,
    options: { graceMs?: number } = {},
  ) {
    this.catalog = new ModelCatalog({ graceMs: options.graceMs ?? DEFAULT_MODEL_GRACE_MS });
    this.unsubscribe = feed.subscribe((event) => this.onCard(event));
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
    await this.clients.settled();
  }

  /** True for a known model none of whose workers is registered now (within its grace period). */
  isIdle(name: string): boolean {
    return this.catalog.isIdle(name);
  }

  /** Stop following the feed. The feed and the client cache belong to whoever made them. */
  close(): void {
    this.unsubscribe();
    this.listeners.clear();
    if (this.expiryTimer) clearTimeout(this.expiryTimer);
  }

  private onCard(event: CardEvent): void {
    const now = Date.now();
    if (event.type === 'removed') this.emit(this.catalog.remove(event.entry.key, now));
    else this.emit(this.catalog.put(event.entry.key, event.entry.card, now));
    this.armExpiry();
  }

  /** One timer, for the idle model whose grace period ends first. */
  private armExpiry(): void {
    if (this.expiryTimer) clearTimeout(this.expiryTimer);
    this.expiryTimer = undefined;
    const next = this.catalog.nextExpiry();
    if (next === undefined) return;
    this.expiryTimer = setTimeout(() => {
      this.expiryTimer = undefined;
      this.emit(this.catalog.expire(Date.now()));
      this.armExpiry();
    }, Math.max(0, next - Date.now()));
    this.expiryTimer.unref();
  }

  private emit(changes: CatalogChange[]): void {
    for (const change of changes) {
      if (change.type === 'model_added') {
        this.views.set(change.name, this.createView(change.name));
        this.log?.info({ model: change.name }, 'model added');
      } else if (change.type === 'model_idle') {
        this.log?.warn({ model: change.name, keptUntil: new Date(change.until).toISOString() }, 'model has no workers: requests get 503 no_instances until one registers, or the grace period ends');
      } else if (change.type === 'model_removed') {
        this.views.delete(change.name);
        this.log?.info({ model: change.name }, 'model removed');
      }
      for (const listener of this.listeners) listener(change);
    }
  }

  private clientFor(card: ModelCard): WorkerClient | undefined {
    return this.clients.get(card.component, card.endpoint);
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
          if (card.role === 'prefill' || !servesGeneration(card)) continue;
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
      allCards: () => [...(catalog.cards(name)?.values() ?? [])],
      primaryCard() {
        // An idle model keeps its last card: its tokenizer still answers, its requests get 503.
        const cards = catalog.knownCards(name);
        if (!cards) return undefined;
        for (const card of cards.values()) if (card.role !== 'prefill' && servesGeneration(card)) return card;
        return cards.values().next().value;
      },
      contextLength() {
        let min = Infinity;
        let prefillMin = Infinity;
        for (const card of catalog.knownCards(name)?.values() ?? []) {
          // An embedding worker's context (one pass) does not bound generation.
          if (!servesGeneration(card)) continue;
          if (card.role !== 'prefill') min = Math.min(min, card.contextLength);
          else prefillMin = Math.min(prefillMin, card.contextLength);
        }
        // Only prefill cards left (the decode pool is restarting): they run the whole request then.
        return min === Infinity ? prefillMin : min;
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
