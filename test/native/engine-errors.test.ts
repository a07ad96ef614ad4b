/** Bad inputs give typed errors with stable codes, never a crash; a step never blocks the loop. */
import { readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NativeEngineError } from '../../native/index.js';
import { createNativeEngine, type NativeEngine } from '../../workers/engines/native/index.js';
import { blocks, seq, tinyModel, tokens, withTempDir } from './helpers.js';

describe('native engine errors', () => {
  let tmp: Awaited<ReturnType<typeof withTempDir>>;
  let good: string;

  beforeAll(async () => {
    tmp = await withTempDir();
    good = await tinyModel(tmp.dir, 'llama', 'bf16', 1);
  });
  afterAll(async () => {
    await tmp.cleanup();
  });

  async function variant(name: string, edit: (config: Record<string, unknown>) => void): Promise<string> {
    const dir = await tinyModel(tmp.dir, 'llama', 'bf16', 1).then(async (src) => {
      const d = join(tmp.dir, name);
      await rm(d, { recursive: true, force: true });
      const { cp } = await import('node:fs/promises');
      await cp(src, d, { recursive: true });
      return d;
    });
    const config = JSON.parse(await readFile(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
    edit(config);
    await writeFile(join(dir, 'config.json'), JSON.stringify(config));
    return dir;
  }

  async function loadError(modelDir: string): Promise<NativeEngineError> {
    const err = await createNativeEngine({ modelDir, numBlocks: 8 }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(NativeEngineError);
    return err as NativeEngineError;
  }

  it('a missing directory is not_found and names the path', async () => {
    const err = await loadError(join(tmp.dir, 'nope'));
    expect(err.code).toBe('not_found');
    expect(err.message).toContain('nope');
  });

  it('a directory without weights is not_found', async () => {
    const dir = await variant('noweights', () => undefined);
    await rm(join(dir, 'model.safetensors'));
    const err = await loadError(dir);
    expect(err.code).toBe('not_found');
    expect(err.message).toMatch(/safetensors/);
  });

  it.each([
    ['sliding window (Mistral)', (c: Record<string, unknown>) => Object.assign(c, { architectures: ['MistralForCausalLM'], sliding_window: 4096 }), 'sliding_window'],
    ['MoE', (c: Record<string, unknown>) => Object.assign(c, { num_local_experts: 8 }), 'num_local_experts'],
    ['rope type longrope', (c: Record<string, unknown>) => Object.assign(c, { rope_scaling: { rope_type: 'longrope', factor: 4 } }), 'rope_scaling.rope_type'],
    ['DeepSeek (MLA, grouped top-k)', (c: Record<string, unknown>) => Object.assign(c, { architectures: ['DeepseekV3ForCausalLM'] }), 'kv_lora_rank'],
    ['top-k above the experts', (c: Record<string, unknown>) => Object.assign(c, { architectures: ['MixtralForCausalLM'], num_local_experts: 4, num_experts_per_tok: 5 }), 'num_experts_per_tok'],
    ['unknown architecture', (c: Record<string, unknown>) => Object.assign(c, { architectures: ['GPT2LMHeadModel'] }), 'architectures'],
    ['hidden size that no longer matches the weights', (c: Record<string, unknown>) => Object.assign(c, { intermediate_size: 96 }), 'mlp.gate_proj.weight'],
  ])('%s is config_invalid naming %s', async (_name, edit, field) => {
    const dir = await variant(`bad-${field}`, edit);
    const err = await loadError(dir);
    expect(err.code).toBe('config_invalid');
    expect(err.message).toContain(field);
  });

  it('a truncated safetensors file is config_invalid, not a crash', async () => {
    const dir = await variant('truncated', () => undefined);
    const bytes = await readFile(join(dir, 'model.safetensors'));
    await writeFile(join(dir, 'model.safetensors'), bytes.subarray(0, bytes.length - 100));
    const err = await loadError(dir);
    expect(err.code).toBe('config_invalid');
  });

  describe('with a loaded engine', () => {
    let engine: NativeEngine;
    beforeAll(async () => {
      engine = await createNativeEngine({ modelDir: good, numBlocks: 8, blockSize: 16, threads: 2 });
    });
    afterAll(async () => {
      await engine.close();
    });

    it('reports its shape in info', () => {
      expect(engine.info).toMatchObject({ kind: 'native', numBlocks: 8, blockSize: 16 });
      // 2 layers x (K + V) x 2 kv heads x head_dim 16 x 4 bytes
      expect(engine.info.kvBytesPerToken).toBe(2 * 2 * 2 * 16 * 4);
      expect(engine.model.architecture).toBe('LlamaForCausalLM');
    });

    it('a block id outside the pool is invalid_argument and the engine keeps working', async () => {
      const bad = engine.step({ sequences: [seq({ tokens: [1, 2, 3], blockTable: Int32Array.from([8]) })] });
      await expect(bad).rejects.toMatchObject({ code: 'invalid_argument' });
      const short = engine.step({ sequences: [seq({ tokens: tokens(20, 512), blockTable: Int32Array.from([0]) })] });
      await expect(short).rejects.toMatchObject({ code: 'invalid_argument', message: expect.stringContaining('block table') });
      const token = engine.step({ sequences: [seq({ tokens: [100000], blockTable: blocks(0, 1) })] });
      await expect(token).rejects.toMatchObject({ code: 'invalid_argument' });
      const ok = await engine.step({ sequences: [seq({ tokens: [1, 2, 3], blockTable: blocks(0, 1) })] });
      expect(ok.sampled).toHaveLength(1);
    });

    it('a step runs off the event loop: timers fire while it computes', async () => {
      let ticks = 0;
      const timer = setInterval(() => ticks++, 0);
      const long = tokens(120, 512);
      const pending = engine.step({ sequences: [seq({ tokens: long, blockTable: blocks(0, 8) })] });
      const steps = [pending];
      for (let i = 0; i < 5; i++) steps.push(engine.step({ sequences: [seq({ tokens: long, blockTable: blocks(0, 8) })] }));
      await Promise.all(steps);
      clearInterval(timer);
      expect(ticks).toBeGreaterThan(0);
    });

    it('after close, step rejects with unavailable', async () => {
      const e2 = await createNativeEngine({ modelDir: good, numBlocks: 4, threads: 1 });
      await e2.close();
      await expect(e2.step({ sequences: [] })).rejects.toMatchObject({ code: 'unavailable' });
    });
  });
});
