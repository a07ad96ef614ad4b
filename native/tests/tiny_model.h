// The tiny random models of the engine checks: a TinySpec (dense Llama/Qwen shapes, or a mixture
// of experts) written as config.json + model.safetensors, with optional values by tensor name.
// Included inside engine_test.cc's namespace after its includes and device().
#pragma once

struct TinySpec {
  std::string arch = "LlamaForCausalLM";
  int vocab = 97, hidden = 32, inter = 64, layers = 2, heads = 4, kv_heads = 2, head_dim = 8;
  bool tie = false, qk_norm = false, qkv_bias = false;
  bool zero_layers = false;  // every decoder-layer tensor 0: the residual stream stays the token embeddings
  bool bf16_exact = false;   // every value rounded to bf16, so a bf16 backend holds the weights exactly
  std::string extra_config;  // appended JSON members
  // Mixture of experts (MoE architectures; the config fields go in extra_config): every layer
  // sparse but dense_layer; Mixtral's tensor names when mixtral; a Qwen2-MoE shared expert when shared > 0.
  int experts = 0, expert_inter = 0, shared = 0, dense_layer = -1;
  bool mixtral = false;
};

/** Tensor values written by hand (by name), instead of random ones. */
using ValueOverride = std::map<std::string, std::function<float(size_t)>>;

void write_tiny_model(const std::string& dir, const TinySpec& s, uint32_t seed,
                      const std::map<std::string, std::vector<int64_t>>& shape_override = {},
                      const ValueOverride& values = {}) {
  ::mkdir(dir.c_str(), 0755);
  std::ofstream cfg(dir + "/config.json");
  cfg << "{\"architectures\":[\"" << s.arch << "\"],\"vocab_size\":" << s.vocab << ",\"hidden_size\":" << s.hidden
      << ",\"intermediate_size\":" << s.inter << ",\"num_hidden_layers\":" << s.layers
      << ",\"num_attention_heads\":" << s.heads << ",\"num_key_value_heads\":" << s.kv_heads
      << ",\"head_dim\":" << s.head_dim << ",\"rms_norm_eps\":1e-5,\"rope_theta\":10000.0"
      << ",\"max_position_embeddings\":512,\"tie_word_embeddings\":" << (s.tie ? "true" : "false")
      << ",\"hidden_act\":\"silu\",\"eos_token_id\":2" << s.extra_config << "}";
  cfg.close();

  std::vector<std::pair<std::string, std::vector<int64_t>>> specs;
  auto add = [&](const std::string& n, std::vector<int64_t> shape) {
    auto it = shape_override.find(n);
    specs.emplace_back(n, it == shape_override.end() ? shape : it->second);
  };
  const int64_t q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  add("model.embed_tokens.weight", {s.vocab, s.hidden});
  add("model.norm.weight", {s.hidden});
  if (!s.tie) add("lm_head.weight", {s.vocab, s.hidden});
  for (int l = 0; l < s.layers; ++l) {
    auto p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {s.hidden});
    add(p + "post_attention_layernorm.weight", {s.hidden});
    add(p + "self_attn.q_proj.weight", {q, s.hidden});
    add(p + "self_attn.k_proj.weight", {kv, s.hidden});
    add(p + "self_attn.v_proj.weight", {kv, s.hidden});
    add(p + "self_attn.o_proj.weight", {s.hidden, q});
    if (s.qkv_bias) {
      add(p + "self_attn.q_proj.bias", {q});
      add(p + "self_attn.k_proj.bias", {kv});
      add(p + "self_attn.v_proj.bias", {kv});
    }
    if (s.qk_norm) {
      add(p + "self_attn.q_norm.weight", {s.head_dim});
      add(p + "self_attn.k_norm.weight", {s.head_dim});
    }
    if (s.experts > 0 && l != s.dense_layer) {
      const std::string block = p + (s.mixtral ? "block_sparse_moe." : "mlp.");
      add(block + "gate.weight", {s.experts, s.hidden});
      for (int e = 0; e < s.experts; ++e) {
        const std::string x = block + "experts." + std::to_string(e) + ".";
        add(x + (s.mixtral ? "w1.weight" : "gate_proj.weight"), {s.expert_inter, s.hidden});
        add(x + (s.mixtral ? "w3.weight" : "up_proj.weight"), {s.expert_inter, s.hidden});
        add(x + (s.mixtral ? "w2.weight" : "down_proj.weight"), {s.hidden, s.expert_inter});
      }
      if (s.shared > 0) {
        add(block + "shared_expert.gate_proj.weight", {s.shared, s.hidden});
        add(block + "shared_expert.up_proj.weight", {s.shared, s.hidden});
        add(block + "shared_expert.down_proj.weight", {s.hidden, s.shared});
        add(block + "shared_expert_gate.weight", {1, s.hidden});
      }
      continue;
    }
    add(p + "mlp.gate_proj.weight", {s.inter, s.hidden});
    add(p + "mlp.up_proj.weight", {s.inter, s.hidden});
    add(p + "mlp.down_proj.weight", {s.hidden, s.inter});
  }
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::string header = "{";
  std::vector<float> data;
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& [name, shape] = specs[i];
    size_t n = 1;
    for (auto d : shape) n *= static_cast<size_t>(d);
    const bool is_norm = name.find("norm") != std::string::npos;
    const float stdv = name.find("embed") != std::string::npos || name.find("lm_head") != std::string::npos
                           ? 0.5f
                           : 1.0f / std::sqrt(static_cast<float>(shape.back()));
    size_t begin = data.size() * 4;
    const bool zero = s.zero_layers && name.rfind("model.layers.", 0) == 0;
    auto fixed = values.find(name);
    for (size_t j = 0; j < n; ++j) {
      float v = is_norm ? 1.0f + 0.1f * normal(rng) : stdv * normal(rng);  // drawn either way: same stream
      if (zero) v = 0.0f;
      if (fixed != values.end()) v = fixed->second(j);
      if (s.bf16_exact) v = tandem::gpu::bf16_bits_to_float(tandem::gpu::float_to_bf16_bits(v));
      data.push_back(v);
    }
    header += (i ? "," : "") + std::string("\"") + name + "\":{\"dtype\":\"F32\",\"shape\":[";
    for (size_t d = 0; d < shape.size(); ++d) header += (d ? "," : "") + std::to_string(shape[d]);
    header += "],\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(data.size() * 4) + "]}";
  }
  header += "}";
  std::ofstream st(dir + "/model.safetensors", std::ios::binary);
  uint64_t len = header.size();
  st.write(reinterpret_cast<const char*>(&len), 8);
  st.write(header.data(), static_cast<std::streamsize>(header.size()));
  st.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * 4));
}
