/**
 * Which LoRA adapters the fleet serves, read from model cards (`card.loras`, set by each
 * worker's LoraRegistry): an adapter is served while at least one routable card of its base
 * model lists it. Pure reads over ModelWatcher; no I/O.
 */
import { servesLora, type InstanceId, type ModelCard } from '../../proto/wire.js';
import type { ModelWatcher, ServedModel } from '../model-watcher.js';

export interface ServedAdapter {
  name: string;
  /** The base model's served name (`parent` in /v1/models). */
  parent: string;
  loraId: number;
  /** Where a worker that lists it read it from (workers share the filesystem): lets another worker load it. */
  path?: string;
}

/** The adapters a card lists; tolerant of cards from workers without adapters. */
export function cardLoras(card: ModelCard | undefined): Array<{ name: string; loraId: number; path?: string }> {
  const l = (card as { loras?: unknown } | undefined)?.loras;
  if (!Array.isArray(l)) return [];
  return l.filter((x): x is { name: string; loraId: number; path?: string } => typeof x?.name === 'string' && Number.isSafeInteger(x?.loraId));
}

/** Every adapter some card lists, by name (a model name wins over an adapter of the same name). */
export function servedAdapters(models: ModelWatcher): ServedAdapter[] {
  const out = new Map<string, ServedAdapter>();
  for (const parent of models.names()) {
    const model = models.model(parent);
    if (model === undefined) continue;
    for (const id of model.candidates()) {
      for (const l of cardLoras(model.card(id))) {
        if (!out.has(l.name) && models.model(l.name) === undefined) {
          out.set(l.name, { name: l.name, parent, loraId: l.loraId, ...(typeof l.path === 'string' ? { path: l.path } : {}) });
        }
      }
    }
  }
  return [...out.values()].sort((a, b) => (a.name < b.name ? -1 : 1));
}

export function findAdapter(models: ModelWatcher, name: string): { adapter: ServedAdapter; model: ServedModel } | undefined {
  const a = servedAdapters(models).find((x) => x.name === name);
  if (a === undefined) return undefined;
  const model = models.model(a.parent);
  return model === undefined ? undefined : { adapter: a, model };
}

/** Candidates whose card lists the adapter. */
export function instancesWithAdapter(model: ServedModel, candidates: readonly InstanceId[], name: string): InstanceId[] {
  return candidates.filter((id) => cardLoras(model.card(id)).some((l) => l.name === name));
}

/**
 * Candidates that can run an adapter request at all: a worker whose card says its engine has no
 * LoRA kernels (`supportsLora: false`, CUDA today) is never one, holder or not.
 */
export function loraCapable(cardOf: (id: InstanceId) => ModelCard | undefined, candidates: readonly InstanceId[]): InstanceId[] {
  return candidates.filter((id) => servesLora(cardOf(id)));
}
