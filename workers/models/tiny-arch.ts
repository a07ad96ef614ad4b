/**
 * Shapes of the tiny models: the config.json each architecture's Hugging Face class reads, and
 * the exact tensor names and shapes its state dict has. Values are small but chosen so every
 * code path a real checkpoint takes is exercised: GQA (4 query heads over 2 KV heads), Llama 3
 * rope scaling with frequencies in all three bands, untied lm_head (llama) and tied embeddings
 * (qwen), q/k/v biases (qwen2), per-head q/k RMSNorm and head_dim != hidden/heads (qwen3).
 * The mixtures of experts write the published per-expert tensor layout: Qwen3-MoE with a dense
 * layer among sparse ones (mlp_only_layers), Mixtral's block_sparse_moe.experts.N.w1/w3/w2, and
 * Qwen2-MoE's shared expert with its sigmoid gate.
 */
import type { TinyArch } from './tiny-tokenizer.js';
import { WEIGHT_DTYPE_INFO, type WeightDtype } from './dtype.js';

/** A tiny mixture of experts: every layer sparse but those in mlpOnlyLayers. */
export interface TinyMoeDims {
  numExperts: number;
  topK: number;
  expertIntermediateSize: number;
  normTopkProb: boolean;
  /** Qwen2-MoE: the shared expert's width. */
  sharedIntermediateSize?: number;
  /** Qwen-MoE: layers whose MLP stays dense (intermediateSize). */
  mlpOnlyLayers?: number[];
}

export interface TinyDims {
  hiddenSize: number;
  intermediateSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  maxPositionEmbeddings: number;
  moe?: TinyMoeDims;
}

export const TINY_DIMS: Readonly<Record<TinyArch, TinyDims>> = {
  llama: { hiddenSize: 64, intermediateSize: 128, numLayers: 2, numHeads: 4, numKvHeads: 2, headDim: 16, maxPositionEmbeddings: 2048 },
  qwen2: { hiddenSize: 64, intermediateSize: 128, numLayers: 2, numHeads: 4, numKvHeads: 2, headDim: 16, maxPositionEmbeddings: 2048 },
  // Real Qwen3 checkpoints decouple head_dim from hidden_size / heads (0.6B: 1024 / 16 heads, head_dim 128).
  qwen3: { hiddenSize: 64, intermediateSize: 128, numLayers: 2, numHeads: 4, numKvHeads: 2, headDim: 32, maxPositionEmbeddings: 2048 },
  // Layer 1 dense between two sparse layers; 8 experts, top-2 renormalized (Qwen3-30B-A3B: 128, top-8).
  qwen3_moe: {
    hiddenSize: 64, intermediateSize: 128, numLayers: 3, numHeads: 4, numKvHeads: 2, headDim: 32, maxPositionEmbeddings: 2048,
    moe: { numExperts: 8, topK: 2, expertIntermediateSize: 32, normTopkProb: true, mlpOnlyLayers: [1] },
  },
  // Mixtral: 4 experts, top-2, the expert width is intermediate_size.
  mixtral: {
    hiddenSize: 64, intermediateSize: 64, numLayers: 2, numHeads: 4, numKvHeads: 2, headDim: 16, maxPositionEmbeddings: 2048,
    moe: { numExperts: 4, topK: 2, expertIntermediateSize: 64, normTopkProb: true },
  },
  // Qwen2-MoE: 8 experts, top-4 not renormalized, plus a shared expert (Qwen1.5-MoE-A2.7B: 60, top-4, shared 5632).
  qwen2_moe: {
    hiddenSize: 64, intermediateSize: 128, numLayers: 2, numHeads: 4, numKvHeads: 2, headDim: 16, maxPositionEmbeddings: 2048,
    moe: { numExperts: 8, topK: 4, expertIntermediateSize: 32, normTopkProb: false, sharedIntermediateSize: 64 },
  },
};

/**
 * YaRN for a tiny model (`make-tiny --rope-scaling yarn`): factor 4 over an original 512
 * positions, and max_position_embeddings = 4 x 512 so every transformers release reads the same
 * factor. With head_dim 32 and theta 1e6 the ramp spans pairs 1..6: some frequencies kept, some
 * blended, the rest divided by 4; the attention factor is 0.1 ln 4 + 1.
 */
export const TINY_YARN = { rope_type: 'yarn', factor: 4.0, original_max_position_embeddings: 512, beta_fast: 32, beta_slow: 1 } as const;

