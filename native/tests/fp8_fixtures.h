// The FP8 suite's fixtures: FP8 checkpoints of every accepted format written from one random f32
// model (with the same model dequantized to f32 beside it), engines over them, their logits and
// the bounds the checks hold them to. Used by fp8_checks.h.
#pragma once

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "../src/core/engine.h"
#include "../src/core/error.h"
#include "../src/core/fp8_weights.h"
#include "../src/core/thread_pool.h"
#include "../src/cpu/gemm.h"
#include "../src/cpu/weight_matrix.h"
#include "../src/cuda/fp8.h"
#include "../src/cuda/gpu_backend.h"
#include "check.h"

namespace tandem_test {

/** e4m3 code -> value, from the spec's definition (independent of fp8.h's bit manipulation). */
inline double ocp_e4m3_value(uint8_t b) {
  const int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}

// ---- checkpoints ----------------------------------------------------------------------------

/** A safetensors file built in memory: tensors in insertion order. */
struct StWriter {
  std::string header = "{";
  std::vector<uint8_t> data;
  void add(const std::string& name, const char* dtype, const std::vector<int64_t>& shape, const void* bytes, size_t n) {
    const size_t begin = data.size();
    data.insert(data.end(), static_cast<const uint8_t*>(bytes), static_cast<const uint8_t*>(bytes) + n);
    header += (header.size() > 1 ? "," : "") + std::string("\"") + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":[";
    for (size_t d = 0; d < shape.size(); ++d) header += (d ? "," : "") + std::to_string(shape[d]);
    header += "],\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(data.size()) + "]}";
  }
  void add_f32(const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& v) {
    add(name, "F32", shape, v.data(), v.size() * 4);
  }
  void write(const std::string& path) const {
    const std::string h = header + "}";
    std::ofstream st(path, std::ios::binary);
    const uint64_t len = h.size();
    st.write(reinterpret_cast<const char*>(&len), 8);
    st.write(h.data(), static_cast<std::streamsize>(h.size()));
    st.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  }
};

/** How the test writes one FP8 format. */
struct Fp8Format {
  const char* label;
  std::string quantization_config;  // the JSON object
  char weights;                      // 'b' block, 'c' channel, 't' tensor
  int64_t bn = 0, bk = 0;
  const char* scale_name = "weight_scale";
  bool input_scale = false;          // static activations: write input_scale
  std::string left_unquantized;      // one module kept in f32 (its ignore-list entry is in the config)
};

/** A tiny Llama-shaped model (hidden 48, so 16x24 blocks leave partial ones), f32. */
struct Fp8Tiny {
  int vocab = 61, hidden = 48, inter = 80, layers = 2, heads = 4, kv_heads = 2, head_dim = 12;
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> tensors;
  std::vector<std::string> linear;

