// ModelConfig: the validated subset of a Hugging Face config.json this runner supports
// (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM). Anything we
// cannot compute faithfully is refused at load with an error naming the config field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "quant_config.h"

namespace tandem {

class Json;

enum class Arch { kLlama, kMistral, kQwen2, kQwen3 };

struct RopeScaling {
  bool llama3 = false;  // false: plain RoPE
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position_embeddings = 8192;
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
  std::vector<int64_t> eos_token_ids;
  QuantConfig quant;  // quantization_config (FP8 checkpoints); quant_config.h

  int64_t q_dim() const { return num_heads * head_dim; }
  int64_t kv_dim() const { return num_kv_heads * head_dim; }

  /** Parses and validates; throws NativeError(config_invalid) naming the offending field. */
  static ModelConfig from_json(const Json& root, const std::string& source_name);
  /** Reads `<dir>/config.json`; a missing file is NativeError(not_found). */
  static ModelConfig load(const std::string& model_dir);
};

/** Per-pair RoPE inverse frequencies (head_dim / 2), llama3 scaling applied, as HF computes them in f32. */
std::vector<float> rope_inv_freq(const ModelConfig& config);

}  // namespace tandem
