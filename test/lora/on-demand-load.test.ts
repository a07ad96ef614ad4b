/**
 * A request for an adapter this worker lacks (the KV router may send one to a worker that must
 * load it, charging it a penalty): the engine loop loads it from `loraPath` before admitting the
 * request, the registry reports the change (the worker re-publishes its card), and the request's
 * blocks are keyed by the adapter. Without a path it is refused with not_found.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EngineLoop } from '../../workers/engine-loop/engine-loop.js';
import { MockerEngine } from '../../workers/engines/mocker/mocker-engine.js';
import { LoraRegistry, makeTinyLora } from '../../workers/lora/index.js';
import { TINY_DIMS } from '../../workers/models/index.js';
import type { KvEvent, TokenDelta } from '../../proto/wire.js';
import { range, request } from '../workers/builders.js';

async function collect(stream: AsyncIterable<TokenDelta>): Promise<TokenDelta[]> {
  const out: TokenDelta[] = [];
  for await (const d of stream) out.push(d);
  return out;
}

describe('on-demand adapter load', () => {
  let root: string;
  let dir: string;
  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'tandem-lora-od-'));
    dir = await makeTinyLora({ dims: TINY_DIMS.llama, outDir: join(root, 'a'), rank: 4 });
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('loads from loraPath before admission, reports the change, and keys the blocks by the adapter', async () => {
    const engine = new MockerEngine({ numBlocks: 64, blockSize: 16, vocabSize: 500, speedupRatio: 1e5 });
    let changes = 0;
    const loras = new LoraRegistry(engine, { onChange: () => changes++ });
    const events: KvEvent[] = [];
    const loop = new EngineLoop({ engine, loras, sinks: { onKvEvents: (e) => events.push(...e) } });
    try {
      await expect(collect(loop.generate(request('r0', range(1, 40), 3, { lora: 'a' }), new AbortController().signal))).rejects.toMatchObject({ code: 'not_found' });
      const out = await collect(loop.generate(request('r1', range(1, 40), 3, { lora: 'a', loraPath: dir }), new AbortController().signal));
      expect(out.at(-1)!.finishReason).toBe('length');
      expect(loras.list().map((l) => l.name)).toEqual(['a']);
      expect(changes).toBe(1);
      const stored = events.map((e) => e.data).filter((d) => d.type === 'stored');
      expect(stored.length).toBeGreaterThan(0);
      expect(stored.every((d) => d.type === 'stored' && d.loraId === loras.list()[0]!.loraId)).toBe(true);
      // Resident now: a second request does not load again.
      await collect(loop.generate(request('r2', range(1, 40), 3, { lora: 'a', loraPath: dir }), new AbortController().signal));
      expect(changes).toBe(1);
    } finally {
      await loop.close();
    }
  });
});

describe('on-demand load after an unload', () => {
  it('an adapter unloaded on purpose is not loaded again on demand; load() brings it back', async () => {
    const root = await mkdtemp(join(tmpdir(), 'tandem-lora-od2-'));
    try {
      const dir = await makeTinyLora({ dims: TINY_DIMS.llama, outDir: join(root, 'a'), rank: 4 });
      const loras = new LoraRegistry(new MockerEngine({ numBlocks: 8 }));
      await loras.load('a', dir);
      await loras.unload('a');
      await loras.ensure('a', dir);
      expect(() => loras.acquire('a')).toThrow(expect.objectContaining({ code: 'not_found' }));
      await loras.load('a', dir);
      expect(loras.acquire('a').name).toBe('a');
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
});
