import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Command, CommanderError } from 'commander';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_KV_BLOCK_SIZE, kvBytesPerToken, makeTinyModel, parseModelConfig, readModelConfig, registerModelCommand } from '../../workers/models/index.js';

let root: string;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'tandem-modelcfg-'));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

describe('readModelConfig', () => {
  it('llama: context length, EOS ids from config and generation_config, rope scaling, KV size', async () => {
    const dir = join(root, 'llama');
    await makeTinyModel({ arch: 'llama', outDir: dir });
    const c = await readModelConfig(dir);
    expect(c).toMatchObject({
      architecture: 'LlamaForCausalLM',
      modelType: 'llama',
      contextLength: 2048,
      numLayers: 2,
      numKvHeads: 2,
      headDim: 16,
      bosTokenId: 507,
      tieWordEmbeddings: false,
      qkvBias: false,
      qkNorm: false,
      torchDtype: 'bfloat16',
    });
    expect(c.eosTokenIds.sort()).toEqual([508, 511]);
    expect(c.ropeScaling).toEqual({ ropeType: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 8192 });
    // 2 (K, V) x 2 layers x 2 kv heads x 16 dims x 2 bytes
    expect(kvBytesPerToken(c, 2)).toBe(256);
    expect(DEFAULT_KV_BLOCK_SIZE).toBe(16);
  });

  it('qwen2 implies q/k/v biases; qwen3 has q/k norm and its own head_dim', async () => {
    await makeTinyModel({ arch: 'qwen2', outDir: join(root, 'qwen2') });
    await makeTinyModel({ arch: 'qwen3', outDir: join(root, 'qwen3') });
    const q2 = await readModelConfig(join(root, 'qwen2'));
    const q3 = await readModelConfig(join(root, 'qwen3'));
    expect([q2.qkvBias, q2.qkNorm, q2.tieWordEmbeddings]).toEqual([true, false, true]);
    expect(q2.eosTokenIds.sort()).toEqual([509, 511]);
    expect([q3.qkvBias, q3.qkNorm, q3.headDim]).toEqual([false, true, 32]);
    expect(kvBytesPerToken(q3, 2)).toBe(2 * 2 * 2 * 32 * 2);
  });

  it('derives head_dim when absent and rejects inconsistent head counts', () => {
    const base = { model_type: 'mistral', hidden_size: 4096, num_attention_heads: 32, num_key_value_heads: 8, vocab_size: 32000, intermediate_size: 14336, num_hidden_layers: 32, max_position_embeddings: 32768 };
    expect(parseModelConfig(base).headDim).toBe(128);
    expect(() => parseModelConfig({ ...base, num_key_value_heads: 5 })).toThrow(/multiple/);
    expect(() => parseModelConfig({ ...base, vocab_size: 0 })).toThrow(/vocab_size/);
  });
});

describe('runtime model make-tiny (commander)', () => {
  function program(): Command {
    const p = new Command('runtime').exitOverride();
    p.configureOutput({ writeErr: () => {}, writeOut: () => {} });
    registerModelCommand(p);
    p.commands.forEach((c) => c.exitOverride().configureOutput({ writeErr: () => {}, writeOut: () => {} }));
    p.commands[0]!.commands.forEach((c) => c.exitOverride().configureOutput({ writeErr: () => {}, writeOut: () => {} }));
    return p;
  }

  it('writes a model directory with the requested arch, dtype and seed', async () => {
    const out = join(root, 'cli');
    const write = process.stdout.write;
    process.stdout.write = (() => true) as typeof process.stdout.write;
    try {
      await program().parseAsync(['model', 'make-tiny', '--arch', 'qwen3', '--out', out, '--dtype', 'f32', '--seed', '3'], { from: 'user' });
    } finally {
      process.stdout.write = write;
    }
    expect((await readdir(out)).sort()).toContain('model.safetensors');
    expect((await readModelConfig(out)).torchDtype).toBe('float32');
  });

  it('bad --arch and bad --seed are argument errors, not crashes', async () => {
    const err = async (args: string[]) => {
      try {
        await program().parseAsync(args, { from: 'user' });
      } catch (e) {
        return e as CommanderError;
      }
      throw new Error('expected a CommanderError');
    };
    const arch = await err(['model', 'make-tiny', '--arch', 'gpt2', '--out', join(root, 'x')]);
    expect(arch.code).toBe('commander.invalidArgument');
    expect(arch.message).toMatch(/one of llama, qwen2, qwen3/);
    const seed = await err(['model', 'make-tiny', '--arch', 'llama', '--out', join(root, 'x'), '--seed', '-1']);
    expect(seed.code).toBe('commander.invalidArgument');
    const missing = await err(['model', 'make-tiny', '--arch', 'llama']);
    expect(missing.code).toBe('commander.missingMandatoryOptionValue');
  });

  it('the MoE archs refuse --lora and --embedding (the engine refuses both on MoE models), naming the arch', async () => {
    const fail = (args: string[]) => program().parseAsync(['model', 'make-tiny', ...args], { from: 'user' });
    await expect(fail(['--arch', 'qwen3_moe', '--out', join(root, 'm1'), '--lora', '1'])).rejects.toMatchObject({ name: 'ModelFormatError', code: 'config_invalid', message: expect.stringMatching(/LoRA adapters on a mixture-of-experts model \(qwen3_moe\)/) });
    await expect(fail(['--arch', 'mixtral', '--out', join(root, 'm2'), '--embedding', 'mean'])).rejects.toMatchObject({ code: 'config_invalid', message: expect.stringMatching(/mixtral/) });
  });
});