  explicit Fp8Tiny(uint32_t seed, int head_dim_ = 12) : head_dim(head_dim_) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    auto add = [&](const std::string& name, std::vector<int64_t> shape, bool lin) {
      size_t n = 1;
      for (int64_t d : shape) n *= static_cast<size_t>(d);
      std::vector<float> v(n);
      const bool norm = name.find("norm") != std::string::npos;
      const float stdv = lin ? 1.0f / std::sqrt(static_cast<float>(shape.back())) : 0.5f;
      for (float& x : v) x = norm ? 1.0f + 0.1f * normal(rng) : stdv * normal(rng);
      tensors[name] = {shape, v};
      if (lin) linear.push_back(name);
    };
    const int64_t q = heads * head_dim, kv = kv_heads * head_dim;
    add("model.embed_tokens.weight", {vocab, hidden}, false);
    add("lm_head.weight", {vocab, hidden}, false);
    add("model.norm.weight", {hidden}, false);
    for (int l = 0; l < layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      add(p + "input_layernorm.weight", {hidden}, false);
      add(p + "post_attention_layernorm.weight", {hidden}, false);
      add(p + "self_attn.q_proj.weight", {q, hidden}, true);
      add(p + "self_attn.k_proj.weight", {kv, hidden}, true);
      add(p + "self_attn.v_proj.weight", {kv, hidden}, true);
      add(p + "self_attn.o_proj.weight", {hidden, q}, true);
      add(p + "mlp.gate_proj.weight", {inter, hidden}, true);
      add(p + "mlp.up_proj.weight", {inter, hidden}, true);
      add(p + "mlp.down_proj.weight", {hidden, inter}, true);
    }
  }

  std::string config(const std::string& quantization_config) const {
    std::string c = "{\"architectures\":[\"LlamaForCausalLM\"],\"vocab_size\":" + std::to_string(vocab) +
                    ",\"hidden_size\":" + std::to_string(hidden) + ",\"intermediate_size\":" + std::to_string(inter) +
                    ",\"num_hidden_layers\":" + std::to_string(layers) + ",\"num_attention_heads\":" + std::to_string(heads) +
                    ",\"num_key_value_heads\":" + std::to_string(kv_heads) + ",\"head_dim\":" + std::to_string(head_dim) +
                    ",\"rms_norm_eps\":1e-5,\"rope_theta\":10000.0,\"max_position_embeddings\":512,\"tie_word_embeddings\":false"
                    ",\"hidden_act\":\"silu\",\"eos_token_id\":2";
    if (!quantization_config.empty()) c += ",\"quantization_config\":" + quantization_config;
    return c + "}";
  }

  /**
   * Writes the FP8 checkpoint of `f` to dir and the same model dequantized to f32 to twin_dir
   * (both with `extra` tensors, e.g. KV scales).
   */
  void write(const Fp8Format& f, const std::string& dir, const std::string& twin_dir,
             const std::map<std::string, float>& extra = {}) const {
    ::mkdir(dir.c_str(), 0755);
    ::mkdir(twin_dir.c_str(), 0755);
    std::ofstream(dir + "/config.json") << config(f.quantization_config);
    std::ofstream(twin_dir + "/config.json") << config("");
    StWriter fp8, twin;
    for (const auto& [name, t] : tensors) {
      const auto& [shape, v] = t;
      const bool lin = std::find(linear.begin(), linear.end(), name) != linear.end();
      const std::string module = name.substr(0, name.size() - 7);
      if (!lin || module == f.left_unquantized) {
        fp8.add_f32(name, shape, v);
        twin.add_f32(name, shape, v);
        continue;
      }
      const int64_t rows = shape[0], cols = shape[1];
      const int64_t bn = f.weights == 'b' ? f.bn : f.weights == 'c' ? 1 : rows;
      const int64_t bk = f.weights == 'b' ? f.bk : cols;
      const int64_t rb = (rows + bn - 1) / bn, kb = (cols + bk - 1) / bk;
      std::vector<float> scales(static_cast<size_t>(rb * kb));
      for (int64_t i = 0; i < rb; ++i) {
        for (int64_t j = 0; j < kb; ++j) {
          float amax = 0;
          for (int64_t r = i * bn; r < std::min(rows, (i + 1) * bn); ++r) {
            for (int64_t c = j * bk; c < std::min(cols, (j + 1) * bk); ++c) amax = std::max(amax, std::fabs(v[static_cast<size_t>(r * cols + c)]));
          }
          scales[static_cast<size_t>(i * kb + j)] = amax / 448.0f;
        }
      }
      std::vector<uint8_t> q(v.size());
      std::vector<float> deq(v.size());
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          const float s = scales[static_cast<size_t>((r / bn) * kb + c / bk)];
          const size_t i = static_cast<size_t>(r * cols + c);
          q[i] = tandem::gpu::float_to_fp8_bits(v[i] / s);
          deq[i] = static_cast<float>(ocp_e4m3_value(q[i])) * s;
        }
      }
      fp8.add(name, "F8_E4M3", shape, q.data(), q.size());
      const std::vector<int64_t> sshape = f.weights == 'b' ? std::vector<int64_t>{rb, kb}
                                          : f.weights == 'c' ? std::vector<int64_t>{rows, 1}
                                                             : std::vector<int64_t>{};
      fp8.add_f32(module + "." + f.scale_name, sshape, scales);
      // A calibrated static scale covers the activations' range (|x| <= 16 here); smaller values round finer.
      if (f.input_scale) fp8.add_f32(module + ".input_scale", {1}, {16.0f / 448.0f});
      twin.add_f32(name, shape, deq);
    }
    for (const auto& [name, value] : extra) {
      fp8.add_f32(name, {}, {value});
      twin.add_f32(name, {}, {value});
    }
    fp8.write(dir + "/model.safetensors");
    twin.write(twin_dir + "/model.safetensors");
  }
};

inline std::unique_ptr<tandem::Engine> fp8_engine(const std::string& dir, const std::string& compute = "auto",
                                                  const std::string& quantization = "", const std::string& kv = "auto",
                                                  const std::string& device = "cpu") {
  tandem::EngineOptions o;
  o.model_dir = dir;
  o.backend.device = device;
  o.backend.max_batch_tokens = 64;
  o.backend.max_seqs = 4;
  o.backend.num_blocks = 32;
  o.backend.block_size = 4;
  o.backend.fp8_compute = compute;
  o.backend.quantization = quantization;
  o.backend.kv_cache_dtype = kv;
  o.threads = 2;
  return tandem::Engine::load(o);
}

/**
 * Logits of a 13-token prefill then three decode steps, concatenated. The decode steps feed fixed
 * tokens (not the sampled ones), so two models are compared on the same inputs even where their
 * greedy picks differ.
 */
