// FP8 checks of the engine test binary:
//   - the e4m3 codec (cuda/fp8.h) against a table written from the OCP 8-bit floating point
//     spec (E4M3: bias 7, no infinities, NaN = S.1111.111, max 448, subnormals m * 2^-9) and
//     against a brute-force nearest-value search over all 256 codes;
//   - the CPU FP8 GEMM (W8A16 and W8A8, per-row and block scales, tail panels, k not a multiple
//     of the group) against a double product of the dequantized weights;
//   - FP8 checkpoints of every accepted format, written here from one random f32 model together
//     with the same model dequantized to f32: the engine on the FP8 checkpoint computed W8A16
//     equals the dequantized model to f32 rounding; computed W8A8 (the checkpoint's activation
//     scheme) it stays within a stated bound; --quantization fp8 and none; the FP8 KV cache;
//   - every refused config, with the field its error names.
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

// ---- the codec ------------------------------------------------------------------------------

/** e4m3 code -> value, from the spec's definition (independent of fp8.h's bit manipulation). */
inline double ocp_e4m3_value(uint8_t b) {
  const int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}

/** Nearest code by search, ties to the even code, saturating at +-448 (the satfinite mode). */
inline uint8_t nearest_e4m3(float x) {
  if (std::isnan(x)) return x < 0 || std::signbit(x) ? 0xff : 0x7f;
  const bool neg = std::signbit(x);
  const double a = std::fabs(static_cast<double>(x));
  if (a >= 448.0) return neg ? 0xfe : 0x7e;
  uint8_t best = 0;
  double best_d = INFINITY;
  for (int c = 0; c <= 0x7e; ++c) {
    const double d = std::fabs(ocp_e4m3_value(static_cast<uint8_t>(c)) - a);
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      best = static_cast<uint8_t>(c);
      best_d = d;
    }
  }
  // Past 448 the next step would be 480 (not finite in e4m3): values round to 448 below the
  // 464 midpoint, and saturate at or above it.
  return static_cast<uint8_t>(best | (neg ? 0x80 : 0));
}

