/**
 * LoraRegistry under interleaved calls, step by step. The adapter reader is an in-memory one
 * (specs read once, up front, by the real readPeftAdapter) that answers on the next microtask,
 * and the engine is a fake whose calls either resolve at once or wait for the test: so every
 * interleaving below happens the same way on every run, with no timers and no file I/O.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { TandemError } from '../../runtime/errors.js';
import { TINY_DIMS } from '../../workers/models/index.js';
import { LoraAdapterError, LoraRegistry, makeTinyLora, readPeftAdapter, type LoraAdapterSpec } from '../../workers/lora/index.js';
import { LORA_LOADS_WAITING_PER_PERMIT } from '../../workers/lora/lora-registry.js';

/** A promise the test resolves or rejects by hand. */
function deferred<T = void>(): { promise: Promise<T>; resolve: (v: T) => void; reject: (e: unknown) => void } {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => ((resolve = res), (reject = rej)));
  return { promise, resolve, reject };
}

/** Slots as an engine holds them; `holdLoads` / `holdUnloads` park calls until the test lets them go. */
class GatedEngine {
  readonly slots = new Map<number, string>();
  holdLoads = false;
  holdUnloads = false;
  readonly parkedLoads: Array<{ slot: number; dir: string; gate: ReturnType<typeof deferred> }> = [];
  readonly parkedUnloads: Array<ReturnType<typeof deferred>> = [];
  /** Dirs the engine should refuse (a factor that does not fit, say). */
  readonly refuse = new Set<string>();

  async loadLora(slot: number, a: LoraAdapterSpec): Promise<void> {
    if (this.holdLoads) {
      const gate = deferred();
      this.parkedLoads.push({ slot, dir: a.dir, gate });
      await gate.promise;
    }
    if (this.refuse.has(a.dir)) throw new TandemError('config_invalid', 'a factor does not fit the model');
    if (this.slots.has(slot)) throw new Error(`slot ${slot} already full`);
    this.slots.set(slot, a.dir);
  }

  async unloadLora(slot: number): Promise<void> {
    if (this.holdUnloads) {
      const gate = deferred();
      this.parkedUnloads.push(gate);
      await gate.promise;
    }
    if (!this.slots.delete(slot)) throw new Error(`slot ${slot} was empty`);
  }
}

