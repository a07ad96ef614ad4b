/**
 * Pure bookkeeping of the model watcher: which models exist and which instances serve each.
 * A model appears with its first card. When its last card goes (its lone worker crashed and
 * its lease expired, say) it stays known, with no instances, for a grace period: requests for
 * it get 503 `no_instances` with Retry-After, as for any model whose workers are all down,
 * rather than 404 `model_not_found`, which clients take as permanent. A card back within the
 * grace period serves it again; past it the model is removed. No I/O and no timers here: the
 * watcher passes the clock in and calls `expire` when `nextExpiry` says.
 */
import type { InstanceId, ModelCard } from '../proto/wire.js';

export type CatalogChange =
  | { type: 'model_added'; name: string }
  | { type: 'model_removed'; name: string }
  /** The model's last card went: it is kept, with no instances, until `expire` past its grace. */
  | { type: 'model_idle'; name: string; until: number }
  | { type: 'instance_added'; name: string; instanceId: InstanceId }
  | { type: 'instance_removed'; name: string; instanceId: InstanceId };

interface KeyRef {
  name: string;
  instanceId: InstanceId;
}

/** A model without cards, kept through its grace period with the cards it last had. */
interface IdleModel {
  lastCards: ReadonlyMap<InstanceId, ModelCard>;
  until: number;
}

export interface ModelCatalogOptions {
  /** How long a model stays known once its last card is gone (ms); 0 = removed at once. */
  graceMs?: number;
}

export class ModelCatalog {
  private readonly byKey = new Map<string, KeyRef>();
  private readonly models = new Map<string, Map<InstanceId, ModelCard>>();
  private readonly idle = new Map<string, IdleModel>();
  private readonly graceMs: number;

  constructor(options: ModelCatalogOptions = {}) {
    this.graceMs = options.graceMs ?? 0;
  }

  /** Record a card put under `key`. Returns what changed (empty when only the value changed). */
  put(key: string, card: ModelCard, now = 0): CatalogChange[] {
    const changes: CatalogChange[] = [];
    const previous = this.byKey.get(key);
    // A key whose card switched model names is a removal from the old model first.
    if (previous && previous.name !== card.name) changes.push(...this.remove(key, now));
    const instanceId = card.instanceId;
    let cards = this.models.get(card.name);
    if (!cards) {
      cards = new Map();
      this.models.set(card.name, cards);
      // Back within its grace period: the model never left.
      if (!this.idle.delete(card.name)) changes.push({ type: 'model_added', name: card.name });
    }
    if (!cards.has(instanceId)) changes.push({ type: 'instance_added', name: card.name, instanceId });
    cards.set(instanceId, card);
    this.byKey.set(key, { name: card.name, instanceId });
    return changes;
  }

  remove(key: string, now = 0): CatalogChange[] {
    const ref = this.byKey.get(key);
    if (!ref) return [];
    this.byKey.delete(key);
    const cards = this.models.get(ref.name);
    const card = cards?.get(ref.instanceId);
    if (!cards?.delete(ref.instanceId)) return [];
    const changes: CatalogChange[] = [{ type: 'instance_removed', name: ref.name, instanceId: ref.instanceId }];
    if (cards.size === 0) {
      this.models.delete(ref.name);
      if (this.graceMs > 0) {
        const until = now + this.graceMs;
        this.idle.set(ref.name, { lastCards: new Map([[ref.instanceId, card!]]), until });
        changes.push({ type: 'model_idle', name: ref.name, until });
      } else {
        changes.push({ type: 'model_removed', name: ref.name });
      }
    }
    return changes;
  }

  /** Removes the idle models whose grace period ended by `now`. */
  expire(now: number): CatalogChange[] {
    const changes: CatalogChange[] = [];
    for (const [name, idle] of this.idle) {
      if (idle.until > now) continue;
      this.idle.delete(name);
      changes.push({ type: 'model_removed', name });
    }
    return changes;
  }

  /** When the next idle model's grace period ends (ms, the clock `remove` was given); undefined when none. */
  nextExpiry(): number | undefined {
    let next: number | undefined;
    for (const idle of this.idle.values()) if (next === undefined || idle.until < next) next = idle.until;
    return next;
  }

  /** Known: served now, or idle within its grace period. */
  has(name: string): boolean {
    return this.models.has(name) || this.idle.has(name);
  }

  /** True for a known model that has no card now. */
  isIdle(name: string): boolean {
    return this.idle.has(name);
  }

  names(): string[] {
    return [...new Set([...this.models.keys(), ...this.idle.keys()])].sort();
  }

  /** The current cards of a model; undefined when it has none (gone, or idle). */
  cards(name: string): ReadonlyMap<InstanceId, ModelCard> | undefined {
    return this.models.get(name);
  }

  /** The cards a model has now, or the ones it had last while idle (its tokenizer, its context length). */
  knownCards(name: string): ReadonlyMap<InstanceId, ModelCard> | undefined {
    return this.models.get(name) ?? this.idle.get(name)?.lastCards;
  }

  card(name: string, instanceId: InstanceId): ModelCard | undefined {
    return this.models.get(name)?.get(instanceId);
  }
}
