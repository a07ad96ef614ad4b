/**
 * LoraRegistry: slots, LRU residency bounded by --max-cpu-loras without evicting a busy
 * adapter, unload that answers new requests not_found while running ones finish, and refusal
 * of a corrupt adapter without disturbing the resident ones.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TINY_DIMS } from '../../workers/models/index.js';
import { LoraRegistry, makeTinyLora, type LoraAdapterSpec } from '../../workers/lora/index.js';

class FakeEngine {
  readonly slots = new Map<number, string>();
  async loadLora(slot: number, a: LoraAdapterSpec): Promise<void> {
    if (this.slots.has(slot)) throw new Error(`slot ${slot} already full`);
    this.slots.set(slot, a.dir);
  }
  async unloadLora(slot: number): Promise<void> {
    if (!this.slots.delete(slot)) throw new Error(`slot ${slot} was empty`);
  }
}

describe('LoraRegistry', () => {
  let root: string;
  const dirs: string[] = [];
  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'tandem-lora-reg-'));
    for (let i = 0; i < 4; i++) dirs.push(await makeTinyLora({ dims: TINY_DIMS.llama, outDir: join(root, `a${i}`), rank: 4, seed: i }));
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('loads into distinct slots, lists residents, and reloading the same files is a no-op', async () => {
    const engine = new FakeEngine();
    const reg = new LoraRegistry(engine);
    const a = await reg.load('a', dirs[0]!);
    const b = await reg.load('b', dirs[1]!);
    expect(a.loraId).not.toBe(b.loraId);
    expect(engine.slots.size).toBe(2);
    expect((await reg.load('a', dirs[0]!)).loraId).toBe(a.loraId);
    expect(engine.slots.size).toBe(2);
    await expect(reg.load('a', dirs[1]!)).rejects.toThrow(/already loaded with other weights/);
    expect(reg.list().map((l) => l.name)).toEqual(['a', 'b']);
  });

  it('over --max-cpu-loras the least recently used idle adapter is evicted; a busy one never is', async () => {
    const engine = new FakeEngine();
    const reg = new LoraRegistry(engine, { maxCpuLoras: 2 });
    await reg.load('a', dirs[0]!);
    await reg.load('b', dirs[1]!);
    const useA = reg.acquire('a');  // a is busy and most recently used; b is the LRU idle one
    await reg.load('c', dirs[2]!);
    expect(reg.list().map((l) => l.name)).toEqual(['a', 'c']);
    const useC = reg.acquire('c');
    await expect(reg.load('d', dirs[3]!)).rejects.toMatchObject({ code: 'resource_exhausted', message: expect.stringContaining('--max-cpu-loras') });
    reg.release('c', useC.loraId);
    await reg.load('d', dirs[3]!);
    expect(reg.list().map((l) => l.name)).toEqual(['a', 'd']);
    expect(engine.slots.size).toBe(2);
    reg.release('a', useA.loraId);
  });

  it('unload: new requests get not_found at once; the slot empties only after running sequences finish', async () => {
    const engine = new FakeEngine();
    const reg = new LoraRegistry(engine);
    await reg.load('a', dirs[0]!);
    const running = reg.acquire('a');
    let unloaded = false;
    const p = reg.unload('a').then(() => (unloaded = true));
    expect(() => reg.acquire('a')).toThrow(expect.objectContaining({ code: 'not_found' }));
    expect(reg.list()).toEqual([]);
    await new Promise((r) => setTimeout(r, 20));
    expect(unloaded).toBe(false);
    expect(engine.slots.size).toBe(1);
    reg.release('a', running.loraId);
    await p;
    expect(engine.slots.size).toBe(0);
    await expect(reg.unload('a')).rejects.toMatchObject({ code: 'not_found' });
  });

  it('unload, then a reload of other files under the same name: the old slot still drains when its sequence ends', async () => {
    const engine = new FakeEngine();
    const reg = new LoraRegistry(engine);
    await reg.load('a', dirs[0]!);
    const old = reg.acquire('a');
    const drained = reg.unload('a');
    await reg.load('a', dirs[1]!);
    const fresh = reg.acquire('a');
    expect(fresh.loraId).not.toBe(old.loraId);
    expect(engine.slots.size).toBe(2);
    reg.release('a', old.loraId);
    await drained;
    expect(engine.slots.size).toBe(1);
    reg.release('a', fresh.loraId);
    await reg.unload('a');
    expect(engine.slots.size).toBe(0);
  });

  it('a corrupt adapter is refused; the resident ones keep serving', async () => {
    const engine = new FakeEngine();
    const reg = new LoraRegistry(engine);
    await reg.load('a', dirs[0]!);
    const bad = await makeTinyLora({ dims: TINY_DIMS.llama, outDir: join(root, 'bad'), rank: 4 });
    await writeFile(join(bad, 'adapter_model.safetensors'), 'garbage');
    await expect(reg.load('bad', bad)).rejects.toMatchObject({ code: 'config_invalid' });
    expect(reg.list().map((l) => l.name)).toEqual(['a']);
    expect(reg.acquire('a').slot).toBe(0);
    const big = await makeTinyLora({ dims: TINY_DIMS.llama, outDir: join(root, 'big'), rank: 32 });
    await expect(new LoraRegistry(engine, { maxLoraRank: 16 }).load('big', big)).rejects.toThrow(/--max-lora-rank 16/);
  });

  it('requests that arrive while their adapter loads wait for that load: the files are read once', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const engine = new FakeEngine();
    const slow = { loadLora: async (slot: number, a: LoraAdapterSpec) => (await gate, engine.loadLora(slot, a)), unloadLora: (slot: number) => engine.unloadLora(slot) };
    const reg = new LoraRegistry(slow);
    const dir = await makeTinyLora({ dims: TINY_DIMS.llama, outDir: join(root, 'burst'), rank: 4, seed: 9 });
    const first = reg.ensure('burst', dir);
    await new Promise((r) => setTimeout(r, 50)); // the first load is now inside the engine
    const burst = [1, 2, 3, 4].map(() => reg.ensure('burst', dir));
    // The files are gone: any second read of them would fail.
    await rm(dir, { recursive: true, force: true });
    release();
    await expect(Promise.all([first, ...burst])).resolves.toBeDefined();
    expect(reg.has('burst')).toBe(true);
    expect(engine.slots.size).toBe(1);
  });
});