describe('LoraRegistry: interleavings', () => {
  let root: string;
  const specs = new Map<string, LoraAdapterSpec>();
  const dir = (i: number) => join(root, `a${i}`);
  /** The reader: the real spec of each dir, on the next microtask; `reads` counts calls. */
  let reads = 0;
  let readsInProgress = 0;
  let maxReadsInProgress = 0;
  let holdReads: Array<ReturnType<typeof deferred>> | undefined;
  const reader = async (d: string): Promise<LoraAdapterSpec> => {
    reads++;
    readsInProgress++;
    maxReadsInProgress = Math.max(maxReadsInProgress, readsInProgress);
    try {
      if (holdReads !== undefined) {
        const gate = deferred();
        holdReads.push(gate);
        await gate.promise;
      }
      await Promise.resolve();
      const s = specs.get(d);
      if (s === undefined) throw new LoraAdapterError('unreadable', 'cannot be read');
      return s;
    } finally {
      readsInProgress--;
    }
  };
  const reset = (): void => {
    reads = 0;
    readsInProgress = 0;
    maxReadsInProgress = 0;
    holdReads = undefined;
  };

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'tandem-lora-races-'));
    for (let i = 0; i < 4; i++) specs.set(dir(i), await readPeftAdapter(await makeTinyLora({ dims: TINY_DIMS.llama, outDir: dir(i), rank: 4, seed: i })));
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('two loads waiting on a failed load of their name run one after the other: one slot, no leak', async () => {
    reset();
    const engine = new GatedEngine();
    engine.refuse.add(dir(0));
    const reg = new LoraRegistry(engine, { readAdapter: reader });
    // The first load of 'a' fails in the engine; two more for 'a' arrived while it ran.
    const first = reg.load('a', dir(0));
    const w1 = reg.load('a', dir(1));
    const w2 = reg.load('a', dir(1));
    await expect(first).rejects.toMatchObject({ code: 'config_invalid' });
    const [r1, r2] = await Promise.all([w1, w2]);
    expect(r1.loraId).toBe(r2.loraId);
    // Every filled slot belongs to a resident adapter (before the fix: two slots, one entry).
    expect(reg.list().map((l) => l.name)).toEqual(['a']);
    expect(engine.slots.size).toBe(1);
    // The joined load read the files once.
    expect(reads).toBe(2);
  });

  it('concurrent loads of new names never take more than --max-cpu-loras slots', async () => {
    reset();
    const engine = new GatedEngine();
    const reg = new LoraRegistry(engine, { maxCpuLoras: 2, readAdapter: reader });
    await reg.load('x', dir(0));
    await reg.load('y', dir(1));
    // Both new loads find the set full; each must make its own room, not share one eviction.
    const results = await Promise.allSettled([reg.load('a', dir(2)), reg.load('b', dir(3))]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'fulfilled']);
    expect(reg.list().map((l) => l.name)).toEqual(['a', 'b']);
    expect(engine.slots.size).toBe(2);
  });

  it('concurrent loads with every resident busy: the ones without room are refused, the count holds', async () => {
    reset();
    const engine = new GatedEngine();
    const reg = new LoraRegistry(engine, { maxCpuLoras: 2, maxLoraLoads: 4, readAdapter: reader });
    await reg.load('x', dir(0));
    const busy = reg.acquire('x');
    engine.holdLoads = true;
    const loads = [reg.load('a', dir(1)), reg.load('b', dir(2)), reg.load('c', dir(3))];
    // One of them got the free place and is filling its slot; the others were refused meanwhile.
    await vi.waitFor(() => expect(engine.parkedLoads).toHaveLength(1));
    engine.holdLoads = false;
    engine.parkedLoads[0]!.gate.resolve();
    const results = await Promise.allSettled(loads);
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    for (const r of results) if (r.status === 'rejected') expect(r.reason).toMatchObject({ code: 'resource_exhausted' });
    expect(reg.list()).toHaveLength(2);
    expect(engine.slots.size).toBe(2);
    reg.release('x', busy.loraId);
  });

  it('a request for an adapter being evicted loads it again; it never gets a spurious not_found', async () => {
    reset();
    const engine = new GatedEngine();
    const reg = new LoraRegistry(engine, { maxCpuLoras: 2, readAdapter: reader });
    await reg.load('x', dir(0));
    await reg.load('z', dir(2));
    const busyZ = reg.acquire('z');
    engine.holdUnloads = true;
    // Loading y evicts x (the idle one); the engine is still emptying x's slot.
    const y = reg.load('y', dir(1));
    await vi.waitFor(() => expect(engine.parkedUnloads).toHaveLength(1));
    expect(reg.has('x')).toBe(false);
    // Now a request routed here for x, which a peer's card says is at dir(0): as the engine loop does it.
    await reg.ensure('x', dir(0));
    const x = reg.acquire('x');
    expect(x.name).toBe('x');
    engine.parkedUnloads[0]!.resolve();
    // y lost the place it was making to x, whose request is running: refused, not a slot too many.
    await expect(y).rejects.toMatchObject({ code: 'resource_exhausted' });
    expect(reg.list().map((l) => l.name)).toEqual(['x', 'z']);
    expect(engine.slots.size).toBe(2);
    reg.release('x', x.loraId);
    reg.release('z', busyZ.loraId);
    // An unload on purpose is different: a late request is not_found, and nothing reloads it.
    engine.holdUnloads = false;
    await reg.unload('x');
    await expect(reg.acquireWhenReady('x', dir(0))).rejects.toMatchObject({ code: 'not_found' });
  });

  it('--max-lora-loads: at most that many loads read files at once; a bounded number wait, the rest are refused', async () => {
    reset();
    const engine = new GatedEngine();
    const reg = new LoraRegistry(engine, { maxLoraLoads: 1, maxCpuLoras: 64, readAdapter: reader });
    holdReads = [];
    const names = Array.from({ length: 2 + LORA_LOADS_WAITING_PER_PERMIT }, (_, i) => `n${i}`);
    const loads = names.map((n, i) => reg.load(n, dir(i % 4)).then(
      () => 'ok',
      (e: { code?: string }) => e.code,
    ));
    // One reads, sixteen wait, the last is refused at once.
    expect(await loads[loads.length - 1]).toBe('resource_exhausted');
    expect(reg.loadsInFlight).toEqual({ running: 1, waiting: LORA_LOADS_WAITING_PER_PERMIT });
    // Let each read through in turn: never two at once.
    for (let i = 0; i < names.length - 1; i++) {
      await vi.waitFor(() => expect(holdReads).toHaveLength(i + 1), { interval: 1 });
      holdReads![i]!.resolve();
    }
    expect(await Promise.all(loads.slice(0, -1))).toEqual(names.slice(0, -1).map(() => 'ok'));
    expect(maxReadsInProgress).toBe(1);
    expect(reg.loadsInFlight).toEqual({ running: 0, waiting: 0 });
  });
});
