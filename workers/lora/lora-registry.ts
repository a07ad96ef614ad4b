/**
 * LoraRegistry: the adapters one worker serves, by name. Each resident adapter has an engine
 * slot (engines that batch adapters: Engine.loadLora) and its lora_id (router/hashing.ts
 * loraIdOf, name + weight content hash), which keys its KV blocks.
 *
 * - load: reads and checks the PEFT files (peft-adapter.ts), then puts the adapter in a free
 *   slot while steps keep running. With `maxCpuLoras` adapters resident, the least recently
 *   used one with no running sequence makes room; if every one is busy the load is refused.
 * - unload: the name disappears at once (new requests get not_found); the slot is emptied
 *   when the sequences running on it have finished.
 * - acquire/release bracket one sequence's use of an adapter.
 *
 * No LruMap (runtime/lru.ts) here: it evicts on insert regardless of use, and an adapter with
 * running sequences must never be evicted.
 */
import { TandemError } from '../../runtime/errors.js';
import { loraIdOf } from '../../router/index.js';
import { DEFAULT_MAX_LORA_RANK, readPeftAdapter, type LoraAdapterSpec } from './peft-adapter.js';

export interface LoraEngine {
  loadLora?(slot: number, adapter: LoraAdapterSpec): Promise<void>;
  unloadLora?(slot: number): Promise<void>;
}

export interface LoraRegistryOptions {
  /** Adapters kept resident (host memory) at once; default 8. */
  maxCpuLoras?: number;
  maxLoraRank?: number;
  /** Called whenever the resident set changes (the worker re-publishes its card). */
  onChange?: () => void;
}

/** What a model card and /v1/models show of a resident adapter. */
export interface ResidentLora {
  name: string;
  loraId: number;
  path: string;
  rank: number;
}

export interface AcquiredLora {
  name: string;
  loraId: number;
  /** Engine slot; undefined on an engine without adapter kernels (the mocker). */
  slot: number | undefined;
}

interface Entry {
  name: string;
  spec: LoraAdapterSpec;
  loraId: number;
  slot: number;
  refs: number;
  /** Unloaded while in use: the slot empties when refs reaches 0. */
  drained?: () => void;
}

export const DEFAULT_MAX_CPU_LORAS = 8;
/** Distinct adapters in one step (`--max-loras`). */
export const DEFAULT_MAX_LORAS = 4;

export class LoraRegistry {
  /** Resident adapters by name, least recently used first (Map order, re-inserted on use). */
  private readonly byName = new Map<string, Entry>();
  /** Slots held by adapters that were unloaded but still have running sequences. */
  private readonly draining = new Set<Entry>();
  private readonly freeSlots: number[] = [];
  private nextSlot = 0;
  private readonly pending = new Map<string, Promise<ResidentLora>>();
  /** Names unloaded on purpose: never loaded again on demand (a late request for one is not_found), only by load(). */
  private readonly unloadedNames = new Set<string>();
  readonly maxCpuLoras: number;
  readonly maxLoraRank: number;

  constructor(
    private readonly engine: LoraEngine,
    private readonly options: LoraRegistryOptions = {},
  ) {
    this.maxCpuLoras = options.maxCpuLoras ?? DEFAULT_MAX_CPU_LORAS;
    this.maxLoraRank = options.maxLoraRank ?? DEFAULT_MAX_LORA_RANK;
  }

  list(): ResidentLora[] {
    return [...this.byName.values()].map(resident).sort((a, b) => (a.name < b.name ? -1 : 1));
  }

  has(name: string): boolean {
    return this.byName.has(name);
  }

  /** Loads `dir` under `name`; loading the same files under the same name again is a no-op. */
  async load(name: string, dir: string): Promise<ResidentLora> {
    const inFlight = this.pending.get(name);
    if (inFlight !== undefined) await inFlight.catch(() => undefined);
    const p = this.doLoad(name, dir);
    this.pending.set(name, p);
    try {
      return await p;
    } finally {
      if (this.pending.get(name) === p) this.pending.delete(name);
    }
  }

