/**
 * Reads what the serving side needs from a Hugging Face model directory: architecture and
 * shapes (for KV sizing), context length, BOS/EOS ids and the default KV block size. EOS ids
 * are the union of config.json and generation_config.json, because instruct checkpoints list
 * the end-of-turn token only in the latter (Llama 3: <|eot_id|>).
 */
import { readFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { ModelFormatError } from './errors.js';

/** Tokens per KV block unless the worker is told otherwise (docs/design.md). */
export const DEFAULT_KV_BLOCK_SIZE = 16;

export interface RopeScaling {
  ropeType: string;
  factor?: number;
  lowFreqFactor?: number;
  highFreqFactor?: number;
  originalMaxPositionEmbeddings?: number;
}

/** A mixture of experts (Mixtral, Qwen2-MoE, Qwen3-MoE): how many experts and how many a token reads. */
export interface MoeShape {
  numExperts: number;
  /** num_experts_per_tok. */
  topK: number;
  /** Each expert's width (moe_intermediate_size; Mixtral: intermediate_size). */
  expertIntermediateSize: number;
  /** Qwen2-MoE's shared expert width; 0 without one. */
  sharedIntermediateSize: number;
  /** Layers whose MLP is a MoE block (the rest stay dense with intermediateSize). */
  numMoeLayers: number;
}

export interface ModelConfig {
  /** First entry of `architectures`, e.g. LlamaForCausalLM. */
  architecture: string;
  modelType: string;
  vocabSize: number;
  hiddenSize: number;
  intermediateSize: number;
  numLayers: number;
  numAttentionHeads: number;
  numKvHeads: number;
  headDim: number;
  /** max_position_embeddings: the longest prompt + output the model accepts. */
  contextLength: number;
  rmsNormEps: number;
  ropeTheta: number;
  ropeScaling?: RopeScaling;
  tieWordEmbeddings: boolean;
  /** q/k/v projections carry biases (always for qwen2, else `attention_bias`). */
  qkvBias: boolean;
  /** Per-head RMSNorm on q and k before RoPE (qwen3). */
  qkNorm: boolean;
  /** torch_dtype / dtype as written, e.g. bfloat16. */
  torchDtype: string;
  bosTokenId?: number;
  eosTokenIds: number[];
  /** Present for mixtures of experts. */
  moe?: MoeShape;
}

export async function readModelConfig(modelDir: string): Promise<ModelConfig> {
  const config = await readJson(join(modelDir, 'config.json'), true);
  const generation = await readJson(join(modelDir, 'generation_config.json'), false);
  return parseModelConfig(config!, generation);
}

export function parseModelConfig(config: Record<string, unknown>, generation?: Record<string, unknown>): ModelConfig {
  const int = (key: string, fallback?: number): number => {
    const v = config[key] ?? fallback;
    if (typeof v !== 'number' || !Number.isInteger(v) || v <= 0) throw new ModelFormatError(`config.json: '${key}' must be a positive integer, got ${JSON.stringify(v)}`);
    return v;
  };
  const num = (key: string, fallback: number): number => {
    const v = config[key] ?? fallback;
    if (typeof v !== 'number' || !Number.isFinite(v)) throw new ModelFormatError(`config.json: '${key}' must be a number`);
    return v;
  };
  const modelType = String(config.model_type ?? '');
  if (!modelType) throw new ModelFormatError("config.json: missing 'model_type'");
  const archs = config.architectures;
  const architecture = Array.isArray(archs) && typeof archs[0] === 'string' ? archs[0] : modelType;
  const numAttentionHeads = int('num_attention_heads');
  const hiddenSize = int('hidden_size');
  const headDim = config.head_dim == null ? hiddenSize / numAttentionHeads : int('head_dim');
  if (!Number.isInteger(headDim)) throw new ModelFormatError('config.json: hidden_size is not a multiple of num_attention_heads');
  const numKvHeads = int('num_key_value_heads', numAttentionHeads);
  if (numAttentionHeads % numKvHeads !== 0) throw new ModelFormatError('config.json: num_attention_heads is not a multiple of num_key_value_heads');

  const eos = new Set<number>([...tokenIds(config.eos_token_id), ...tokenIds(generation?.eos_token_id)]);
  const bos = tokenIds(config.bos_token_id ?? generation?.bos_token_id)[0];
  const result: ModelConfig = {
    architecture,
    modelType,
    vocabSize: int('vocab_size'),
    hiddenSize,
    intermediateSize: int('intermediate_size'),
    numLayers: int('num_hidden_layers'),
    numAttentionHeads,
    numKvHeads,
    headDim,
    contextLength: int('max_position_embeddings'),
    rmsNormEps: num('rms_norm_eps', 1e-6),
    ropeTheta: num('rope_theta', 10000),
    tieWordEmbeddings: config.tie_word_embeddings === true,
    qkvBias: modelType === 'qwen2' || modelType === 'qwen2_moe' || config.attention_bias === true,
    qkNorm: modelType === 'qwen3' || modelType === 'qwen3_moe',
    torchDtype: String(config.torch_dtype ?? config.dtype ?? 'float32'),
    eosTokenIds: [...eos],
  };
  if (bos !== undefined) result.bosTokenId = bos;
  const scaling = parseRopeScaling(config.rope_scaling);
  if (scaling) result.ropeScaling = scaling;
  const moe = parseMoe(config, result.numLayers, result.intermediateSize);
  if (moe) result.moe = moe;
  return result;
}

/** The MoE fields as transformers reads them (the native loader validates them in full: native/src/core/moe_config.cc). */
function parseMoe(config: Record<string, unknown>, numLayers: number, intermediateSize: number): MoeShape | undefined {
  const n = (v: unknown): number => (typeof v === 'number' && Number.isInteger(v) && v > 0 ? v : 0);
  const mixtral = n(config.num_local_experts);
  const numExperts = mixtral || n(config.num_experts);
  const topK = n(config.num_experts_per_tok);
  if (numExperts === 0 || topK === 0) return undefined;
  const step = n(config.decoder_sparse_step) || 1;
  const only = Array.isArray(config.mlp_only_layers) ? new Set(config.mlp_only_layers) : new Set();
  let numMoeLayers = 0;
  for (let l = 0; l < numLayers; l++) if (mixtral > 0 || (!only.has(l) && (l + 1) % step === 0)) numMoeLayers++;
  return {
    numExperts,
    topK,
    expertIntermediateSize: mixtral > 0 ? intermediateSize : n(config.moe_intermediate_size),
    sharedIntermediateSize: n(config.shared_expert_intermediate_size),
    numMoeLayers,
  };
}

/**
 * Parameters of the model, and those one token's forward pass reads (attention, embeddings,
 * dense MLPs, each MoE layer's router, top-k experts and any shared expert): what the perf
 * model charges per decoded token.
 */
export function parameterCounts(c: ModelConfig): { total: number; active: number; experts?: { count: number; topK: number } } {
  const h = c.hiddenSize;
  const q = c.numAttentionHeads * c.headDim;
  const kv = c.numKvHeads * c.headDim;
  const attention = h * (q + 2 * kv) + q * h + 2 * h;
  const embeddings = c.vocabSize * h * (c.tieWordEmbeddings ? 1 : 2) + h;
  const dense = 3 * h * c.intermediateSize;
  const m = c.moe;
  const moeLayers = m?.numMoeLayers ?? 0;
  const denseLayers = c.numLayers - moeLayers;
  const base = embeddings + c.numLayers * attention + denseLayers * dense;
  if (m === undefined) return { total: base, active: base };
  const expert = 3 * h * m.expertIntermediateSize;
  const shared = m.sharedIntermediateSize > 0 ? 3 * h * m.sharedIntermediateSize + h : 0;
  const router = m.numExperts * h;
  return {
    total: base + moeLayers * (router + m.numExperts * expert + shared),
    active: base + moeLayers * (router + m.topK * expert + shared),
    // How many experts a decode batch touches depends on these (perf-model/active-params.ts).
    experts: { count: m.numExperts, topK: m.topK },
  };
}

/** Bytes of KV cache per token over all layers, K and V. */
export function kvBytesPerToken(config: ModelConfig, bytesPerElement: number): number {
  return 2 * config.numLayers * config.numKvHeads * config.headDim * bytesPerElement;
}

function parseRopeScaling(raw: unknown): RopeScaling | undefined {
  if (raw === null || typeof raw !== 'object') return undefined;
  const r = raw as Record<string, unknown>;
  const ropeType = String(r.rope_type ?? r.type ?? 'default');
  const out: RopeScaling = { ropeType };
  if (typeof r.factor === 'number') out.factor = r.factor;
  if (typeof r.low_freq_factor === 'number') out.lowFreqFactor = r.low_freq_factor;
  if (typeof r.high_freq_factor === 'number') out.highFreqFactor = r.high_freq_factor;
  if (typeof r.original_max_position_embeddings === 'number') out.originalMaxPositionEmbeddings = r.original_max_position_embeddings;
  return out;
}

function tokenIds(raw: unknown): number[] {
  if (typeof raw === 'number' && Number.isInteger(raw)) return [raw];
  if (Array.isArray(raw)) return raw.filter((v): v is number => typeof v === 'number' && Number.isInteger(v));
  return [];
}

async function readJson(path: string, required: boolean): Promise<Record<string, unknown> | undefined> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (cause) {
    const missing = (cause as NodeJS.ErrnoException).code === 'ENOENT';
    if (!required && missing) return undefined;
    if (missing) throw new ModelFormatError(`no ${basename(path)} in ${dirname(path)}: --model must be a Hugging Face model directory`, { cause });
    throw new ModelFormatError(`cannot read ${path}`, { cause });
  }
  try {
    const value = JSON.parse(text) as unknown;
    if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new Error('not a JSON object');
    return value as Record<string, unknown>;
  } catch (cause) {
    throw new ModelFormatError(`${path} is not a valid JSON object`, { cause });
  }
}
