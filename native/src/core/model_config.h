// ModelConfig: the validated subset of a Hugging Face config.json this runner supports
// (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, and the mixtures of
// experts MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM: moe_config.h). Anything we
// cannot compute faithfully is refused at load with an error naming the config field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moe_config.h"
#include "quant_config.h"

namespace tandem {

class Json;

enum class Arch { kLlama, kMistral, kQwen2, kQwen3, kMixtral, kQwen2Moe, kQwen3Moe };

struct RopeScaling {
  bool llama3 = false;  // false: plain RoPE (or YaRN below)
  bool yarn = false;    // rope_type "yarn": blended frequencies and a cos/sin scale (rope_attention_scale)
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position_embeddings = 8192;
  // YaRN (transformers' _compute_yarn_parameters): the correction range between beta_fast and
  // beta_slow rotations, and the attention factor (given, or from factor / mscale / mscale_all_dim).
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double attention_factor = 1.0;
  bool truncate = true;
};

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string architecture;  // as written in config.json
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;     // Qwen2 always; Llama/Mistral/Qwen3 with attention_bias
  bool o_bias = false;       // Llama/Qwen3 attention_bias biases o_proj too
  bool qk_norm = false;      // Qwen3 per-head RMSNorm on q and k
  RopeScaling rope_scaling;
  MoeConfig moe;  // num_experts 0: every MLP is dense
  std::vector<int64_t> eos_token_ids;
  QuantConfig quant;  // quantization_config (FP8 checkpoints); quant_config.h

  int64_t q_dim() const { return num_heads * head_dim; }
  int64_t kv_dim() const { return num_kv_heads * head_dim; }

  /** Parses and validates; throws NativeError(config_invalid) naming the offending field. */
  static ModelConfig from_json(const Json& root, const std::string& source_name);
  /** Reads `<dir>/config.json`; a missing file is NativeError(not_found). */
  static ModelConfig load(const std::string& model_dir);
};

/** Per-pair RoPE inverse frequencies (head_dim / 2), llama3 or YaRN scaling applied, as HF computes them in f32. */
std::vector<float> rope_inv_freq(const ModelConfig& config);

/** What cos and sin are multiplied by (YaRN's attention factor; 1 otherwise), as HF's attention_scaling. */
float rope_attention_scale(const ModelConfig& config);

}  // namespace tandem
