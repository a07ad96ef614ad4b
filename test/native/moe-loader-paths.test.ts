/**
 * Loader paths of the native engine's mixtures of experts that the goldens do not reach (issue 36;
 * native/src/core/moe_config.cc, CPU backend):
 *  - transformers 5's fused expert layout: `model.layers.L.mlp.experts.gate_up_proj` [E][2I][H]
 *    (each expert's gate rows, then its up rows) and `mlp.experts.down_proj` [E][H][I], router
 *    `mlp.gate.weight`. A tiny checkpoint rewritten into it computes the same logits as the
 *    published per-expert layout it came from (same bytes, so equal to 1e-6); the same rewrite
 *    with each expert's gate and up halves swapped does not (the comparison can see a mis-slice);
 *    a wrongly shaped fused tensor is refused naming it.
 *  - which layers are sparse (Qwen2-MoE/Qwen3-MoE `decoder_sparse_step`, `mlp_only_layers`):
 *    layer l is sparse iff (l + 1) % step == 0 and l is not in mlp_only_layers. With step 2 over
 *    3 layers only layer 1 is sparse: a checkpoint with dense MLPs in layers 0 and 2 loads, and
 *    equals the same files read through mlp_only_layers [0, 2]; without those dense tensors the
 *    load is refused naming the missing one. Mixtral has no such field (every layer is sparse).
 *  - gpt-oss (GptOssForCausalLM): refused at config time, one line naming what is not built.
 */
import { cp, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NativeEngineError } from '../../native/index.js';
import { createNativeEngine } from '../../workers/engines/native/index.js';
import { TINY_DIMS, makeTinyModel, type TinyArch } from '../../workers/models/index.js';
import { encodeSafetensors, SafetensorsFile, type TensorData } from '../../workers/models/safetensors.js';
import { maxAbsDiff, prefillAndStepLogits, withTempDir } from './helpers.js';

type Config = Record<string, unknown>;

/** Logits of a 9-token prefill and of one decode step after it. */

async function logitsOfDir(modelDir: string): Promise<Float32Array> {
  const engine = await createNativeEngine({ modelDir, numBlocks: 8, threads: 2 });
  try {
    return await prefillAndStepLogits(engine);
  } finally {
    await engine.close();
  }
}

async function loadError(modelDir: string): Promise<NativeEngineError> {
  const err = await createNativeEngine({ modelDir, numBlocks: 8, threads: 2 }).then(
    async (e) => {
      await e.close();
      return undefined;
    },
    (e: unknown) => e,
  );
  expect(err, `${modelDir} should be refused at load`).toBeInstanceOf(NativeEngineError);
  return err as NativeEngineError;
}

function expectOneLine(err: Error): void {
  expect(err.message.trim().split('\n'), err.message).toHaveLength(1);
}

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

async function readConfig(dir: string): Promise<Config> {
  return JSON.parse(await readFile(join(dir, 'config.json'), 'utf8')) as Config;
}

/** A copy of `from` at `to` with its config edited and, if given, its tensors replaced. */
async function variant(from: string, to: string, edit: (c: Config) => void, tensors?: TensorData[]): Promise<string> {
  await rm(to, { recursive: true, force: true });
  await cp(from, to, { recursive: true });
  const config = await readConfig(to);
  edit(config);
  await writeFile(join(to, 'config.json'), JSON.stringify(config, null, 2));
  if (tensors !== undefined) await writeFile(join(to, 'model.safetensors'), encodeSafetensors(tensors));
  return to;
}

interface FusedOptions {
  /** Put each expert's up rows before its gate rows (a wrong fusion, for the control). */
  swapGateUp?: boolean;
  /** Override the shapes written for one layer's fused tensors (same bytes). */
  shapes?: { layer: number; gateUp?: number[]; down?: number[] };
  /** Leave out one layer's fused down_proj. */
  dropDownOf?: number;
}

/**
 * The tensors of a Qwen-MoE per-expert checkpoint in transformers 5's fused layout: per sparse
 * layer `mlp.experts.gate_up_proj` [E][2I][H] and `mlp.experts.down_proj` [E][H][I] replace
 * `mlp.experts.N.{gate,up,down}_proj.weight`; the router and any shared expert keep their names.
 * Raw bytes are concatenated, so any dtype is kept exactly.
 */
