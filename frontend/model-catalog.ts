/**
 * Pure bookkeeping of the model watcher: which models exist and which instances serve each.
 * A model exists while at least one card for it exists: it appears with its first card and
 * disappears with its last. No I/O here; the watcher feeds validated cards from the card feed
 * (runtime/discovery/model-card-feed.ts) in and acts on the returned changes.
 */
import type { InstanceId, ModelCard } from '../proto/wire.js';

export type CatalogChange =
  | { type: 'model_added'; name: string }
  | { type: 'model_removed'; name: string }
  | { type: 'instance_added'; name: string; instanceId: InstanceId }
  | { type: 'instance_removed'; name: string; instanceId: InstanceId };

interface KeyRef {
  name: string;
  instanceId: InstanceId;
}

export class ModelCatalog {
  private readonly byKey = new Map<string, KeyRef>();
  private readonly models = new Map<string, Map<InstanceId, ModelCard>>();

  /** Record a card put under `key`. Returns what changed (empty when only the value changed). */
  put(key: string, card: ModelCard): CatalogChange[] {
    const changes: CatalogChange[] = [];
    const previous = this.byKey.get(key);
    // A key whose card switched model names is a removal from the old model first.
    if (previous && previous.name !== card.name) changes.push(...this.remove(key));
    const instanceId = card.instanceId;
    let cards = this.models.get(card.name);
    if (!cards) {
      cards = new Map();
      this.models.set(card.name, cards);
      changes.push({ type: 'model_added', name: card.name });
    }
    if (!cards.has(instanceId)) changes.push({ type: 'instance_added', name: card.name, instanceId });
    cards.set(instanceId, card);
    this.byKey.set(key, { name: card.name, instanceId });
    return changes;
  }

  remove(key: string): CatalogChange[] {
    const ref = this.byKey.get(key);
    if (!ref) return [];
    this.byKey.delete(key);
    const cards = this.models.get(ref.name);
    if (!cards?.delete(ref.instanceId)) return [];
    const changes: CatalogChange[] = [{ type: 'instance_removed', name: ref.name, instanceId: ref.instanceId }];
    if (cards.size === 0) {
      this.models.delete(ref.name);
      changes.push({ type: 'model_removed', name: ref.name });
    }
    return changes;
  }

  has(name: string): boolean {
    return this.models.has(name);
  }

  names(): string[] {
    return [...this.models.keys()].sort();
  }

  cards(name: string): ReadonlyMap<InstanceId, ModelCard> | undefined {
    return this.models.get(name);
  }

  card(name: string, instanceId: InstanceId): ModelCard | undefined {
    return this.models.get(name)?.get(instanceId);
  }
}
