/**
 * Shapes of the tiny models: the config.json each architecture's Hugging Face class reads, and
 * the exact tensor names and shapes its state dict has. Values are small but chosen so every
 * code path a real checkpoint takes is exercised: GQA (4 query heads over 2 KV heads), Llama 3
 * rope scaling with frequencies in all three bands, untied lm_head (llama) and tied embeddings
 * (qwen), q/k/v biases (qwen2), per-head q/k RMSNorm and head_dim != hidden/heads (qwen3).
 */
import type { TinyArch } from './tiny-tokenizer.js';
import { WEIGHT_DTYPE_INFO, type WeightDtype } from './dtype.js';

export interface TinyDims {
  hiddenSize: number;
  intermediateSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  maxPositionEmbeddings: number;
}

export const TINY_DIMS: Readonly<Record<TinyArch, TinyDims>> = {
  llama: { hiddenSize: 64, intermediateSize: 128, numLayers: 2, numHeads: 4, numKvHeads: 2, headDim: 16, maxPositionEmbeddings: 2048 },
  qwen2: { hiddenSize: 64, intermediateSize: 128, numLayers: 2, numHeads: 4, numKvHeads: 2, headDim: 16, maxPositionEmbeddings: 2048 },
  // Real Qwen3 checkpoints decouple head_dim from hidden_size / heads (0.6B: 1024 / 16 heads, head_dim 128).
  qwen3: { hiddenSize: 64, intermediateSize: 128, numLayers: 2, numHeads: 4, numKvHeads: 2, headDim: 32, maxPositionEmbeddings: 2048 },
};

const ARCH_CLASS: Record<TinyArch, string> = {
  llama: 'LlamaForCausalLM',
  qwen2: 'Qwen2ForCausalLM',
  qwen3: 'Qwen3ForCausalLM',
};

export interface TokenIds {
  vocabSize: number;
  bosTokenId: number;
  eosTokenIds: number[];
}

export function buildConfigJson(arch: TinyArch, dtype: WeightDtype, ids: TokenIds): Record<string, unknown> {
  const d = TINY_DIMS[arch];
  const common = {
    architectures: [ARCH_CLASS[arch]],
    attention_dropout: 0.0,
    bos_token_id: ids.bosTokenId,
    eos_token_id: ids.eosTokenIds.length === 1 ? ids.eosTokenIds[0] : ids.eosTokenIds,
    head_dim: d.headDim,
    hidden_act: 'silu',
    hidden_size: d.hiddenSize,
    initializer_range: 0.02,
    intermediate_size: d.intermediateSize,
    max_position_embeddings: d.maxPositionEmbeddings,
    model_type: arch,
    num_attention_heads: d.numHeads,
    num_hidden_layers: d.numLayers,
    num_key_value_heads: d.numKvHeads,
  };
  const tail = {
    torch_dtype: WEIGHT_DTYPE_INFO[dtype].torch,
    transformers_version: '4.51.0',
    use_cache: true,
    vocab_size: ids.vocabSize,
  };
  if (arch === 'llama') {
    return {
      ...common,
      attention_bias: false,
      mlp_bias: false,
      pretraining_tp: 1,
      rms_norm_eps: 1e-5,
      // head_dim 16 at theta 5e5 has wavelengths 6..6e5: some under 8192/4 (kept), one between
      // 8192/4 and 8192 (smoothed), the rest above 8192 (divided by factor).
      rope_scaling: { factor: 8.0, high_freq_factor: 4.0, low_freq_factor: 1.0, original_max_position_embeddings: 8192, rope_type: 'llama3' },
      rope_theta: 500000.0,
      tie_word_embeddings: false,
      ...tail,
    };
  }
  return {
    ...common,
    ...(arch === 'qwen3' ? { attention_bias: false } : {}),
    max_window_layers: d.numLayers,
    rms_norm_eps: 1e-6,
    rope_scaling: null,
    rope_theta: 1000000.0,
    sliding_window: null,
    tie_word_embeddings: true,
    use_sliding_window: false,
    ...tail,
  };
}

/** How a tensor's values are drawn. */
export type TensorInit = { kind: 'normal'; std: number } | { kind: 'norm' };

