/**
 * LoraRegistry: the adapters one worker serves, by name. Each resident adapter has an engine
 * slot (engines that batch adapters: Engine.loadLora) and its lora_id (router/hashing.ts
 * loraIdOf, name + content hash), which keys its KV blocks.
 *
 * - load: reads and checks the PEFT files (peft-adapter.ts), then puts the adapter in a free
 *   slot while steps keep running. With `maxCpuLoras` adapters resident or loading, the least
 *   recently used one with no running sequence makes room; if every one is busy the load is
 *   refused. At most `maxLoraLoads` loads read files at once; the next few wait, the rest are
 *   refused (429). Loads of one name run one after another; a load of the same files already
 *   in flight is joined, not repeated.
 * - unload: the name disappears at once (new requests get not_found) and is never loaded again
 *   on demand; the slot is emptied when the sequences running on it have finished. Eviction
 *   frees an idle slot the same way but leaves the name loadable on demand.
 * - acquireWhenReady/acquire/release bracket one sequence's use of an adapter.
 *
 * Every mutation of the resident set happens in one synchronous stretch after its last await
 * (check, then commit), so interleaved loads, evictions and acquires see a consistent set.
 *
 * No LruMap (runtime/lru.ts) here: it evicts on insert regardless of use, and an adapter with
 * running sequences must never be evicted.
 */
import type { Logger } from 'pino';
import { Semaphore } from '../../runtime/index.js';
import { TandemError } from '../../runtime/errors.js';
import { loraIdOf } from '../../router/index.js';
import { DEFAULT_MAX_LORA_BYTES, DEFAULT_MAX_LORA_RANK, LoraAdapterError, readPeftAdapter, type LoraAdapterSpec } from './peft-adapter.js';
import type { LoraModelDims } from './lora-dims.js';

export interface LoraEngine {
  loadLora?(slot: number, adapter: LoraAdapterSpec): Promise<void>;
  unloadLora?(slot: number): Promise<void>;
}

export interface LoraRegistryOptions {
  /** Adapters kept resident (host memory) at once; default 8. */
  maxCpuLoras?: number;
  maxLoraRank?: number;
  /** Weight bytes of one adapter (`--max-lora-bytes`). */
  maxLoraBytes?: number;
  /** Loads reading files and filling slots at once (`--max-lora-loads`); default 2. */
  maxLoraLoads?: number;
  /** Directories run-time loads may read (`--lora-root`); empty = anywhere. Start-up adapters (`trusted`) are exempt. */
  roots?: readonly string[];
  /** The base model's shapes: adapters are checked against them before a tensor byte is read. */
  dims?: LoraModelDims;
  /** Called whenever the resident set changes (the worker re-publishes its card). */
  onChange?: () => void;
  /**
   * Where loads are logged: each start (with the loads running and waiting), and each refusal
   * with its detail (paths, errno: for the log only; the caller answers `err.message`).
   */
  log?: Pick<Logger, 'info' | 'warn'>;
  /** How adapter files are read (default readPeftAdapter); tests pass an in-memory reader to interleave loads step by step. */
  readAdapter?: typeof readPeftAdapter;
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

interface PendingLoad {
  dir: string;
  promise: Promise<ResidentLora>;
}

export const DEFAULT_MAX_CPU_LORAS = 8;
/** Distinct adapters in one step (`--max-loras`). */
export const DEFAULT_MAX_LORAS = 4;
/** Adapter loads reading files at once per worker (`--max-lora-loads`). */
export const DEFAULT_MAX_LORA_LOADS = 2;
/** Loads that may wait for one of those; past this a load is refused with resource_exhausted. */
export const LORA_LOADS_WAITING_PER_PERMIT = 16;
/** acquireWhenReady: loads tried when eviction keeps taking the adapter away before its turn. */
const ACQUIRE_ATTEMPTS = 3;

export class LoraRegistry {
  /** Resident adapters by name, least recently used first (Map order, re-inserted on use). */
  private readonly byName = new Map<string, Entry>();
  /** Slots held by adapters that were unloaded but still have running sequences. */
  private readonly draining = new Set<Entry>();
  private readonly freeSlots: number[] = [];
  private nextSlot = 0;
  /** The newest load of each name; a later load of the name runs after it. */
  private readonly pending = new Map<string, PendingLoad>();
  /** Loads past their file read that will add an entry: they count against maxCpuLoras. */
  private reserved = 0;
  private readonly loads: Semaphore;
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
    const permits = options.maxLoraLoads ?? DEFAULT_MAX_LORA_LOADS;
    this.loads = new Semaphore(permits, permits * LORA_LOADS_WAITING_PER_PERMIT);
  }

  list(): ResidentLora[] {
    return [...this.byName.values()].map(resident).sort((a, b) => (a.name < b.name ? -1 : 1));
  }

  has(name: string): boolean {
    return this.byName.has(name);
  }

  /** Loads reading files or filling a slot now, and loads waiting for a turn. */
  get loadsInFlight(): { running: number; waiting: number } {
    return { running: this.loads.inUse, waiting: this.loads.waiting };
  }

  /**
   * Loads `dir` under `name`; loading the same files under the same name again is a no-op.
   * `trusted`: an operator's start-up adapter (`--lora`), exempt from `roots`.
   */
  load(name: string, dir: string, options: { trusted?: boolean } = {}): Promise<ResidentLora> {
    const inFlight = this.pending.get(name);
    if (inFlight !== undefined && inFlight.dir === dir) return inFlight.promise;
    const previous = inFlight?.promise.catch(() => undefined);
    const promise = (async () => {
      await previous;
      return this.doLoad(name, dir, options.trusted === true);
    })();
    const entry: PendingLoad = { dir, promise };
    this.pending.set(name, entry);
    const forget = (): void => {
      if (this.pending.get(name) === entry) this.pending.delete(name);
    };
    promise.then(forget, forget);
    return promise;
  }

