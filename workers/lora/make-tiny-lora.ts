/**
 * `makeTinyLora`: a random PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors)
 * for a model of given dimensions, e.g. a tiny model from makeTinyModel. Unlike a freshly
 * initialized PEFT adapter (B = 0) both factors are random, sized so the adapter visibly moves
 * greedy output: that is what tests of adapter application need. Same options -> same bytes.
 */
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { SeededRandom } from '../../runtime/random.js';
import { encodeWeights, WEIGHT_DTYPE_INFO, type WeightDtype } from '../models/dtype.js';
import { encodeSafetensors, type TensorData } from '../models/safetensors.js';
import { LORA_TARGET_MODULES, type LoraTargetModule } from './peft-adapter.js';
import { loraTargetDims, loraTensorName, type LoraModelDims } from './lora-dims.js';

export interface MakeTinyLoraOptions {
  dims: LoraModelDims;
  outDir: string;
  rank?: number;          // default 8
  alpha?: number;         // default 2 * rank
  useRslora?: boolean;
  targets?: readonly LoraTargetModule[];  // default all seven linear layers
  seed?: number;
  dtype?: WeightDtype;    // default f32
  baseModel?: string;
  /** Extra adapter_config.json fields (tests of refusals: use_dora, modules_to_save, ...). */
  extraConfig?: Record<string, unknown>;
}

export async function makeTinyLora(o: MakeTinyLoraOptions): Promise<string> {
  const rank = o.rank ?? 8;
  const alpha = o.alpha ?? 2 * rank;
  const targets = o.targets ?? LORA_TARGET_MODULES;
  const dtype = o.dtype ?? 'f32';
  const prng = new SeededRandom(o.seed ?? 0);
  const tensors: TensorData[] = [];
  for (let l = 0; l < o.dims.numLayers; l++) {
    for (const t of targets) {
      const { inF, outF } = loraTargetDims(o.dims, t);
      const a = new Float32Array(rank * inF);
      const b = new Float32Array(outF * rank);
      // |A·x| ~ 1 per rank row for unit-scale x; B spreads 0.5 over the rank, so the update is
      // ~ scale/2 per output, the size of the base projection's own output.
      prng.fillNormal(a, 0, 1 / Math.sqrt(inF));
      prng.fillNormal(b, 0, 0.5 / Math.sqrt(rank));
      const st = WEIGHT_DTYPE_INFO[dtype].safetensors;
      tensors.push({ name: loraTensorName(l, t, 'A'), dtype: st, shape: [rank, inF], data: encodeWeights(a, dtype) });
      tensors.push({ name: loraTensorName(l, t, 'B'), dtype: st, shape: [outF, rank], data: encodeWeights(b, dtype) });
    }
  }
  const config = {
    base_model_name_or_path: o.baseModel ?? null,
    bias: 'none',
    fan_in_fan_out: false,
    inference_mode: true,
    lora_alpha: alpha,
    lora_dropout: 0.0,
    modules_to_save: null,
    peft_type: 'LORA',
    r: rank,
    target_modules: [...targets],
    task_type: 'CAUSAL_LM',
    use_dora: false,
    use_rslora: o.useRslora ?? false,
    ...o.extraConfig,
  };
  const dir = resolve(o.outDir);
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, 'adapter_config.json'), `${JSON.stringify(config, null, 2)}\n`);
  await writeFile(join(dir, 'adapter_model.safetensors'), encodeSafetensors(tensors, { format: 'pt' }));
  return dir;
}

/**
 * A mocker worker reads only config.json of its model: rewriting a tiny model's dimensions there
 * lets it serve adapters shaped for a larger model (0.5B-shaped adapters in benches and tests)
 * without weights of that size. The weight files stay tiny: never run such a model natively.
 */
export async function reshapeModelConfig(modelDir: string, dims: LoraModelDims): Promise<void> {
  const path = join(modelDir, 'config.json');
  const config = JSON.parse(await readFile(path, 'utf8')) as Record<string, unknown>;
  const shaped = {
    ...config,
    hidden_size: dims.hiddenSize,
    intermediate_size: dims.intermediateSize,
    num_hidden_layers: dims.numLayers,
    num_attention_heads: dims.numHeads,
    num_key_value_heads: dims.numKvHeads,
    head_dim: dims.headDim,
  };
  await writeFile(path, `${JSON.stringify(shaped, null, 2)}\n`);
}
