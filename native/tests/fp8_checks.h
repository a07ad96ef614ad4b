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
#include "fp8_fixtures.h"

namespace tandem_test {

// ---- the codec (ocp_e4m3_value, the spec's table: fp8_fixtures.h) ------------------------------

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

// ---- checkpoints (the fixtures: fp8_fixtures.h) ---------------------------------------------

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