function fusedTensors(file: SafetensorsFile, arch: TinyArch, o: FusedOptions = {}): { tensors: TensorData[]; layers: number[] } {
  const d = TINY_DIMS[arch];
  const moe = d.moe!;
  const E = moe.numExperts;
  const I = moe.expertIntermediateSize;
  const H = d.hiddenSize;
  const perExpert = /^model\.layers\.(\d+)\.mlp\.experts\.\d+\.(gate|up|down)_proj\.weight$/;
  const out: TensorData[] = [];
  const layers = new Set<number>();
  for (const name of file.names) {
    const m = perExpert.exec(name);
    if (m) {
      layers.add(Number(m[1]));
      continue;
    }
    const info = file.info(name);
    out.push({ name, dtype: info.dtype, shape: info.shape, data: file.raw(name) });
  }
  for (const l of [...layers].sort()) {
    const p = `model.layers.${l}.mlp.experts`;
    const dtype = file.info(`${p}.0.gate_proj.weight`).dtype;
    const gateUp: Uint8Array[] = [];
    const down: Uint8Array[] = [];
    for (let e = 0; e < E; e++) {
      const gate = file.raw(`${p}.${e}.gate_proj.weight`);
      const up = file.raw(`${p}.${e}.up_proj.weight`);
      gateUp.push(...(o.swapGateUp ? [up, gate] : [gate, up]));
      down.push(file.raw(`${p}.${e}.down_proj.weight`));
    }
    const s = o.shapes?.layer === l ? o.shapes : undefined;
    out.push({ name: `${p}.gate_up_proj`, dtype, shape: s?.gateUp ?? [E, 2 * I, H], data: concat(gateUp) });
    if (o.dropDownOf !== l) out.push({ name: `${p}.down_proj`, dtype, shape: s?.down ?? [E, H, I], data: concat(down) });
  }
  return { tensors: out, layers: [...layers].sort() };
}