const ARCH_CLASS: Record<TinyArch, string> = {
  llama: 'LlamaForCausalLM',
  qwen2: 'Qwen2ForCausalLM',
  qwen3: 'Qwen3ForCausalLM',
  qwen3_moe: 'Qwen3MoeForCausalLM',
  mixtral: 'MixtralForCausalLM',
  qwen2_moe: 'Qwen2MoeForCausalLM',
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
  const moe = d.moe;
  if (arch === 'mixtral' && moe) {
    return {
      ...common,
      num_experts_per_tok: moe.topK,
      num_local_experts: moe.numExperts,
      output_router_logits: false,
      rms_norm_eps: 1e-5,
      rope_theta: 1000000.0,
      router_aux_loss_coef: 0.02,
      router_jitter_noise: 0.0,
      sliding_window: null,
      tie_word_embeddings: false,
      ...tail,
    };
  }
  const qwenMoe = moe
    ? {
        decoder_sparse_step: 1,
        mlp_only_layers: moe.mlpOnlyLayers ?? [],
        moe_intermediate_size: moe.expertIntermediateSize,
        norm_topk_prob: moe.normTopkProb,
        num_experts: moe.numExperts,
        num_experts_per_tok: moe.topK,
        output_router_logits: false,
        router_aux_loss_coef: 0.001,
        ...(moe.sharedIntermediateSize !== undefined ? { shared_expert_intermediate_size: moe.sharedIntermediateSize } : {}),
      }
    : {};
  return {
    ...common,
    ...(arch === 'qwen3' || arch === 'qwen3_moe' ? { attention_bias: false } : {}),
    ...qwenMoe,
    max_window_layers: d.numLayers,
    rms_norm_eps: 1e-6,
    rope_scaling: null,
    rope_theta: 1000000.0,
    sliding_window: null,
    // Qwen1.5-MoE unties its lm_head; the dense Qwens and Qwen3-MoE's small tiny stand-in tie.
    tie_word_embeddings: arch !== 'qwen2_moe',
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
    if (arch === 'qwen2' || arch === 'qwen2_moe') {
      specs.push({ name: `${p}.self_attn.q_proj.bias`, shape: [qDim], init: { kind: 'normal', std: BIAS_STD } });
      specs.push({ name: `${p}.self_attn.k_proj.bias`, shape: [kvDim], init: { kind: 'normal', std: BIAS_STD } });
      specs.push({ name: `${p}.self_attn.v_proj.bias`, shape: [kvDim], init: { kind: 'normal', std: BIAS_STD } });
    }
    if (arch === 'qwen3' || arch === 'qwen3_moe') {
      specs.push({ name: `${p}.self_attn.q_norm.weight`, shape: [d.headDim], init: { kind: 'norm' } });
      specs.push({ name: `${p}.self_attn.k_norm.weight`, shape: [d.headDim], init: { kind: 'norm' } });
    }
    specs.push(linear(`${p}.self_attn.o_proj.weight`, d.hiddenSize, qDim, O_PROJ_GAIN));
    specs.push({ name: `${p}.post_attention_layernorm.weight`, shape: [d.hiddenSize], init: { kind: 'norm' } });
    if (d.moe !== undefined && !(d.moe.mlpOnlyLayers ?? []).includes(l)) specs.push(...moeSpecs(arch, p, d.hiddenSize, d.moe));
    else specs.push(...mlpSpecs(`${p}.mlp`, d.hiddenSize, d.intermediateSize));
  }
  specs.push({ name: 'model.norm.weight', shape: [d.hiddenSize], init: { kind: 'norm' } });
  if (arch === 'llama' || arch === 'mixtral' || arch === 'qwen2_moe') specs.push({ name: 'lm_head.weight', shape: [vocabSize, d.hiddenSize], init: { kind: 'normal', std: EMBED_STD } });
  return specs;
}

function mlpSpecs(prefix: string, hidden: number, inter: number, names = ['gate_proj', 'up_proj', 'down_proj']): TensorSpec[] {
  return [
    linear(`${prefix}.${names[0]}.weight`, inter, hidden),
    linear(`${prefix}.${names[1]}.weight`, inter, hidden),
    linear(`${prefix}.${names[2]}.weight`, hidden, inter, DOWN_PROJ_GAIN),
  ];
}

/** One sparse layer in transformers' module order: router, experts 0..N-1, then the shared expert and its gate. */
function moeSpecs(arch: TinyArch, layerPrefix: string, hidden: number, moe: TinyMoeDims): TensorSpec[] {
  const mixtral = arch === 'mixtral';
  const block = `${layerPrefix}.${mixtral ? 'block_sparse_moe' : 'mlp'}`;
  const specs = [linear(`${block}.gate.weight`, moe.numExperts, hidden)];
  for (let e = 0; e < moe.numExperts; e++) {
    specs.push(...mlpSpecs(`${block}.experts.${e}`, hidden, moe.expertIntermediateSize, mixtral ? ['w1', 'w3', 'w2'] : undefined));
  }
  if (moe.sharedIntermediateSize !== undefined) {
    specs.push(...mlpSpecs(`${block}.shared_expert`, hidden, moe.sharedIntermediateSize));
    specs.push(linear(`${block}.shared_expert_gate.weight`, 1, hidden));
  }
  return specs;
}
