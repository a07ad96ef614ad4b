/**
 * `ModelCardFeed`: the one watch of model cards under `v1/models/{ns}/` in a process.
 * Every reader of cards (the frontend's model watcher, prefill pool and KV selector, the KV
 * router service, later the dashboard and the planner) subscribes here instead of watching
 * discovery itself, so cards are validated once (proto `parseModelCard`), keys are parsed
 * once (`parseModelKey`), and a card that goes away is seen going away by everyone.
 *
 *   discovery.watch(v1/models/{ns}/) ─▶ parseModelKey + parseModelCard ─▶ live cards by key
 *        added (new key)        ─▶ 'added'
 *        added (same key again) ─▶ 'changed' (previous value attached)
 *        added (malformed)      ─▶ warn once per key; a key that was live becomes 'removed'
 *        removed                ─▶ 'removed'
 *
 * Subscribers pass a filter (roles, model, component). A card whose change moves it into or
 * out of a filter is reported to that subscriber as 'added' or 'removed', so each subscriber
 * sees a consistent set of its own. Listeners run synchronously, in subscription order.
 */
import { parseModelCard, type InstanceId, type ModelCard, type WorkerRole } from '../../proto/wire.js';
import type { Discovery, WatchHandle } from './discovery.js';
import { modelPrefix, parseModelKey } from './keys.js';

/** A validated card and where it lives. */
export interface LiveCard {
  /** Discovery key `v1/models/{ns}/{model}/{instanceId}`. */
  readonly key: string;
  /** The card's model name (`card.name`): cards group into models by it. */
  readonly model: string;
  /** The instance that registered the card (the key's last segment, equal to `card.instanceId`). */
  readonly instanceId: InstanceId;
  readonly card: ModelCard;
}

export type CardEvent =
  | { type: 'added'; entry: LiveCard }
  /** Same key, new value (a worker re-registered or updated its card); still in the filter. */
  | { type: 'changed'; entry: LiveCard; previous: LiveCard }
  /** `entry` is the last value the subscriber saw. */
  | { type: 'removed'; entry: LiveCard };

/** Which cards a subscriber sees; every given field must match. */
export interface CardFilter {
  roles?: readonly WorkerRole[];
  model?: string;
  component?: string;
}

export type CardListener = (event: CardEvent) => void;

/** A filtered view of the feed. */
export interface CardView {
  /** Live cards in the view now, sorted by key. */
  cards(): LiveCard[];
  /** Subscribe; the current cards are delivered first as 'added'. Returns the unsubscribe. */
  subscribe(listener: CardListener): () => void;
}

interface LogSink {
  warn(obj: object, msg: string): void;
}

interface Subscriber {
  listener: CardListener;
  filter: CardFilter;
}

export class ModelCardFeed {
  private readonly live = new Map<string, LiveCard>();
  /** model → instance → card, for per-model lookups. */
  private readonly byModel = new Map<string, Map<InstanceId, LiveCard>>();
  private readonly subscribers = new Set<Subscriber>();
  /** Keys already warned about, so a malformed card re-put every heartbeat logs once. */
  private readonly warned = new Set<string>();
  private watch: WatchHandle | undefined;

  private constructor(
    readonly namespace: string,
    private readonly log: LogSink | undefined,
  ) {}

  /** Start the watch; resolves with the cards that exist now already loaded. */
  static async start(discovery: Discovery, namespace: string, log?: LogSink): Promise<ModelCardFeed> {
    const feed = new ModelCardFeed(namespace, log);
    feed.watch = await discovery.watch<unknown>(modelPrefix(namespace), (event) => {
      if (event.type === 'added') feed.put(event.key, event.value);
      else feed.remove(event.key);
    });
    return feed;
  }

  /** Live cards matching `filter`, sorted by key. */
  cards(filter: CardFilter = {}): LiveCard[] {
    const out: LiveCard[] = [];
    for (const entry of this.live.values()) if (matches(entry, filter)) out.push(entry);
    return out.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  }

  /** The live card under a discovery key. */
  get(key: string): LiveCard | undefined {
    return this.live.get(key);
  }

  /** The live card of `instanceId` for `model`. */
  card(model: string, instanceId: InstanceId): ModelCard | undefined {
    return this.byModel.get(model)?.get(instanceId)?.card;
  }