describe('mixture-of-experts loader paths (native CPU engine)', () => {
  let tmp: Awaited<ReturnType<typeof withTempDir>>;
  const made = new Map<string, string>();

  beforeAll(async () => {
    tmp = await withTempDir();
  });
  afterAll(async () => {
    await tmp.cleanup();
  });

  async function tiny(arch: TinyArch, dtype: 'f32' | 'bf16', seed: number): Promise<string> {
    const key = `${arch}-${dtype}-${seed}`;
    const have = made.get(key);
    if (have !== undefined) return have;
    const outDir = join(tmp.dir, key);
    await makeTinyModel({ arch, outDir, dtype, seed });
    made.set(key, outDir);
    return outDir;
  }

  describe("transformers 5's fused expert layout (mlp.experts.gate_up_proj / down_proj)", () => {
    // qwen3_moe: sparse layers 0 and 2 around a dense layer 1; qwen2_moe: a shared expert beside the fused ones.
    for (const [arch, dtype] of [['qwen3_moe', 'f32'], ['qwen3_moe', 'bf16'], ['qwen2_moe', 'f32']] as const) {
      it(`${arch} ${dtype}: a fused checkpoint gives the per-expert checkpoint's logits; gate/up swapped does not`, async () => {
        const plain = await tiny(arch, dtype, 31);
        const file = SafetensorsFile.fromBytes(await readFile(join(plain, 'model.safetensors')));
        const fused = fusedTensors(file, arch);
        expect(fused.layers).toEqual(arch === 'qwen3_moe' ? [0, 2] : [0, 1]);
        // No per-expert tensor is left: the engine can only have read the fused ones.
        expect(fused.tensors.some((t) => /\.experts\.\d+\./.test(t.name))).toBe(false);
        const fusedDir = await variant(plain, join(tmp.dir, `${arch}-${dtype}-fused`), () => undefined, fused.tensors);
        const swappedDir = await variant(plain, join(tmp.dir, `${arch}-${dtype}-fused-swapped`), () => undefined, fusedTensors(file, arch, { swapGateUp: true }).tensors);

        const reference = await logitsOfDir(plain);
        expect(reference.every(Number.isFinite)).toBe(true);
        expect(maxAbsDiff(await logitsOfDir(fusedDir), reference)).toBeLessThanOrEqual(1e-6);
        // Control: gate rows read as up rows (the wrong half first) change the SwiGLU, so the logits.
        expect(maxAbsDiff(await logitsOfDir(swappedDir), reference)).toBeGreaterThan(1e-3);
      });
    }

    const E = TINY_DIMS.qwen3_moe.moe!.numExperts;
    const I = TINY_DIMS.qwen3_moe.moe!.expertIntermediateSize;
    const H = TINY_DIMS.qwen3_moe.hiddenSize;
    it.each([
      // Same bytes, flattened to 2-D.
      ['gate_up_proj flattened to [E*2I, H]', { layer: 2, gateUp: [E * 2 * I, H] }, 'model.layers.2.mlp.experts.gate_up_proj', `[${E}, ${2 * I}, ${H}]`],
      // Same bytes, each expert's down transposed ([E][I][H] instead of [E][H][I]).
      ['down_proj as [E, I, H]', { layer: 0, down: [E, I, H] }, 'model.layers.0.mlp.experts.down_proj', `[${E}, ${H}, ${I}]`],
    ])('a fused tensor of the wrong shape is config_invalid naming it (%s)', async (_what, shapes, tensor, implied) => {
      const plain = await tiny('qwen3_moe', 'f32', 31);
      const file = SafetensorsFile.fromBytes(await readFile(join(plain, 'model.safetensors')));
      const dir = await variant(plain, join(tmp.dir, `fused-bad-${tensor}`), () => undefined, fusedTensors(file, 'qwen3_moe', { shapes }).tensors);
      const err = await loadError(dir);
      expect(err.code).toBe('config_invalid');
      expect(err.message).toContain(`tensor '${tensor}' has shape`);
      expect(err.message).toContain(`config.json implies ${implied}`);
      expectOneLine(err);
    });

    it('a fused gate_up_proj without its down_proj is not_found naming down_proj', async () => {
      const plain = await tiny('qwen3_moe', 'f32', 31);
      const file = SafetensorsFile.fromBytes(await readFile(join(plain, 'model.safetensors')));
      const dir = await variant(plain, join(tmp.dir, 'fused-no-down'), () => undefined, fusedTensors(file, 'qwen3_moe', { dropDownOf: 2 }).tensors);
      const err = await loadError(dir);
      expect(err.code).toBe('not_found');
      expect(err.message).toContain("tensor 'model.layers.2.mlp.experts.down_proj' missing");
      expectOneLine(err);
    });
  });

  describe('which layers are sparse: decoder_sparse_step and mlp_only_layers', () => {
    /**
     * From the tiny qwen3_moe (sparse 0 and 2, dense 1): a checkpoint whose only sparse layer is
     * 1 (layer 0's router and experts) and whose layers 0 and 2 are dense (layer 1's MLP, copied).
     */
    async function step2Tensors(plain: string): Promise<TensorData[]> {
      const file = SafetensorsFile.fromBytes(await readFile(join(plain, 'model.safetensors')));
      const out: TensorData[] = [];
      const keep = (name: string, as = name): void => {
        const info = file.info(name);
        out.push({ name: as, dtype: info.dtype, shape: info.shape, data: file.raw(name) });
      };
      for (const name of file.names) {
        const m = /^model\.layers\.(\d+)\.mlp\.(.*)$/.exec(name);
        if (!m) keep(name);
        else if (m[1] === '0') keep(name, `model.layers.1.mlp.${m[2]}`); // router + experts -> layer 1
        else if (m[1] === '1') {
          keep(name, `model.layers.0.mlp.${m[2]}`); // dense MLP -> layers 0 and 2
          keep(name, `model.layers.2.mlp.${m[2]}`);
        }
      }
      return out;
    }

    it('decoder_sparse_step 2: only layer 1 of 3 is sparse; loads with dense MLPs in 0 and 2 and equals mlp_only_layers [0, 2]', async () => {
      const plain = await tiny('qwen3_moe', 'f32', 32);
      const tensors = await step2Tensors(plain);
      expect(tensors.some((t) => t.name === 'model.layers.1.mlp.gate.weight')).toBe(true);
      expect(tensors.some((t) => t.name.startsWith('model.layers.0.mlp.experts.') || t.name.startsWith('model.layers.2.mlp.experts.'))).toBe(false);
      const step2 = await variant(plain, join(tmp.dir, 'step2'), (c) => Object.assign(c, { decoder_sparse_step: 2, mlp_only_layers: [] }), tensors);
      const only02 = await variant(step2, join(tmp.dir, 'step1-only02'), (c) => Object.assign(c, { decoder_sparse_step: 1, mlp_only_layers: [0, 2] }));
      // Without the field at all (Qwen default 1) every layer would be sparse: layer 0 has no router.
      const noStep = await variant(step2, join(tmp.dir, 'step2-dropped'), (c) => Object.assign(c, { decoder_sparse_step: null }));

      const a = await logitsOfDir(step2);
      expect(a.every(Number.isFinite)).toBe(true);
      expect(maxAbsDiff(a, await logitsOfDir(only02))).toBeLessThanOrEqual(1e-6);
      const err = await loadError(noStep);
      expect(err.code).toBe('not_found');
      expect(err.message).toContain("tensor 'model.layers.0.mlp.gate.weight' missing");
    });

    it('decoder_sparse_step 2 without dense MLP tensors in the dense layers is not_found naming the first one', async () => {
      const plain = await tiny('qwen3_moe', 'f32', 32); // layer 0 carries experts, not a dense MLP
      const dir = await variant(plain, join(tmp.dir, 'step2-no-dense'), (c) => Object.assign(c, { decoder_sparse_step: 2, mlp_only_layers: [] }));
      const err = await loadError(dir);
      expect(err.code).toBe('not_found');
      expect(err.message).toContain("tensor 'model.layers.0.mlp.gate_proj.weight' missing");
      expectOneLine(err);
    });

    it('mlp_only_layers is what keeps the tiny qwen3_moe layer 1 dense: dropping it asks for layer 1 router', async () => {
      const plain = await tiny('qwen3_moe', 'f32', 32);
      expect((await readConfig(plain)).mlp_only_layers).toEqual([1]);
      expect((await logitsOfDir(plain)).every(Number.isFinite)).toBe(true);
      const dir = await variant(plain, join(tmp.dir, 'no-mlp-only'), (c) => Object.assign(c, { mlp_only_layers: [] }));
      const err = await loadError(dir);
      expect(err.code).toBe('not_found');
      expect(err.message).toContain("tensor 'model.layers.1.mlp.gate.weight' missing");
      expectOneLine(err);
    });

    it.each([
      ['decoder_sparse_step 0', { decoder_sparse_step: 0 }, "field 'decoder_sparse_step' must be a positive integer"],
      ['decoder_sparse_step 1.5', { decoder_sparse_step: 1.5 }, "field 'decoder_sparse_step' must be a positive integer"],
      ['mlp_only_layers not an array', { mlp_only_layers: 1 }, "field 'mlp_only_layers' must be an array of layer indices"],
      ['mlp_only_layers with a negative index', { mlp_only_layers: [-1] }, "field 'mlp_only_layers' must hold non-negative integers"],
    ])('%s is config_invalid naming the field', async (name, fields, message) => {
      const plain = await tiny('qwen3_moe', 'f32', 32);
      const dir = await variant(plain, join(tmp.dir, `bad-${name.replace(/\W+/g, '-')}`), (c) => Object.assign(c, fields));
      const err = await loadError(dir);
      expect(err.code).toBe('config_invalid');
      expect(err.message).toContain(message);
      expectOneLine(err);
    });

    it('Mixtral has no decoder_sparse_step: the field leaves every layer sparse and the logits unchanged', async () => {
      const plain = await tiny('mixtral', 'f32', 33);
      const dir = await variant(plain, join(tmp.dir, 'mixtral-step2'), (c) => Object.assign(c, { decoder_sparse_step: 2 }));
      expect(maxAbsDiff(await logitsOfDir(dir), await logitsOfDir(plain))).toBe(0);
    });
  });

  describe('gpt-oss is refused at config time', () => {
    it('GptOssForCausalLM (model_type gpt_oss): config_invalid, one line naming sinks and MXFP4', async () => {
      const plain = await tiny('qwen3_moe', 'f32', 34);
      const dir = await variant(plain, join(tmp.dir, 'gpt-oss'), (c) =>
        Object.assign(c, { architectures: ['GptOssForCausalLM'], model_type: 'gpt_oss', num_local_experts: 8, experts_per_token: 2 }),
      );
      const err = await loadError(dir);
      expect(err.code).toBe('config_invalid');
      expect(err.message).toContain("unsupported field 'architectures'=GptOssForCausalLM");
      expect(err.message).toMatch(/attention sinks \(the 'sinks' tensors\) and MXFP4 experts \(field 'quantization_config'\) are not built/);
      expectOneLine(err);
    });

    it('model_type gpt_oss without architectures: config_invalid naming the model_type and why (sinks, MXFP4)', async () => {
      const plain = await tiny('qwen3_moe', 'f32', 34);
      const dir = await variant(plain, join(tmp.dir, 'gpt-oss-type-only'), (c) => {
        delete c.architectures;
        c.model_type = 'gpt_oss';
      });
      const err = await loadError(dir);
      expect(err.code).toBe('config_invalid');
      expect(err.message).toContain("unsupported field 'model_type'=gpt_oss: attention sinks (the 'sinks' tensors) and MXFP4 experts");
      expectOneLine(err);
    });
  });
});