  private async doLoad(name: string, dir: string): Promise<ResidentLora> {
    if (name.length === 0) throw new TandemError('invalid_argument', 'adapter name is empty');
    const spec = await readPeftAdapter(dir, { maxLoraRank: this.maxLoraRank });
    const loraId = loraIdOf(name, spec.contentHash);
    const have = this.byName.get(name);
    if (have !== undefined && have.loraId === loraId) return resident(have);
    if (have !== undefined) throw new TandemError('invalid_argument', `adapter '${name}' is already loaded with other weights; unload it first`);
    if (this.byName.size >= this.maxCpuLoras) await this.evictOne();
    const slot = this.freeSlots.pop() ?? this.nextSlot++;
    try {
      await this.engine.loadLora?.(slot, spec);
    } catch (err) {
      this.freeSlots.push(slot);
      throw err;
    }
    const entry: Entry = { name, spec, loraId, slot, refs: 0 };
    this.byName.set(name, entry);
    this.unloadedNames.delete(name);
    this.options.onChange?.();
    return resident(entry);
  }

  /** Removes the name now; resolves once the slot is empty (after running sequences finish). */
  async unload(name: string): Promise<void> {
    const e = this.byName.get(name);
    if (e === undefined) throw new TandemError('not_found', `adapter '${name}' is not loaded`);
    this.byName.delete(name);
    this.unloadedNames.add(name);
    this.options.onChange?.();
    if (e.refs > 0) {
      this.draining.add(e);
      await new Promise<void>((resolveDrained) => (e.drained = resolveDrained));
      this.draining.delete(e);
    }
    await this.engine.unloadLora?.(e.slot);
    this.freeSlots.push(e.slot);
  }

  /**
   * For a request routed here although the adapter is not resident (the router charged it a
   * load): loads it from `path` first. The resident adapter of that name is used as is.
   */
  async ensure(name: string, path: string | undefined): Promise<void> {
    // A burst for an adapter that is loading waits for that load instead of reading the files again.
    const inFlight = this.pending.get(name);
    if (inFlight !== undefined) await inFlight.catch(() => undefined);
    if (this.byName.has(name) || path === undefined || this.unloadedNames.has(name)) return;
    await this.load(name, path);
  }

  /** For one sequence: the adapter's id and slot, or not_found (never loaded, or unloaded). */
  acquire(name: string): AcquiredLora {
    const e = this.byName.get(name);
    if (e === undefined) throw new TandemError('not_found', `adapter '${name}' is not loaded on this worker`);
    e.refs++;
    this.byName.delete(name);
    this.byName.set(name, e);  // most recently used
    const engineHasSlots = this.engine.loadLora !== undefined;
    return { name, loraId: e.loraId, slot: engineHasSlots ? e.slot : undefined };
  }

  release(name: string, loraId: number): void {
    // The sequence's own entry: after an unload and a reload under the same name, the resident
    // entry is another one and this sequence's is draining.
    const resident = this.byName.get(name);
    const e = resident?.loraId === loraId ? resident : [...this.draining].find((d) => d.name === name && d.loraId === loraId);
    if (e === undefined) return;
    e.refs--;
    if (e.refs === 0) e.drained?.();
  }

  private async evictOne(): Promise<void> {
    for (const e of this.byName.values()) {
      if (e.refs === 0) {
        await this.unload(e.name);
        this.unloadedNames.delete(e.name);  // evicted, not unloaded: a later request may load it again
        return;
      }
    }
    throw new TandemError('resource_exhausted', `all ${this.maxCpuLoras} resident adapters (--max-cpu-loras) have running requests`);
  }
}

function resident(e: Entry): ResidentLora {
  return { name: e.name, loraId: e.loraId, path: e.spec.dir, rank: e.spec.rank };
}