  /** Models with at least one live card matching `filter`, sorted. */
  models(filter: CardFilter = {}): string[] {
    const out: string[] = [];
    for (const [model, cards] of this.byModel) {
      for (const entry of cards.values()) {
        if (matches(entry, filter)) {
          out.push(model);
          break;
        }
      }
    }
    return out.sort();
  }

  /**
   * Subscribe to card events matching `filter`. With `replay` (default) the cards live now are
   * delivered first, as 'added', before this returns. Returns the unsubscribe function.
   */
  subscribe(listener: CardListener, filter: CardFilter = {}, options: { replay?: boolean } = {}): () => void {
    const sub: Subscriber = { listener, filter };
    if (options.replay !== false) for (const entry of this.cards(filter)) listener({ type: 'added', entry });
    this.subscribers.add(sub);
    return () => this.subscribers.delete(sub);
  }

  /** A filtered view, for consumers that only need one slice of the cards. */
  view(filter: CardFilter): CardView {
    return {
      cards: () => this.cards(filter),
      subscribe: (listener) => this.subscribe(listener, filter),
    };
  }

  /** Stop watching. Idempotent; subscribers hear nothing more. */
  close(): void {
    this.watch?.close();
    this.watch = undefined;
    this.subscribers.clear();
  }

  private put(key: string, value: unknown): void {
    const parts = parseModelKey(key, this.namespace);
    const parsed = parseModelCard(value);
    let reason: string | undefined;
    if (parts === undefined) reason = 'key is not v1/models/{ns}/{model}/{instance_id_hex}';
    else if (!parsed.ok) reason = parsed.reason;
    else if (parsed.card.instanceId !== parts.instanceId) reason = 'card instanceId differs from its key';
    if (reason !== undefined || !parsed.ok) {
      if (!this.warned.has(key)) {
        this.warned.add(key);
        this.log?.warn({ key, reason }, 'ignoring malformed model card');
      }
      // A card that turned bad is no longer one anybody may route by.
      this.drop(key);
      return;
    }
    this.warned.delete(key);
    const entry: LiveCard = { key, model: parsed.card.name, instanceId: parts!.instanceId, card: parsed.card };
    const previous = this.live.get(key);
    if (previous !== undefined) this.unindex(previous);
    this.live.set(key, entry);
    let cards = this.byModel.get(entry.model);
    if (cards === undefined) this.byModel.set(entry.model, (cards = new Map()));
    cards.set(entry.instanceId, entry);
    this.emit(previous, entry);
  }

  /** The key left discovery: forget it entirely (a new card under it may warn again). */
  private remove(key: string): void {
    this.warned.delete(key);
    this.drop(key);
  }

  private drop(key: string): void {
    const previous = this.live.get(key);
    if (previous === undefined) return;
    this.live.delete(key);
    this.unindex(previous);
    this.emit(previous, undefined);
  }

  private unindex(entry: LiveCard): void {
    const cards = this.byModel.get(entry.model);
    if (cards?.get(entry.instanceId) !== entry) return;
    cards.delete(entry.instanceId);
    if (cards.size === 0) this.byModel.delete(entry.model);
  }

  /** Deliver one transition to each subscriber, as seen through its filter. */
  private emit(previous: LiveCard | undefined, next: LiveCard | undefined): void {
    for (const sub of [...this.subscribers]) {
      const was = previous !== undefined && matches(previous, sub.filter);
      const is = next !== undefined && matches(next, sub.filter);
      let event: CardEvent | undefined;
      if (was && is) event = { type: 'changed', entry: next!, previous: previous! };
      else if (is) event = { type: 'added', entry: next! };
      else if (was) event = { type: 'removed', entry: previous! };
      if (event === undefined) continue;
      try {
        sub.listener(event);
      } catch (err) {
        // One broken consumer must not keep the others from seeing the card.
        this.log?.warn({ err, key: event.entry.key }, 'model card listener threw');
      }
    }
  }
}

function matches(entry: LiveCard, filter: CardFilter): boolean {
  if (filter.roles !== undefined && !filter.roles.includes(entry.card.role)) return false;
  if (filter.model !== undefined && entry.model !== filter.model) return false;
  if (filter.component !== undefined && entry.card.component !== filter.component) return false;
  return true;
}