inline void test_fp8_codec() {
  using tandem::gpu::float_to_fp8_bits;
  using tandem::gpu::fp8_bits_to_float;
  struct Row {
    uint8_t code;
    double value;
  };
  // From the spec's E4M3 table: zero, the subnormals' ends, the normal range's ends, one, powers.
  const Row table[] = {{0x00, 0.0},           {0x01, 0x1p-9},         {0x02, 0x1p-8},        {0x07, 7 * 0x1p-9},
                       {0x08, 0x1p-6},        {0x0f, 1.875 * 0x1p-6}, {0x30, 0.5},           {0x38, 1.0},
                       {0x39, 1.125},         {0x3c, 1.5},            {0x40, 2.0},           {0x44, 3.0},
                       {0x77, 240.0},         {0x78, 256.0},          {0x7e, 448.0},         {0xb8, -1.0},
                       {0x81, -0x1p-9},       {0xfe, -448.0},         {0x80, -0.0}};
  for (const Row& r : table) {
    const float got = fp8_bits_to_float(r.code);
    CHECK(got == static_cast<float>(r.value) && std::signbit(got) == std::signbit(r.value), "decode 0x%02x = %g, want %g", r.code,
          got, r.value);
    CHECK(float_to_fp8_bits(static_cast<float>(r.value)) == r.code, "encode %g = 0x%02x, want 0x%02x", r.value,
          float_to_fp8_bits(static_cast<float>(r.value)), r.code);
  }
  CHECK(std::isnan(fp8_bits_to_float(0x7f)) && std::isnan(fp8_bits_to_float(0xff)), "0x7f / 0xff decode to NaN");
  // Every code decodes to the spec's value; every finite code round-trips.
  for (int c = 0; c < 256; ++c) {
    const auto b = static_cast<uint8_t>(c);
    const double want = ocp_e4m3_value(b);
    const float got = fp8_bits_to_float(b);
    if (std::isnan(want)) continue;
    CHECK(got == static_cast<float>(want), "decode 0x%02x = %g, want %g", c, got, want);
    CHECK(float_to_fp8_bits(got) == b, "round trip 0x%02x", c);
  }
  // Rounding: ties to even in the normal and subnormal ranges, across their boundary, into zero.
  const std::pair<float, uint8_t> rounding[] = {
      {1.0625f, 0x38},          // midpoint of 1 (0x38) and 1.125 (0x39): even 0x38
      {1.0625001f, 0x39},       // just above it
      {1.1875f, 0x3a},          // midpoint of 0x39 and 0x3a: even 0x3a
      {0x1p-10f, 0x00},         // half the smallest subnormal: even zero
      {0x1.0001p-10f, 0x01},    // just above
      {3 * 0x1p-10f, 0x02},     // midpoint of 0x01 and 0x02: even 0x02
      {7.5f * 0x1p-9f, 0x08},   // midpoint of the largest subnormal and the smallest normal: even 0x08
      {-7.5f * 0x1p-9f, 0x88},
      {0x1p-12f, 0x00},         // far below: zero
      {-0x1p-12f, 0x80},        // negative zero keeps its sign
      {1e-40f, 0x00},           // an f32 subnormal
      {460.0f, 0x7e},           // rounds to 448 below the 464 midpoint
      {464.0f, 0x7e},           // saturates (satfinite): 480 is not finite in e4m3
      {1000.0f, 0x7e},
      {-1e30f, 0xfe},
      {INFINITY, 0x7e},
      {-INFINITY, 0xfe},
  };
  for (const auto& [x, want] : rounding) {
    CHECK(float_to_fp8_bits(x) == want, "encode %a = 0x%02x, want 0x%02x", static_cast<double>(x), float_to_fp8_bits(x), want);
  }
  CHECK((float_to_fp8_bits(NAN) & 0x7f) == 0x7f && (float_to_fp8_bits(-NAN) & 0x7f) == 0x7f, "NaN encodes to NaN");
  // Random values over the whole range against the search.
  std::mt19937 rng(123);
  std::uniform_real_distribution<float> expo(-14.0f, 10.0f);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  int mismatches = 0;
  for (int i = 0; i < 20000; ++i) {
    const float x = unit(rng) * std::exp2(expo(rng));
    if (float_to_fp8_bits(x) != nearest_e4m3(x)) ++mismatches;
  }
  CHECK(mismatches == 0, "%d of 20000 random values encode off the nearest e4m3 (ties to even)", mismatches);
}

// ---- the CPU GEMM ---------------------------------------------------------------------------

inline tandem::Fp8Matrix random_fp8_matrix(std::mt19937& rng, int64_t rows, int64_t cols, int64_t group_k) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (float& v : w) v = normal(rng) * 0.3f;
  tandem::Fp8Matrix m = tandem::quantize_per_row(w.data(), rows, cols);
  if (group_k < cols) {
    // Per-group scales of varied size, so a group mix-up shows.
    m.group_k = group_k;
    const int64_t kg = m.k_groups();
    m.scales.assign(static_cast<size_t>(rows * kg), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t g = 0; g < kg; ++g) m.scales[static_cast<size_t>(r * kg + g)] = std::exp2(static_cast<float>((r + 3 * g) % 7 - 3)) * 0.01f;
    }
  }
  return m;
}