export interface TensorSpec {
  name: string;
  shape: number[];
  init: TensorInit;
}

/**
 * Embedding scale: with tied embeddings logits are h . E^T with |h| ~ sqrt(hidden) after the
 * final norm, so std 0.4 gives logit spread ~3 — peaked enough that greedy choices are not
 * decided by rounding, unlike the usual 0.02 init.
 */
const EMBED_STD = 0.4;
const BIAS_STD = 0.1;

/**
 * Linear layers use gain/sqrt(fan_in). Inputs to q/k/v/gate/up are RMS-normalized, so gain 1
 * keeps unit scale. The residual-branch outputs (o_proj, down_proj) get larger gains: with
 * tied embeddings the residual stream starts as the input token's own embedding, and unless
 * the layers outweigh it greedy decoding just repeats the input token. With these gains greedy
 * runs of 24 tokens have ~20 distinct tokens and mean next-token entropy ~2.8 nats (of 6.2);
 * measured with a NumPy forward pass over the generated files.
 */
const O_PROJ_GAIN = 3;
const DOWN_PROJ_GAIN = 6;

function linear(name: string, outFeatures: number, inFeatures: number, gain = 1): TensorSpec {
  return { name, shape: [outFeatures, inFeatures], init: { kind: 'normal', std: gain / Math.sqrt(inFeatures) } };
}

/** The state dict in the order weights are drawn from the PRNG (the file itself is name-sorted). */
export function tensorSpecs(arch: TinyArch, vocabSize: number): TensorSpec[] {
  const d = TINY_DIMS[arch];
  const qDim = d.numHeads * d.headDim;
  const kvDim = d.numKvHeads * d.headDim;
  const specs: TensorSpec[] = [{ name: 'model.embed_tokens.weight', shape: [vocabSize, d.hiddenSize], init: { kind: 'normal', std: EMBED_STD } }];
  for (let l = 0; l < d.numLayers; l++) {
    const p = `model.layers.${l}`;
    specs.push({ name: `${p}.input_layernorm.weight`, shape: [d.hiddenSize], init: { kind: 'norm' } });
    specs.push(linear(`${p}.self_attn.q_proj.weight`, qDim, d.hiddenSize));
    specs.push(linear(`${p}.self_attn.k_proj.weight`, kvDim, d.hiddenSize));
    specs.push(linear(`${p}.self_attn.v_proj.weight`, kvDim, d.hiddenSize));
    if (arch === 'qwen2') {
      specs.push({ name: `${p}.self_attn.q_proj.bias`, shape: [qDim], init: { kind: 'normal', std: BIAS_STD } });
      specs.push({ name: `${p}.self_attn.k_proj.bias`, shape: [kvDim], init: { kind: 'normal', std: BIAS_STD } });
      specs.push({ name: `${p}.self_attn.v_proj.bias`, shape: [kvDim], init: { kind: 'normal', std: BIAS_STD } });
    }
    if (arch === 'qwen3') {
      specs.push({ name: `${p}.self_attn.q_norm.weight`, shape: [d.headDim], init: { kind: 'norm' } });
      specs.push({ name: `${p}.self_attn.k_norm.weight`, shape: [d.headDim], init: { kind: 'norm' } });
    }
    specs.push(linear(`${p}.self_attn.o_proj.weight`, d.hiddenSize, qDim, O_PROJ_GAIN));
    specs.push({ name: `${p}.post_attention_layernorm.weight`, shape: [d.hiddenSize], init: { kind: 'norm' } });
    specs.push(linear(`${p}.mlp.gate_proj.weight`, d.intermediateSize, d.hiddenSize));
    specs.push(linear(`${p}.mlp.up_proj.weight`, d.intermediateSize, d.hiddenSize));
    specs.push(linear(`${p}.mlp.down_proj.weight`, d.hiddenSize, d.intermediateSize, DOWN_PROJ_GAIN));
  }
  specs.push({ name: 'model.norm.weight', shape: [d.hiddenSize], init: { kind: 'norm' } });
  if (arch === 'llama') specs.push({ name: 'lm_head.weight', shape: [vocabSize, d.hiddenSize], init: { kind: 'normal', std: EMBED_STD } });
  return specs;
}
