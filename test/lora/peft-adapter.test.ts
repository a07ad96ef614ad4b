/** Reading PEFT adapters: what is accepted, the scaling, the content hash, and every refusal naming its cause. */
import { mkdtemp, rm, writeFile, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TINY_DIMS } from '../../workers/models/index.js';
import { LoraAdapterError, makeTinyLora, readPeftAdapter } from '../../workers/lora/index.js';
import { Command } from 'commander';
import { registerModelCommand } from '../../workers/models/index.js';

const dims = TINY_DIMS.llama;

describe('readPeftAdapter', () => {
  let root: string;
  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'tandem-lora-'));
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('reads rank, alpha, targets and the scale (alpha / r, rsLoRA alpha / sqrt(r))', async () => {
    const plain = await readPeftAdapter(await makeTinyLora({ dims, outDir: join(root, 'plain'), rank: 4, alpha: 8, targets: ['v_proj', 'q_proj'] }));
    expect(plain).toMatchObject({ rank: 4, alpha: 8, useRslora: false, scale: 2, targets: ['q_proj', 'v_proj'] });
    const rs = await readPeftAdapter(await makeTinyLora({ dims, outDir: join(root, 'rs'), rank: 16, alpha: 8, useRslora: true }));
    expect(rs.scale).toBe(2);
    expect(rs.targets).toHaveLength(7);
  });

  it('the content hash follows the weights, not the directory', async () => {
    const a = await readPeftAdapter(await makeTinyLora({ dims, outDir: join(root, 'h1'), seed: 5 }));
    const b = await readPeftAdapter(await makeTinyLora({ dims, outDir: join(root, 'h2'), seed: 5 }));
    const c = await readPeftAdapter(await makeTinyLora({ dims, outDir: join(root, 'h3'), seed: 6 }));
    expect(a.contentHash).toMatch(/^[0-9a-f]{16}$/);
    expect(a.contentHash).toBe(b.contentHash);
    expect(a.contentHash).not.toBe(c.contentHash);
  });

  it('accepts all-linear and dotted module names', async () => {
    const d = await makeTinyLora({ dims, outDir: join(root, 'al'), extraConfig: { target_modules: 'all-linear' } });
    expect((await readPeftAdapter(d)).targets).toHaveLength(7);
    const e = await makeTinyLora({ dims, outDir: join(root, 'dot'), targets: ['q_proj'], extraConfig: { target_modules: ['self_attn.q_proj'] } });
    expect((await readPeftAdapter(e)).targets).toEqual(['q_proj']);
  });

  const refusals: Array<[string, Record<string, unknown>, RegExp]> = [
    ['DoRA', { use_dora: true }, /DoRA/],
    ['lm_head target', { target_modules: ['q_proj', 'lm_head'] }, /lm_head/],
    ['embedding target', { target_modules: ['embed_tokens'] }, /embed_tokens/],
    ['modules_to_save', { modules_to_save: ['lm_head'] }, /modules_to_save/],
    ['rank_pattern', { rank_pattern: { q_proj: 4 } }, /rank_pattern/],
    ['trained bias', { bias: 'lora_only' }, /bias/],
    ['regex targets', { target_modules: '.*proj' }, /pattern/],
    ['another PEFT type', { peft_type: 'IA3' }, /IA3/],
  ];
  it.each(refusals)('refuses %s, naming it', async (name, extra, re) => {
    const d = await makeTinyLora({ dims, outDir: join(root, `bad-${name.replace(/\W/g, '')}`), targets: ['q_proj'], extraConfig: extra });
    const err = await readPeftAdapter(d).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LoraAdapterError);
    expect((err as Error).message).toMatch(re);
    expect((err as LoraAdapterError).code).toBe('config_invalid');
  });

  it('refuses a rank above --max-lora-rank, naming both', async () => {
    const d = await makeTinyLora({ dims, outDir: join(root, 'big'), rank: 32 });
    await expect(readPeftAdapter(d, { maxLoraRank: 16 })).rejects.toThrow(/rank 32 exceeds --max-lora-rank 16/);
    await expect(readPeftAdapter(d, { maxLoraRank: 32 })).resolves.toMatchObject({ rank: 32 });
  });

  it('refuses tensors for modules the config does not list, or that are not linear layers', async () => {
    const d = await makeTinyLora({ dims, outDir: join(root, 'extra'), targets: ['q_proj', 'k_proj'] });
    const cfg = JSON.parse(await readFile(join(d, 'adapter_config.json'), 'utf8')) as Record<string, unknown>;
    await writeFile(join(d, 'adapter_config.json'), JSON.stringify({ ...cfg, target_modules: ['q_proj'] }));
    await expect(readPeftAdapter(d)).rejects.toThrow(/targets 'k_proj'/);
  });

  it('refuses a missing config, a missing weight file and a corrupt one; the log detail names the path, the message does not', async () => {
    const missing = await readPeftAdapter(join(root, 'nowhere')).catch((e: unknown) => e as LoraAdapterError);
    expect(missing).toMatchObject({ reason: 'unreadable', message: expect.stringContaining('adapter_config.json'), detail: expect.stringContaining(join(root, 'nowhere')) });
    expect(missing.message).not.toContain(root);
    const d = await makeTinyLora({ dims, outDir: join(root, 'corrupt') });
    await writeFile(join(d, 'adapter_model.safetensors'), Buffer.from([1, 2, 3]));
    await expect(readPeftAdapter(d)).rejects.toMatchObject({ reason: 'invalid_weights', message: expect.stringMatching(/^adapter_model\.safetensors: invalid safetensors/) });
    await rm(join(d, 'adapter_model.safetensors'));
    const none = await readPeftAdapter(d).catch((e: unknown) => e as LoraAdapterError);
    expect(none).toMatchObject({ reason: 'unreadable', detail: expect.stringMatching(/no \*\.safetensors/) });
    await writeFile(join(d, 'adapter_config.json'), '{"r": 4, "target_modules": ["q_proj"], ');
    const json = await readPeftAdapter(d).catch((e: unknown) => e as LoraAdapterError);
    // V8's JSON error quotes the file; the client gets a fixed sentence.
    expect(json).toMatchObject({ reason: 'invalid_config', message: 'adapter_config.json is not valid JSON' });
  });

  it('the content hash covers the normalised config: the same weights under another alpha, rsLoRA or target set get another hash', async () => {
    const base = { dims, rank: 4, seed: 11, targets: ['q_proj', 'v_proj'] as const };
    const a = await readPeftAdapter(await makeTinyLora({ ...base, outDir: join(root, 'cfg-a'), alpha: 8 }));
    const alpha = await readPeftAdapter(await makeTinyLora({ ...base, outDir: join(root, 'cfg-alpha'), alpha: 16 }));
    const rs = await readPeftAdapter(await makeTinyLora({ ...base, outDir: join(root, 'cfg-rs'), alpha: 8, useRslora: true }));
    // Same weight bytes, the config lists one more target (no tensors for it: only without the model's shapes).
    const wider = await makeTinyLora({ ...base, outDir: join(root, 'cfg-wide'), alpha: 8, extraConfig: { target_modules: ['q_proj', 'v_proj', 'o_proj'] } });
    const wide = await readPeftAdapter(wider);
    const bytes = async (dir: string) => readFile(join(dir, 'adapter_model.safetensors'));
    expect((await bytes(join(root, 'cfg-a'))).equals(await bytes(join(root, 'cfg-alpha')))).toBe(true);
    expect(new Set([a.contentHash, alpha.contentHash, rs.contentHash, wide.contentHash]).size).toBe(4);
    // The same config written with other key order and a dotted module name normalises to the same hash.
    const again = await makeTinyLora({ ...base, outDir: join(root, 'cfg-a2'), alpha: 8, extraConfig: { target_modules: ['self_attn.v_proj', 'q_proj'] } });
    expect((await readPeftAdapter(again)).contentHash).toBe(a.contentHash);
    // With the model's shapes, the wider config is refused: its o_proj factors are missing.
    await expect(readPeftAdapter(wider, { dims })).rejects.toMatchObject({ reason: 'invalid_weights', message: expect.stringContaining('o_proj.lora_A.weight') });
  });

  it('runtime model make-tiny --lora 2 writes the model and two readable adapters of the asked rank', async () => {
    const program = new Command().exitOverride();
    registerModelCommand(program);
    const out = join(root, 'cli');
    const write = process.stdout.write;
    process.stdout.write = (() => true) as typeof process.stdout.write;
    try {
      await program.parseAsync(['model', 'make-tiny', '--arch', 'qwen3', '--out', out, '--lora', '2', '--lora-rank', '4'], { from: 'user' });
    } finally {
      process.stdout.write = write;
    }
    const a = await readPeftAdapter(join(out, 'loras', 'lora-0'));
    const b = await readPeftAdapter(join(out, 'loras', 'lora-1'));
    expect(a).toMatchObject({ rank: 4, targets: expect.arrayContaining(['q_proj', 'down_proj']) });
    expect(a.contentHash).not.toBe(b.contentHash);
  });
});