inline std::vector<float> fp8_logits(tandem::Engine& e) {
  std::vector<float> out;
  std::vector<int32_t> tokens;
  for (int i = 0; i < 13; ++i) tokens.push_back((5 + 7 * i) % static_cast<int32_t>(e.config().vocab_size));
  int32_t pos = 0;
  for (int step = 0; step < 4; ++step) {
    tandem::StepInput in;
    tandem::SeqInput s;
    const std::vector<int32_t> now = step == 0 ? tokens : std::vector<int32_t>{tokens.back()};
    s.num_tokens = static_cast<int32_t>(now.size());
    s.start_pos = pos;
    s.num_blocks = 8;
    s.sample = true;
    s.sampling.temperature = 0;
    in.tokens = now;
    in.block_tables = {0, 1, 2, 3, 4, 5, 6, 7};
    in.seqs.push_back(s);
    in.return_logits = true;
    tandem::StepOutput r = e.step(in);
    out.insert(out.end(), r.logits.begin(), r.logits.end());
    pos += s.num_tokens;
    tokens.push_back((11 + 13 * step) % static_cast<int32_t>(e.config().vocab_size));
  }
  return out;
}

/** ||a - b|| / ||b||. */
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

inline double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 1e-6;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return worst / scale;
}

inline std::vector<Fp8Format> fp8_formats() {
  return {
      {"fp8-block", R"({"quant_method":"fp8","fmt":"e4m3","activation_scheme":"dynamic","weight_block_size":[16,24]})", 'b', 16, 24,
       "weight_scale_inv", false, ""},
      {"fp8-tensor-static", R"({"quant_method":"fp8","activation_scheme":"static","ignored_layers":["model.layers.1.mlp.down_proj"]})",
       't', 0, 0, "weight_scale", true, "model.layers.1.mlp.down_proj"},
      {"fp8-tensor-dynamic", R"({"quant_method":"fp8","activation_scheme":"dynamic"})", 't', 0, 0, "weight_scale", false, ""},
      {"ct-channel-token",
       R"({"quant_method":"compressed-tensors","format":"float-quantized","ignore":["lm_head"],"config_groups":{"group_0":{"targets":["Linear"],"weights":{"num_bits":8,"type":"float","strategy":"channel","dynamic":false,"symmetric":true},"input_activations":{"num_bits":8,"type":"float","strategy":"token","dynamic":true,"symmetric":true}}}})",
       'c', 0, 0, "weight_scale", false, ""},
      {"ct-tensor-static",
       R"({"quant_method":"compressed-tensors","format":"float-quantized","ignore":["lm_head","re:.*layers\\.0\\.mlp\\.up_proj$"],"config_groups":{"group_0":{"targets":["Linear"],"weights":{"num_bits":8,"type":"float","strategy":"tensor","dynamic":false},"input_activations":{"num_bits":8,"type":"float","strategy":"tensor","dynamic":false}}}})",
       't', 0, 0, "weight_scale", true, "model.layers.0.mlp.up_proj"},
      {"ct-channel-weight-only",
       R"({"quant_method":"compressed-tensors","format":"float-quantized","config_groups":{"group_0":{"targets":["Linear"],"weights":{"num_bits":8,"type":"float","strategy":"channel","dynamic":false},"input_activations":null}}})",
       'c', 0, 0, "weight_scale", false, ""},
      {"ct-block-group",
       R"({"quant_method":"compressed-tensors","config_groups":{"group_0":{"format":"float-quantized","targets":["Linear"],"weights":{"num_bits":8,"type":"float","strategy":"block","block_structure":[16,24],"dynamic":false},"input_activations":{"num_bits":8,"type":"float","strategy":"group","group_size":24,"dynamic":true}}}})",
       'b', 16, 24, "weight_scale", false, ""},
      {"fbgemm", R"({"quant_method":"fbgemm_fp8","activation_scale_ub":16.0,"modules_to_not_convert":["lm_head","model.layers.1.self_attn"]})",
       'c', 0, 0, "weight_scale", false, "model.layers.1.self_attn.o_proj"},
  };
}

// Logits relative L2 of W8A8 (activations rounded to e4m3 too: 3 mantissa bits, up to 6.25%
// relative error per value, ~3.6% RMS) against the dequantized model: measured 4-7% on these
// 2-layer models (section "FP8 checkpoints" of docs/real-model.md).
inline constexpr double kW8A8LogitRelL2 = 0.10;
// An e4m3 KV cache (K and V rounded to 3 mantissa bits): logits rel L2 against an f32 pool,
// measured 2-5%.
inline constexpr double kFp8KvLogitRelL2 = 0.08;
// W8A16 computes the dequantized weights' products in f32 in another order than the f32
// model: f32 rounding only.
inline constexpr double kW8A16MaxRel = 2e-5;

}  // namespace tandem_test
