/**
 * Quantized checkpoints the engine cannot serve faithfully are refused at load through the real
 * CLI (`runtime worker --engine native`): one line naming the config field or tensor, exit 2,
 * no stack trace. Each case edits an FP8 tiny model (make-tiny --quantize fp8-channel): another
 * quant_method (MXFP4, GPTQ, AWQ), e5m2 weights (config or tensor), compressed-tensors with int
 * or 4-bit weights or a packed format, static activations with block scales, scales of the
 * wrong shape or missing, an FP8 tensor without a quantization_config, an FP8 mixture of experts
 * missing an expert's scale (FP8 MoE checkpoints load on the CPU: fp8-moe-engine.test.ts), a bad
 * --quantization.
 * Spawns the built CLI (`npx tsc -b` and the native addon first).
 */
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXIT_CODES } from '../../runtime/exit-codes.js';
import { makeTinyModel } from '../../workers/models/index.js';
import { spawnCli } from '../harness/processes.js';

const STACK_FRAME = /^\s+at /m;

type Json = Record<string, unknown>;

describe('refused FP8 / quantized checkpoints: one line naming the field, exit 2', () => {
  let dir: string;
  let base: string;
  let local: string[];

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tandem-fp8-refusals-'));
    base = join(dir, 'base');
    await makeTinyModel({ arch: 'llama', outDir: base, dtype: 'bf16', seed: 2, quantize: 'fp8-channel' });
    local = ['--discovery', 'file', '--discovery-dir', join(dir, 'discovery'), '--event-plane', 'direct', '--log-level', 'error'];
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  async function variant(name: string, edit: { config?: (q: Json, config: Json) => void; tensors?: (bytes: Buffer) => Buffer }): Promise<string> {
    const out = join(dir, name);
    await cp(base, out, { recursive: true });
    if (edit.config) {
      const config = JSON.parse(await readFile(join(out, 'config.json'), 'utf8')) as Json;
      edit.config(config.quantization_config as Json, config);
      await writeFile(join(out, 'config.json'), JSON.stringify(config));
    }
    if (edit.tensors) await writeFile(join(out, 'model.safetensors'), edit.tensors(await readFile(join(out, 'model.safetensors'))));
    return out;
  }

  async function worker(model: string, extra: string[] = []): Promise<{ code: number | null; output: string }> {
    const p = spawnCli(['worker', ...local, '--engine', 'native', '--model', model, '--num-gpu-blocks', '8', ...extra]);
    const exit = await Promise.race([p.exited(), new Promise<undefined>((r) => setTimeout(() => r(undefined), 60_000))]);
    if (!exit) {
      p.kill('SIGKILL');
      throw new Error(`worker did not exit within 60 s:\n${p.output()}`);
    }
    return { code: exit.code, output: p.output() };
  }

  /** The header's JSON rewritten in place (same length: the data offsets stay valid). */
  const renameInHeader = (from: string, to: string) => (bytes: Buffer) => {
    const n = Number(bytes.readBigUInt64LE(0));
    const header = bytes.subarray(8, 8 + n).toString('utf8');
    const at = header.indexOf(from);
    if (at < 0 || from.length !== to.length) throw new Error(`cannot rename ${from}`);
    const out = Buffer.from(bytes);
    out.write(header.slice(0, at) + to + header.slice(at + from.length), 8, 'utf8');
    return out;
  };

  const groupWeights = (q: Json) => ((q.config_groups as Record<string, Json>).group_0!.weights as Json);

  const cases: Array<[string, Parameters<typeof variant>[1], RegExp]> = [
    ['MXFP4', { config: (_q, c) => (c.quantization_config = { quant_method: 'mxfp4' }) }, /unsupported field 'quantization_config\.quant_method'='mxfp4' \(supported: fp8, compressed-tensors, fbgemm_fp8\)/],
    ['GPTQ int4', { config: (_q, c) => (c.quantization_config = { quant_method: 'gptq', bits: 4, group_size: 128 }) }, /'quantization_config\.quant_method'='gptq'/],
    ['AWQ int4', { config: (_q, c) => (c.quantization_config = { quant_method: 'awq', bits: 4 }) }, /'quantization_config\.quant_method'='awq'/],
    ['e5m2 in the config', { config: (_q, c) => (c.quantization_config = { quant_method: 'fp8', fmt: 'e5m2', activation_scheme: 'dynamic' }) }, /unsupported field 'quantization_config\.fmt'='e5m2' \(supported: e4m3\)/],
    ['e5m2 weights', { tensors: renameInHeader('F8_E4M3', 'F8_E5M2') }, /tensor 'model\.layers\.\d+\.[a-z_.]+\.weight' has dtype F8_E5M2 \(FP8 weights must be F8_E4M3\)/],
    ['compressed-tensors int8 weights', { config: (q) => (groupWeights(q).type = 'int') }, /'quantization_config\.config_groups\.group_0\.weights\.type'='int' \(supported: float\)/],
    ['compressed-tensors 4-bit weights', { config: (q) => (groupWeights(q).num_bits = 4) }, /'quantization_config\.config_groups\.group_0\.weights\.num_bits'=4/],
    ['compressed-tensors packed int4', { config: (q) => (q.format = 'pack-quantized') }, /'quantization_config\.format'='pack-quantized' \(supported: float-quantized\)/],
    ['static activations with block scales', { config: (_q, c) => (c.quantization_config = { quant_method: 'fp8', activation_scheme: 'static', weight_block_size: [128, 128] }) }, /'quantization_config\.activation_scheme'='static' with 'weight_block_size'/],
    ['per-tensor config over per-channel scales', { config: (_q, c) => (c.quantization_config = { quant_method: 'fp8', activation_scheme: 'dynamic' }) }, /tensor 'model\.layers\.\d+\.[a-z_.]+\.weight_scale' has shape \[\d+, 1\], the quantization_config implies \[\] or \[1\]/],
    ['a missing scale', { tensors: renameInHeader('down_proj.weight_scale', 'down_proj.weight_sca1e') }, /tensor 'model\.layers\.\d\.mlp\.down_proj\.weight_scale' missing/],
    ['FP8 weights without a quantization_config', { config: (_q, c) => delete c.quantization_config }, /is F8_E4M3 but config\.json has no quantization_config/],
  ];

  for (const [name, edit, re] of cases) {
    it(name, async () => {
      const model = await variant(name.replace(/\W+/g, '-'), edit);
      const { code, output } = await worker(model);
      expect(code, output).toBe(EXIT_CODES.config);
      expect(output).toMatch(re);
      expect(output.trim().split('\n'), output).toHaveLength(1);
      expect(output).not.toMatch(STACK_FRAME);
    }, 90_000);
  }

  it('an FP8 checkpoint of a mixture-of-experts model missing an expert\'s scale', async () => {
    // make-tiny writes FP8 MoE checkpoints (they load on the CPU); the experts' scales are checked as the dense layers' are.
    const moe = join(dir, 'moe-fp8');
    await makeTinyModel({ arch: 'qwen3_moe', outDir: moe, dtype: 'bf16', seed: 2, quantize: 'fp8-block' });
    const file = join(moe, 'model.safetensors');
    await writeFile(file, renameInHeader('experts.0.down_proj.weight_scale_inv', 'experts.0.down_proj.weight_scale_inX')(await readFile(file)));
    const { code, output } = await worker(moe);
    expect(code, output).toBe(EXIT_CODES.config);
    expect(output).toMatch(/tensor 'model\.layers\.0\.mlp\.experts\.0\.down_proj\.weight_scale_inv' missing/);
    expect(output.trim().split('\n'), output).toHaveLength(1);
    expect(output).not.toMatch(STACK_FRAME);
  }, 90_000);

  it('--quantization and --kv-cache-dtype take only their values', async () => {
    for (const [flag, value] of [['--quantization', 'int4'], ['--kv-cache-dtype', 'fp4']]) {
      const { code, output } = await worker(base, [flag!, value!]);
      expect(code, output).toBe(EXIT_CODES.config);
      expect(output).toContain(`'${value}'`);
      expect(output).not.toMatch(STACK_FRAME);
    }
  }, 90_000);
});
