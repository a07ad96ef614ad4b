/**
 * An adapter loading on a worker stalls nobody else (issue 38): while a request waits for its
 * adapter's files (held here until the test releases them), a base-model stream on the same
 * EngineLoop keeps getting tokens and finishes; the adapter request runs once its load is done.
 * Asserted by order of events, not time. Then the load report: the worker says what a load took
 * it (`loraLoadMs`, wall ms × the mocker's speedup, so the router compares it with model time).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EngineLoop } from '../../workers/engine-loop/engine-loop.js';
import { MockerEngine } from '../../workers/engines/mocker/mocker-engine.js';
import { LoraRegistry, makeTinyLora, readPeftAdapter } from '../../workers/lora/index.js';
import { TINY_DIMS } from '../../workers/models/index.js';
import { range, request } from '../workers/builders.js';

describe('adapter load beside running sequences', () => {
  let root: string;
  let dir: string;
  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'tandem-lora-stall-'));
    dir = await makeTinyLora({ dims: TINY_DIMS.llama, outDir: join(root, 'a'), rank: 4 });
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('a base-model stream finishes while an on-demand adapter load is held; the adapter request then runs', async () => {
    const log: string[] = [];
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    const reader: typeof readPeftAdapter = async (d, o) => {
      log.push('load started');
      await held;
      log.push('load released');
      return readPeftAdapter(d, o);
    };
    const speedup = 1e4;
    const engine = new MockerEngine({ numBlocks: 64, blockSize: 16, vocabSize: 500, speedupRatio: speedup });
    const loras = new LoraRegistry(engine, { readAdapter: reader });
    const loop = new EngineLoop({ engine, loras, modelTimeScale: speedup, scheduler: { maxLoras: 3 } });
    try {
      const base = (async () => {
        let n = 0;
        for await (const d of loop.generate(request('base', range(1, 40), 24), new AbortController().signal)) {
          n += d.tokenIds.length;
          if (d.finishReason !== undefined) log.push(`base finished with ${n} tokens`);
        }
      })();
      const adapter = (async () => {
        for await (const d of loop.generate(request('lora', range(100, 40), 3, { lora: 'a', loraPath: dir }), new AbortController().signal)) {
          if (d.tokenIds.length > 0 && !log.includes('lora first token')) log.push('lora first token');
        }
      })();
      await base;
      expect(log).toEqual(['load started', 'base finished with 24 tokens']);
      release();
      await adapter;
      expect(log).toEqual(['load started', 'base finished with 24 tokens', 'load released', 'lora first token']);
      // The load report carries what that load took, in model time (wall × speedup).
      const wallMs = loras.meanLoadMs!;
      expect(wallMs).toBeGreaterThan(0);
      expect(loop.loadMetrics().loraLoadMs).toBeCloseTo(wallMs * speedup, 6);
      // And its --max-loras, so the router can tell when a further adapter would wait for a slot.
      expect(loop.loadMetrics().maxLoras).toBe(3);
    } finally {
      await loop.close();
    }
  });
});