/** y = x . w^T in double from the definition: activations optionally quantized first. */
inline std::vector<float> fp8_reference(const std::vector<float>& x, int64_t t, const tandem::Fp8Matrix& m, bool w8a8) {
  std::vector<float> y(static_cast<size_t>(t * m.rows));
  std::vector<float> xr(static_cast<size_t>(m.cols)), wr(static_cast<size_t>(m.cols));
  std::vector<uint8_t> q(static_cast<size_t>(m.cols));
  std::vector<float> sx(static_cast<size_t>(m.cols));
  for (int64_t i = 0; i < t; ++i) {
    const float* xi = x.data() + i * m.cols;
    if (w8a8) {
      tandem::quantize_activation_row(xi, m.cols, m.act, q.data(), sx.data());
      const int64_t group = m.act.scheme == tandem::ActQuant::kDynamicGroup ? m.act.group : m.cols;
      for (int64_t c = 0; c < m.cols; ++c) xr[static_cast<size_t>(c)] = static_cast<float>(ocp_e4m3_value(q[static_cast<size_t>(c)])) * sx[static_cast<size_t>(c / group)];
    } else {
      std::copy(xi, xi + m.cols, xr.begin());
    }
    for (int64_t r = 0; r < m.rows; ++r) {
      double s = 0;
      for (int64_t c = 0; c < m.cols; ++c) {
        const double w = ocp_e4m3_value(m.q[static_cast<size_t>(r * m.cols + c)]) * m.scales[static_cast<size_t>(r * m.k_groups() + c / m.group_k)];
        s += static_cast<double>(xr[static_cast<size_t>(c)]) * w;
      }
      y[static_cast<size_t>(i * m.rows + r)] = static_cast<float>(s);
    }
  }
  return y;
}