  private async doLoad(name: string, dir: string, trusted: boolean): Promise<ResidentLora> {
    try {
      return await this.loadNow(name, dir, trusted);
    } catch (err) {
      if (err instanceof LoraAdapterError) this.options.log?.warn({ lora: name, reason: err.reason, detail: err.detail }, 'LoRA adapter refused');
      throw err;
    }
  }

  private async loadNow(name: string, dir: string, trusted: boolean): Promise<ResidentLora> {
    if (name.length === 0) throw new TandemError('invalid_argument', 'adapter name is empty');
    const turn = this.loads.acquire();
    if (turn === undefined) throw new TandemError('resource_exhausted', `too many adapter loads are waiting (--max-lora-loads ${this.loads.permits}); retry`);
    const release = await turn;
    this.options.log?.info({ lora: name, running: this.loads.inUse, waiting: this.loads.waiting }, 'LoRA adapter load started');
    try {
      const spec = await (this.options.readAdapter ?? readPeftAdapter)(dir, {
        maxLoraRank: this.maxLoraRank,
        maxBytes: this.options.maxLoraBytes ?? DEFAULT_MAX_LORA_BYTES,
        ...(this.options.dims !== undefined ? { dims: this.options.dims } : {}),
        ...(!trusted && this.options.roots !== undefined ? { roots: this.options.roots } : {}),
      });
      const loraId = loraIdOf(name, spec.contentHash);
      const have = this.byName.get(name);
      if (have !== undefined && have.loraId === loraId) return resident(have);
      if (have !== undefined) throw new TandemError('invalid_argument', `adapter '${name}' is already loaded with other weights; unload it first`);
      // Room for one more, counting loads that are past this point but not resident yet.
      while (this.byName.size + this.reserved >= this.maxCpuLoras) await this.evictOne();
      this.reserved++;
      const slot = this.freeSlots.pop() ?? this.nextSlot++;
      try {
        await this.engine.loadLora?.(slot, spec);
      } catch (err) {
        this.freeSlots.push(slot);
        throw engineRefusal(err, spec.dir);
      } finally {
        this.reserved--;
      }
      const entry: Entry = { name, spec, loraId, slot, refs: 0 };
      this.byName.set(name, entry);
      this.unloadedNames.delete(name);
      this.options.onChange?.();
      return resident(entry);
    } finally {
      release();
    }
  }

  /** Removes the name now; resolves once the slot is empty (after running sequences finish). */
  async unload(name: string): Promise<void> {
    const e = this.byName.get(name);
    if (e === undefined) throw new TandemError('not_found', `adapter '${name}' is not loaded`);
    this.unloadedNames.add(name);
    await this.retire(e);
  }

  /**
   * For a request routed here although the adapter may not be resident (the router charged it a
   * load): waits for a load of it already in flight, else loads it from `path` (never a name
   * unloaded on purpose), then acquires it in the same synchronous step as the residency check,
   * so no eviction slips in between.
   */
  async acquireWhenReady(name: string, path: string | undefined): Promise<AcquiredLora> {
    for (let attempt = 0; ; attempt++) {
      const inFlight = this.pending.get(name);
      if (inFlight !== undefined) await inFlight.promise.catch(() => undefined);
      if (this.byName.has(name) || path === undefined || this.unloadedNames.has(name) || attempt >= ACQUIRE_ATTEMPTS) return this.acquire(name);
      // A newer load of the name may have started while we waited: join it rather than race it.
      if (this.pending.has(name)) continue;
      await this.load(name, path);
      if (this.byName.has(name)) return this.acquire(name);
    }
  }

  /** acquireWhenReady without the acquire (tests, warm-up). */
  async ensure(name: string, path: string | undefined): Promise<void> {
    const lora = await this.acquireWhenReady(name, path).catch((err: unknown) => {
      if ((err as TandemError).code === 'not_found') return undefined;
      throw err;
    });
    if (lora !== undefined) this.release(lora.name, lora.loraId);
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

  /** The least recently used idle adapter leaves (still loadable on demand: not an unload). */
  private async evictOne(): Promise<void> {
    for (const e of this.byName.values()) {
      if (e.refs === 0) return this.retire(e);
    }
    throw new TandemError('resource_exhausted', `all ${this.maxCpuLoras} resident adapters (--max-cpu-loras) have running requests or are loading`);
  }

  /** Drops the entry from the resident set now; empties its slot once its sequences finish. */
  private async retire(e: Entry): Promise<void> {
    this.byName.delete(e.name);
    this.options.onChange?.();
    if (e.refs > 0) {
      this.draining.add(e);
      await new Promise<void>((resolveDrained) => (e.drained = resolveDrained));
      this.draining.delete(e);
    }
    await this.engine.unloadLora?.(e.slot);
    this.freeSlots.push(e.slot);
  }
}

/**
 * The engine reads the factors again and may still refuse them (a file changed since it was
 * checked): its message names the file, so the caller gets a fixed sentence and the log the rest.
 */
function engineRefusal(err: unknown, dir: string): unknown {
  const code = (err as { code?: unknown })?.code;
  if (code !== 'config_invalid' && code !== 'not_found' && code !== 'invalid_argument') return err;
  return new LoraAdapterError('invalid_weights', ENGINE_REFUSED, `${dir}: the engine refused the factors: ${(err as Error).message}`, { cause: err });
}

export const ENGINE_REFUSED = 'the adapter does not fit the model: the engine found a factor missing or of another shape';

function resident(e: Entry): ResidentLora {
  return { name: e.name, loraId: e.loraId, path: e.spec.dir, rank: e.spec.rank };
}
