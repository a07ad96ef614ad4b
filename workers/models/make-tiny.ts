/**
 * `makeTinyModel`: writes a complete Hugging Face model directory (config.json,
 * generation_config.json, model.safetensors, tokenizer.json, tokenizer_config.json) for a tiny
 * random Llama / Qwen2 / Qwen3, or mixture of experts (Qwen3-MoE, Mixtral, Qwen2-MoE). Same options -> byte-identical files, so tests and the native
 * engine's PyTorch reference can regenerate it anywhere instead of shipping weights.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { WEIGHT_DTYPE_INFO, encodeWeights, type WeightDtype } from './dtype.js';
import { ModelFormatError } from './errors.js';
import { SeededRandom } from '../../runtime/random.js';
import { encodeSafetensors, numel, type TensorData } from './safetensors.js';
import { TINY_DIMS, TINY_YARN, buildConfigJson, tensorSpecs } from './tiny-arch.js';
import { TINY_ARCHS, buildTinyTokenizer, type TinyArch } from './tiny-tokenizer.js';
import { writeSentenceTransformersFiles } from './embedding-config.js';
import { FP8_FORMATS, fp8QuantizationConfig, isQuantizedLinear, quantizeWeight, type Fp8Format } from './fp8.js';
import type { EmbeddingPooling } from '../../proto/wire.js';

export interface MakeTinyModelOptions {
  arch: TinyArch;
  outDir: string;
  /** Storage dtype of the weights; default bf16. */
  dtype?: WeightDtype;
  /** PRNG seed for the weights; default 0. The tokenizer does not depend on it. */
  seed?: number;
  /** Also write sentence-transformers files (Transformer → Pooling → Normalize): an embedding model. */
  embedding?: EmbeddingPooling;
  /** Declare Matryoshka embeddings in config.json (`is_matryoshka`): `dimensions` is then allowed. */
  matryoshka?: boolean;
  /** Replace the family's RoPE with YaRN scaling (TINY_YARN). */
  ropeScaling?: 'yarn';
  /**
   * Write an FP8 checkpoint (fp8.ts): the linear layers' weights as e4m3 with scales in this
   * format, everything else in `dtype`; config.json gains the format's quantization_config.
   */
  quantize?: Fp8Format;
}

export interface TinyModelInfo {
  /** The FP8 format, when quantized. */
  quantize?: Fp8Format;
  outDir: string;
  arch: TinyArch;
  dtype: WeightDtype;
  seed: number;
  vocabSize: number;
  numParameters: number;
  /** File name -> size in bytes. */
  files: Record<string, number>;
  totalBytes: number;
  bosTokenId: number;
  eosTokenIds: number[];
}

/** Norm weights are 1 + N(0, 0.1): near identity, but a wrong (unapplied) weight still shows. */
const NORM_JITTER_STD = 0.1;

export async function makeTinyModel(options: MakeTinyModelOptions): Promise<TinyModelInfo> {
  const { arch } = options;
  const dtype = options.dtype ?? 'bf16';
  const seed = options.seed ?? 0;
  if (!TINY_ARCHS.includes(arch)) throw new ModelFormatError(`unknown tiny arch '${String(arch)}'`);
  if (dtype !== 'bf16' && dtype !== 'f32') throw new ModelFormatError(`unknown dtype '${String(dtype)}'`);
  if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) throw new ModelFormatError(`seed must be an integer in [0, 2^32), got ${seed}`);
  const quantize = options.quantize;
  if (quantize !== undefined && !FP8_FORMATS.includes(quantize)) throw new ModelFormatError(`unknown quantization '${String(quantize)}'`);

  const outDir = resolve(options.outDir);
  const dims = TINY_DIMS[arch];
  const tok = buildTinyTokenizer(arch, dims.maxPositionEmbeddings);
  const config = buildConfigJson(arch, dtype, {
    vocabSize: tok.vocabSize,
    bosTokenId: tok.bosTokenId,
    eosTokenIds: tok.configEosTokenIds,
  });
  const generationConfig: Record<string, unknown> = {
    bos_token_id: tok.bosTokenId,
    eos_token_id: tok.generationEosTokenIds,
    ...(tok.padTokenId === null ? {} : { pad_token_id: tok.padTokenId }),
    transformers_version: '4.51.0',
  };

  const prng = new SeededRandom(seed);
  const tensors: TensorData[] = [];
  let numParameters = 0;
  for (const spec of tensorSpecs(arch, tok.vocabSize)) {
    const values = new Float32Array(numel(spec.shape));
    if (spec.init.kind === 'norm') prng.fillNormal(values, 1, NORM_JITTER_STD);
    else prng.fillNormal(values, 0, spec.init.std);
    numParameters += values.length;
    if (quantize !== undefined && isQuantizedLinear(spec.name)) {
      tensors.push(...quantizeWeight(spec.name, values, spec.shape[0]!, spec.shape[1]!, quantize));
      continue;
    }
    tensors.push({ name: spec.name, dtype: WEIGHT_DTYPE_INFO[dtype].safetensors, shape: spec.shape, data: encodeWeights(values, dtype) });
  }
  if (quantize !== undefined) config.quantization_config = fp8QuantizationConfig(quantize);

  if (options.matryoshka === true) config.is_matryoshka = true;
  if (options.ropeScaling === 'yarn') config.rope_scaling = { ...TINY_YARN };
  else if (options.ropeScaling !== undefined) throw new ModelFormatError(`unknown rope scaling '${String(options.ropeScaling)}'`);
  const files: Record<string, Uint8Array | string> = {
    'config.json': json(config),
    'generation_config.json': json(generationConfig),
    'model.safetensors': encodeSafetensors(tensors, { format: 'pt' }),
    'tokenizer.json': json(tok.tokenizerJson),
    'tokenizer_config.json': json(tok.tokenizerConfig),
  };
  await mkdir(outDir, { recursive: true });
  const sizes: Record<string, number> = {};
  let totalBytes = 0;
  for (const [name, content] of Object.entries(files)) {
    await writeFile(join(outDir, name), content);
    sizes[name] = typeof content === 'string' ? Buffer.byteLength(content) : content.length;
    totalBytes += sizes[name]!;
  }
  if (options.embedding !== undefined) await writeSentenceTransformersFiles(outDir, options.embedding, dims.hiddenSize, dims.maxPositionEmbeddings);
  return {
    outDir,
    arch,
    dtype,
    seed,
    ...(quantize !== undefined ? { quantize } : {}),
    vocabSize: tok.vocabSize,
    numParameters,
    files: sizes,
    totalBytes,
    bosTokenId: tok.bosTokenId,
    eosTokenIds: tok.generationEosTokenIds,
  };
}

function json(value: unknown): string {
  return `${JSON.stringify(value, null, 2)}\n`;
}