inline void test_fp8_gemm() {
  using tandem::cpu::WeightMatrix;
  tandem::ThreadPool pool(3);
  std::mt19937 rng(77);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  struct Shape {
    int64_t n, k, group;
    tandem::ActQuant act;
  };
  const Shape shapes[] = {
      {37, 64, 64, tandem::ActQuant::kDynamicToken},   // per-row scales, a tail panel
      {64, 300, 300, tandem::ActQuant::kStaticTensor}, // k past the 256 block
      {50, 300, 128, tandem::ActQuant::kDynamicGroup}, // block scales, k not a multiple of the group
      {33, 520, 96, tandem::ActQuant::kDynamicGroup},  // groups not dividing the 256 block
      {16, 40, 16, tandem::ActQuant::kDynamicToken},   // per-token activations with block weights
  };
  for (const Shape& sh : shapes) {
    tandem::Fp8Matrix m = random_fp8_matrix(rng, sh.n, sh.k, sh.group);
    m.act.scheme = sh.act;
    m.act.group = sh.act == tandem::ActQuant::kDynamicGroup ? sh.group : 0;
    m.act.static_scale = 3.0f / 448.0f;  // saturates the largest activations, as a static scale may
    m.act.ub = sh.act == tandem::ActQuant::kDynamicToken ? 2.5f : 0.0f;
    for (int64_t t : {1, 3, 8, 9, 37}) {
      std::vector<float> x(static_cast<size_t>(t * sh.k));
      for (float& v : x) v = normal(rng);
      for (bool w8a8 : {false, true}) {
        WeightMatrix w = WeightMatrix::from_fp8(m);
        if (!w8a8) w.set_weight_only();
        std::vector<float> y(static_cast<size_t>(t * sh.n), NAN);
        tandem::cpu::matmul_nt(pool, x.data(), t, w, nullptr, y.data());
        const std::vector<float> want = fp8_reference(x, t, m, w8a8);
        double worst = 0, scale = 1e-6;
        for (size_t i = 0; i < y.size(); ++i) {
          worst = std::max(worst, std::fabs(static_cast<double>(y[i]) - want[i]));
          scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
        }
        CHECK(worst <= 2e-5 * scale, "fp8 gemm n=%lld k=%lld group=%lld t=%lld %s: max diff %.3g of max %.3g",
              static_cast<long long>(sh.n), static_cast<long long>(sh.k), static_cast<long long>(sh.group), static_cast<long long>(t),
              w8a8 ? "W8A8" : "W8A16", worst, scale);
      }
    }
  }
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

inline void test_fp8_checkpoints(const std::string& root) {
  const Fp8Tiny tiny(31);
  for (const Fp8Format& f : fp8_formats()) {
    const std::string dir = root + "/fp8-" + f.label, twin = root + "/fp8-twin-" + f.label;
    tiny.write(f, dir, twin);
    auto ref_engine = fp8_engine(twin);
    const std::vector<float> ref = fp8_logits(*ref_engine);
    const std::vector<float> w8a16 = fp8_logits(*fp8_engine(dir, "w8a16"));
    const double d16 = max_rel(w8a16, ref);
    CHECK(d16 <= kW8A16MaxRel, "%s W8A16: max |diff| %.3g of the logits' max vs the dequantized model", f.label, d16);
    const std::vector<float> w8a8 = fp8_logits(*fp8_engine(dir));
    const double d8 = rel_l2(w8a8, ref);
    CHECK(d8 <= kW8A8LogitRelL2, "%s W8A8: logits relative L2 %.3g vs the dequantized model", f.label, d8);
    const std::vector<float> none = fp8_logits(*fp8_engine(dir, "auto", "none"));
    CHECK(max_rel(none, ref) <= kW8A16MaxRel, "%s --quantization none: max diff %.3g", f.label, max_rel(none, ref));
    std::printf("fp8 %-22s W8A16 max rel %.2e, W8A8 logits rel L2 %.2e\n", f.label, d16, d8);
  }

  // --quantization fp8 on an f32 checkpoint: the per-channel quantization of its linear layers.
  {
    Fp8Format channel{"on-load", "", 'c', 0, 0, "weight_scale", false, ""};
    const std::string dir = root + "/fp8-onload", twin = root + "/fp8-onload-twin";
    tiny.write(channel, root + "/fp8-onload-unused", twin);  // twin: the per-channel dequantized weights
    ::mkdir(dir.c_str(), 0755);
    std::ofstream(dir + "/config.json") << tiny.config("");
    StWriter w;
    for (const auto& [name, t] : tiny.tensors) w.add_f32(name, t.first, t.second);
    w.write(dir + "/model.safetensors");
    const std::vector<float> ref = fp8_logits(*fp8_engine(twin));
    const std::vector<float> got = fp8_logits(*fp8_engine(dir, "w8a16", "fp8"));
    CHECK(max_rel(got, ref) <= kW8A16MaxRel, "--quantization fp8 W8A16 vs its per-channel dequantization: %.3g", max_rel(got, ref));
    const std::vector<float> w8a8 = fp8_logits(*fp8_engine(dir, "auto", "fp8"));
    const std::vector<float> f32 = fp8_logits(*fp8_engine(dir));
    CHECK(rel_l2(w8a8, f32) <= kW8A8LogitRelL2, "--quantization fp8 vs the f32 model: rel L2 %.3g", rel_l2(w8a8, f32));
    CHECK(rel_l2(w8a8, f32) > 0, "--quantization fp8 changed nothing");
  }

  // FP8 KV cache: e4m3 K/V scaled by the checkpoint's k_scale / v_scale (1.0 without), within
  // e4m3's rounding of K and V (attention averages it down); bf16 KV much closer.
  {
    Fp8Format f = fp8_formats()[3];
    std::map<std::string, float> kv;
    for (int l = 0; l < tiny.layers; ++l) {
      kv["model.layers." + std::to_string(l) + ".self_attn.k_scale"] = 0.02f;  // |K| <= 8.96
      kv["model.layers." + std::to_string(l) + ".self_attn.v_scale"] = 0.01f;  // |V| <= 4.48
    }
    tiny.write(f, root + "/fp8-kv", root + "/fp8-kv-twin", kv);
    const std::vector<float> ref = fp8_logits(*fp8_engine(root + "/fp8-kv-twin", "w8a16"));
    const std::vector<float> fp8kv = fp8_logits(*fp8_engine(root + "/fp8-kv-twin", "w8a16", "", "fp8"));
    const std::vector<float> bf16kv = fp8_logits(*fp8_engine(root + "/fp8-kv-twin", "w8a16", "", "bf16"));
    CHECK(rel_l2(fp8kv, ref) <= kFp8KvLogitRelL2 && rel_l2(fp8kv, ref) > 0, "fp8 KV: logits rel L2 %.3g", rel_l2(fp8kv, ref));
    CHECK(rel_l2(bf16kv, ref) <= 0.01 && rel_l2(bf16kv, ref) < rel_l2(fp8kv, ref), "bf16 KV: rel L2 %.3g", rel_l2(bf16kv, ref));
    auto e = fp8_engine(root + "/fp8-kv", "auto", "", "fp8");
    CHECK(e->kv_layout().elem_bytes == 1, "fp8 KV pool: %zu bytes per element", e->kv_layout().elem_bytes);
    std::printf("fp8 KV cache: logits rel L2 %.2e (bf16 KV %.2e)\n", rel_l2(fp8kv, ref), rel_l2(bf16kv, ref));
  }
}

// ---- refusals -------------------------------------------------------------------------------

inline void expect_refusal(const std::string& dir, const char* code, const std::string& needle, const char* label) {
  try {
    fp8_engine(dir);
    CHECK(false, "%s: loaded, wanted a refusal naming %s", label, needle.c_str());
  } catch (const tandem::NativeError& err) {
    CHECK(std::strcmp(err.code_name(), code) == 0 && std::string(err.what()).find(needle) != std::string::npos,
          "%s: %s: %s (wanted %s naming %s)", label, err.code_name(), err.what(), code, needle.c_str());
  }
}

inline void test_fp8_refusals(const std::string& root) {
  const Fp8Tiny tiny(5);
  const Fp8Format channel = fp8_formats()[3];
  struct Case {
    const char* label;
    std::string config;
    const char* needle;
  };
  const Case configs[] = {
      {"mxfp4", R"({"quant_method":"mxfp4"})", "'quantization_config.quant_method'='mxfp4'"},
      {"gptq", R"({"quant_method":"gptq","bits":4,"group_size":128})", "'quantization_config.quant_method'='gptq'"},
      {"awq", R"({"quant_method":"awq","bits":4})", "'quantization_config.quant_method'='awq'"},
      {"e5m2 fmt", R"({"quant_method":"fp8","fmt":"e5m2","activation_scheme":"dynamic"})", "'quantization_config.fmt'='e5m2'"},
      {"block static", R"({"quant_method":"fp8","activation_scheme":"static","weight_block_size":[128,128]})", "activation_scheme"},
      {"scheme", R"({"quant_method":"fp8","activation_scheme":"sometimes"})", "'quantization_config.activation_scheme'='sometimes'"},
      {"block size", R"({"quant_method":"fp8","weight_block_size":[128]})", "'quantization_config.weight_block_size'"},
      {"ct pack", R"({"quant_method":"compressed-tensors","format":"pack-quantized","config_groups":{"g":{"targets":["Linear"],"weights":{"num_bits":4,"type":"int","strategy":"group"}}}})",
       "'quantization_config.format'='pack-quantized'"},
      {"ct int8", R"({"quant_method":"compressed-tensors","format":"float-quantized","config_groups":{"g":{"targets":["Linear"],"weights":{"num_bits":8,"type":"int","strategy":"channel"}}}})",
       "'quantization_config.config_groups.g.weights.type'='int'"},
      {"ct 4 bit", R"({"quant_method":"compressed-tensors","format":"float-quantized","config_groups":{"g":{"targets":["Linear"],"weights":{"num_bits":4,"type":"float","strategy":"channel"}}}})",
       "'quantization_config.config_groups.g.weights.num_bits'=4"},
      {"ct two groups", R"({"quant_method":"compressed-tensors","format":"float-quantized","config_groups":{"a":{},"b":{}}})",
       "'quantization_config.config_groups' with 2 groups"},
      {"ct dynamic tensor", R"({"quant_method":"compressed-tensors","format":"float-quantized","config_groups":{"g":{"targets":["Linear"],"weights":{"num_bits":8,"type":"float","strategy":"channel"},"input_activations":{"num_bits":8,"type":"float","strategy":"tensor","dynamic":true}}}})",
       "'quantization_config.config_groups.g.input_activations.strategy'='tensor'"},
  };
  for (const Case& c : configs) {
    const std::string dir = root + "/refuse-" + std::to_string(&c - configs);
    Fp8Format f = channel;
    f.quantization_config = c.config;
    tiny.write(f, dir, dir + "-twin");
    expect_refusal(dir, "config_invalid", c.needle, c.label);
  }
  // Scales of the wrong shape, a missing scale, an FP8 tensor without a config, e5m2 weights.
  {
    Fp8Format block = fp8_formats()[0];
    block.bk = 12;  // scales for 12-column blocks under a config that says 24
    tiny.write(block, root + "/refuse-shape", root + "/refuse-shape-twin");
    expect_refusal(root + "/refuse-shape", "config_invalid", "weight_scale_inv' has shape [3, 7], the quantization_config implies [3, 4]",
                   "block scales of the wrong shape");
    Fp8Format wrong_name = channel;
    wrong_name.scale_name = "scale";
    tiny.write(wrong_name, root + "/refuse-missing", root + "/refuse-missing-twin");
    expect_refusal(root + "/refuse-missing", "config_invalid", "weight_scale' missing", "missing scale");
    Fp8Format no_config = channel;
    no_config.quantization_config = "";
    tiny.write(no_config, root + "/refuse-noconfig", root + "/refuse-noconfig-twin");
    expect_refusal(root + "/refuse-noconfig", "config_invalid", "is F8_E4M3 but config.json has no quantization_config", "no config");
    // e5m2: rewrite the first FP8 tensor's dtype in the header.
    tiny.write(channel, root + "/refuse-e5m2", root + "/refuse-e5m2-twin");
    std::ifstream in(root + "/refuse-e5m2/model.safetensors", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    const size_t at = bytes.find("F8_E4M3");
    bytes.replace(at, 7, "F8_E5M2");
    std::ofstream(root + "/refuse-e5m2/model.safetensors", std::ios::binary) << bytes;
    expect_refusal(root + "/refuse-e5m2", "config_invalid", "has dtype F8_E5M2", "e5m2 weights");
  }
}

/**
 * The GPU backend (simt: its kernels on the host; cuda on a GPU) on FP8 checkpoints against the
 * CPU backend on the same files: every format, W8A8 and W8A16, the FP8 KV cache. The 13-token
 * prefill runs the products of more rows than the FP8 GEMV takes (cuBLASLt where it serves FP8,
 * else the dequantizing fallback), the decode steps the GEMV.
 *  - W8A16: the GPU computes in bf16 between kernels, so against the CPU's W8A16 logits it has
 *    the engine's stated bf16 tolerance (max |diff| within 6% of the logits' RMS; goldens).
 *  - W8A8: rounding to e4m3 is discontinuous, so the GPU's bf16 activations round a few values
 *    to the neighbouring e4m3 step where the CPU's f32 ones do not: GPU and CPU W8A8 differ by
 *    about as much as either differs from the exact model (measured 5-7% each). The check is the
 *    one that matters: the GPU's W8A8 against the exact (dequantized, W8A16) model, within the
 *    same bound as the CPU's (kW8A8LogitRelL2).
 *  - FP8 KV cache (K/V rounded to e4m3 on both): likewise against the exact model with f32 KV.
 */
inline void test_fp8_gpu_backend(const std::string& root, const std::string& device) {
  const Fp8Tiny tiny(41, 16);
  std::vector<Fp8Format> formats = fp8_formats();
  formats[0].bn = 16;
  formats[0].bk = 32;
  formats[0].quantization_config = R"({"quant_method":"fp8","fmt":"e4m3","activation_scheme":"dynamic","weight_block_size":[16,32]})";
  formats[6].bk = 32;
  formats[6].quantization_config =
      R"({"quant_method":"compressed-tensors","config_groups":{"group_0":{"format":"float-quantized","targets":["Linear"],"weights":{"num_bits":8,"type":"float","strategy":"block","block_structure":[16,32],"dynamic":false},"input_activations":{"num_bits":8,"type":"float","strategy":"group","group_size":32,"dynamic":true}}}})";
  auto rms_rel = [](const std::vector<float>& got, const std::vector<float>& want) {
    double worst = 0, ss = 0;
    for (size_t i = 0; i < want.size(); ++i) ss += static_cast<double>(want[i]) * want[i];
    const double rms = std::sqrt(ss / std::max<size_t>(1, want.size()));
    for (size_t i = 0; i < want.size() && i < got.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
    return worst / rms;
  };
  for (const Fp8Format& f : formats) {
    const std::string dir = root + "/gpu-fp8-" + f.label;
    tiny.write(f, dir, dir + "-twin");
    const std::vector<float> exact = fp8_logits(*fp8_engine(dir, "w8a16"));
    const std::vector<float> w8a16 = fp8_logits(*fp8_engine(dir, "w8a16", "", "auto", device));
    const std::vector<float> w8a8 = fp8_logits(*fp8_engine(dir, "auto", "", "auto", device));
    const double e16 = rms_rel(w8a16, exact), e8 = rel_l2(w8a8, exact);
    CHECK(e16 <= 0.06, "%s W8A16 on %s: max |logit diff| %.3g of the CPU's RMS", f.label, device.c_str(), e16);
    CHECK(e8 <= kW8A8LogitRelL2, "%s W8A8 on %s: logits rel L2 %.3g against the exact model", f.label, device.c_str(), e8);
    std::printf("fp8 on %s: %-22s W8A16 max |diff| / RMS %.2e, W8A8 rel L2 %.2e against the exact model\n", device.c_str(), f.label, e16, e8);
    // The fused decode step (the FP8 GEMV's main loop under the fused epilogues) against the
    // per-op kernels: the same logits bit for bit, W8A8 and W8A16, and every decode step fused.
    for (const char* compute : {"auto", "w8a16"}) {
      auto fused = fp8_engine(dir, compute, "", "auto", device);
      ::setenv("TANDEM_GPU_DECODE", "unfused", 1);
      auto per_op = fp8_engine(dir, compute, "", "auto", device);
      ::unsetenv("TANDEM_GPU_DECODE");
      auto* gpu = dynamic_cast<tandem::GpuBackend*>(&fused->backend());
      const std::vector<float> a = fp8_logits(*fused), b = fp8_logits(*per_op);
      size_t differ = a.size() == b.size() ? 0 : a.size() + b.size();
      for (size_t i = 0; i < a.size() && i < b.size(); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
      CHECK(gpu != nullptr && gpu->fused_decode_steps() == 3, "%s %s on %s: %llu of 3 decode steps fused", f.label, compute, device.c_str(),
            static_cast<unsigned long long>(gpu != nullptr ? gpu->fused_decode_steps() : 0));
      CHECK(differ == 0, "%s %s on %s: fused decode differs from the per-op kernels in %zu of %zu logits", f.label, compute, device.c_str(),
            differ, a.size());
    }
  }
  std::printf("fp8 on %s: the fused decode step equals the per-op kernels bit for bit (%zu formats, W8A8 and W8A16)\n", device.c_str(),
              formats.size());
  // FP8 KV cache: the same checkpoint with e4m3 K/V on both backends (the GPU's attention reads
  // e4m3, its KV write quantizes), scales from the checkpoint.
  {
    std::map<std::string, float> kv;
    for (int l = 0; l < tiny.layers; ++l) {
      kv["model.layers." + std::to_string(l) + ".self_attn.k_scale"] = 0.02f;
      kv["model.layers." + std::to_string(l) + ".self_attn.v_scale"] = 0.01f;
    }
    tiny.write(formats[3], root + "/gpu-fp8-kv", root + "/gpu-fp8-kv-twin", kv);
    const std::vector<float> exact = fp8_logits(*fp8_engine(root + "/gpu-fp8-kv", "w8a16"));
    auto e = fp8_engine(root + "/gpu-fp8-kv", "w8a16", "", "fp8", device);
    CHECK(e->kv_layout().elem_bytes == 1, "fp8 KV on %s: %zu bytes per element", device.c_str(), e->kv_layout().elem_bytes);
    const std::vector<float> got = fp8_logits(*e);
    CHECK(rel_l2(got, exact) <= kFp8KvLogitRelL2, "fp8 KV on %s: logits rel L2 %.3g against the exact model", device.c_str(), rel_l2(got, exact));
    std::printf("fp8 KV on %s: rel L2 %.2e against the exact model; %s\n", device.c_str(), rel_l2(got, exact), e->backend_description().c_str());
  }
}

inline void test_fp8(const std::string& root) {
  test_fp8_codec();
  test_fp8_gemm();
  test_fp8_checkpoints(root);
  test_fp8_refusals(root);
}

}  // namespace tandem_test
