// The FP8 kernels (fp8_kernels.h) against the CPU backend's:
//  - the decode GEMV (kernels/fp8_gemm_rows.cuh) against cpu::matmul_nt on the same e4m3
//    weights and bf16 activations: m = 1..8, per-row and block scales (groups of 128 and 16,
//    k not a multiple of the group), W8A16 and W8A8 (dynamic per token with and without an
//    upper bound, static, dynamic per group), odd n (the last warp's columns), k split over
//    blocks (the workspace and its reduce) or not, bias, accumulate and bf16 output; outputs
//    start as NaN and a canary row after the last must stay NaN;
//  - the activation quantization against core quantize_activation_row: the same e4m3 bytes
//    and scales, bit for bit, and the dequantized bf16 values;
//  - the weight dequantization against Fp8Matrix::dequantize_row rounded to bf16, bit for bit.
// Tolerance of the GEMV: f32 accumulation of the same products in another order, 1e-5 of
// sum |x w|; bf16 output adds one rounding.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "../../src/core/fp8_weights.h"
#include "../../src/core/thread_pool.h"
#include "../../src/cpu/gemm.h"
#include "../../src/cpu/weight_matrix.h"
#include "../../src/cuda/fp8_kernels.h"
#include "attention_checks.h"
#include "gpu_test_util.h"

namespace tandem_test::gpu {

inline std::unique_ptr<tandem::gpu::Fp8KernelApi> open_fp8_kernels(const Gpu& g) {
  return g.name == "cuda" ? tandem::gpu::make_cuda_fp8_kernels() : tandem::gpu::make_simt_fp8_kernels();
}

inline tandem::gpu::Fp8Act to_gpu_act(tandem::ActQuant a) {
  switch (a) {
    case tandem::ActQuant::kNone: return tandem::gpu::Fp8Act::kNone;
    case tandem::ActQuant::kDynamicToken: return tandem::gpu::Fp8Act::kDynamicToken;
    case tandem::ActQuant::kDynamicGroup: return tandem::gpu::Fp8Act::kDynamicGroup;
    case tandem::ActQuant::kStaticTensor: return tandem::gpu::Fp8Act::kStatic;
  }
  return tandem::gpu::Fp8Act::kNone;
}

/** Random e4m3 weights (no NaN codes) with scales of varied size per row and group. */
inline tandem::Fp8Matrix random_fp8(std::mt19937& rng, int64_t n, int64_t k, int64_t group_k) {
  tandem::Fp8Matrix m;
  m.rows = n;
  m.cols = k;
  m.group_k = group_k;
  m.q.resize(static_cast<size_t>(n * k));
  for (auto& b : m.q) {
    b = static_cast<uint8_t>(rng());
    if ((b & 0x7f) == 0x7f) b ^= 0x01;  // not NaN
  }
  m.scales.resize(static_cast<size_t>(n * m.k_groups()));
  std::uniform_real_distribution<float> u(-6.0f, -3.0f);
  for (float& s : m.scales) s = std::exp2(u(rng));
  return m;
}

struct Fp8GemvCase {
  int m, n, k, group;  // group == k: one scale per row
  tandem::ActQuant act;
  float ub;
  bool bias, accumulate, bf16_out, splits;
};

inline void check_fp8_gemv(Gpu& g, tandem::gpu::Fp8KernelApi& api, tandem::ThreadPool& pool, const Fp8GemvCase& c, uint32_t seed) {
  using tandem::gpu::GemmOut;
  std::mt19937 rng(seed);
  tandem::Fp8Matrix w = random_fp8(rng, c.n, c.k, c.group);
  w.act.scheme = c.act;
  w.act.group = c.act == tandem::ActQuant::kDynamicGroup ? c.group : 0;
  w.act.static_scale = 1.5f / 448.0f;  // saturates the tail, as a calibrated static scale may
  w.act.ub = c.ub;
  const int64_t lda = c.k + 8;
  std::vector<float> x = random_bf16_floats(rng, static_cast<size_t>(c.m * lda));
  std::vector<float> xk(static_cast<size_t>(c.m * c.k));
  for (int i = 0; i < c.m; ++i) {
    for (int j = 0; j < c.k; ++j) xk[static_cast<size_t>(i * c.k + j)] = x[static_cast<size_t>(i * lda + j)];
    for (int64_t j = c.k; j < lda; ++j) x[static_cast<size_t>(i * lda + j)] = NAN;  // reading past k shows
  }
  const std::vector<float> bias = random_floats(rng, static_cast<size_t>(c.n));
  const int64_t ldc = (c.n + 7) / 8 * 8;
  std::vector<float> c_old(static_cast<size_t>((c.m + 1) * ldc), NAN);
  const std::vector<float> old = random_floats(rng, static_cast<size_t>(c.m * c.n));
  if (c.accumulate) {
    for (int i = 0; i < c.m; ++i) {
      for (int j = 0; j < c.n; ++j) c_old[static_cast<size_t>(i * ldc + j)] = old[static_cast<size_t>(i * c.n + j)];
    }
  }

  // The CPU backend's kernel on the same values.
  std::vector<float> want(static_cast<size_t>(c.m * c.n));
  const tandem::cpu::WeightMatrix cw = tandem::cpu::WeightMatrix::from_fp8(w);
  tandem::cpu::matmul_nt(pool, xk.data(), c.m, cw, c.bias ? bias.data() : nullptr, want.data());
  std::vector<double> mag(want.size(), 0.0);
  std::vector<float> wrow(static_cast<size_t>(c.k));
  for (int j = 0; j < c.n; ++j) {
    w.dequantize_row(j, wrow.data());
    for (int i = 0; i < c.m; ++i) {
      double s = c.bias ? std::fabs(bias[static_cast<size_t>(j)]) : 0.0;
      for (int kk = 0; kk < c.k; ++kk) s += std::fabs(static_cast<double>(xk[static_cast<size_t>(i * c.k + kk)]) * wrow[static_cast<size_t>(kk)]);
      mag[static_cast<size_t>(i * c.n + j)] = s;
    }
  }
  if (c.accumulate) {
    for (int i = 0; i < c.m; ++i) {
      for (int j = 0; j < c.n; ++j) want[static_cast<size_t>(i * c.n + j)] += old[static_cast<size_t>(i * c.n + j)];
    }
  }

  DeviceArray<bf16_bits> d_a(*g.device, to_bf16(x));
  DeviceArray<uint8_t> d_w(*g.device, w.q);
  DeviceArray<float> d_s(*g.device, w.scales);
  DeviceArray<float> d_bias(*g.device, bias);
  DeviceArray<float> d_c32(*g.device, c_old);
  DeviceArray<bf16_bits> d_c16(*g.device, static_cast<size_t>((c.m + 1) * ldc));
  d_c16.poison();
  const int64_t ws_floats = tandem::gpu::gemm_workspace_floats(c.m, c.n);
  DeviceArray<float> d_ws(*g.device, static_cast<size_t>(ws_floats));

  tandem::gpu::Fp8GemmArgs a;
  a.out.m = c.m;
  a.out.n = c.n;
  a.out.k = c.k;
  a.out.bias = c.bias ? d_bias.get() : nullptr;
  a.out.out = c.bf16_out ? GemmOut::kBf16 : GemmOut::kF32;
  a.out.c = c.bf16_out ? static_cast<void*>(d_c16.get()) : static_cast<void*>(d_c32.get());
  a.out.ldc = ldc;
  a.out.accumulate = c.accumulate;
  a.out.workspace = c.splits ? d_ws.get() : nullptr;
  a.out.workspace_floats = c.splits ? ws_floats : 0;
  a.a = d_a.get();
  a.lda = lda;
  a.act = to_gpu_act(c.act);
  a.act_static_scale = w.act.static_scale;
  a.act_ub = c.ub;
  a.w = d_w.get();
  a.ldw = c.k;
  a.w_scales = d_s.get();
  a.w_groups = static_cast<int>(w.k_groups());
  a.group_k = c.group;
  const bool ran = api.gemm_rows(a, g.stream());
  CHECK(ran, "fp8 gemv m=%d n=%d k=%d group=%d: not run", c.m, c.n, c.k, c.group);
  if (!ran) return;
  std::vector<float> got = c.bf16_out ? from_bf16(d_c16.download()) : d_c32.download();
  double worst = 0;
  bool canary = true;
  for (int i = 0; i <= c.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const float v = got[static_cast<size_t>(i * ldc + j)];
      if (i == c.m || j >= c.n) {
        canary = canary && std::isnan(v);
        continue;
      }
      const size_t o = static_cast<size_t>(i * c.n + j);
      const double tol = 1e-5 * mag[o] + (c.bf16_out ? std::fabs(want[o]) / 128.0 : 0.0) + 1e-30;
      worst = std::max(worst, std::isnan(v) ? INFINITY : std::fabs(v - want[o]) / tol);
    }
  }
  CHECK(worst <= 1.0 && canary, "fp8 gemv m=%d n=%d k=%d group=%d act=%d ub=%g%s%s%s%s: worst error %.3g of tolerance, canary %s", c.m,
        c.n, c.k, c.group, static_cast<int>(c.act), c.ub, c.bias ? " bias" : "", c.accumulate ? " accumulate" : "",
        c.bf16_out ? " bf16" : "", c.splits ? " split-k" : "", worst, canary ? "intact" : "written");
}

inline void check_fp8_quantize(Gpu& g, tandem::gpu::Fp8KernelApi& api, int rows, int cols, tandem::ActQuant act, int group, float ub,
                               uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<float> x = random_bf16_floats(rng, static_cast<size_t>(rows * cols), 2.0f);
  tandem::ActQuantSpec spec;
  spec.scheme = act;
  spec.group = group;
  spec.static_scale = 2.0f / 448.0f;
  spec.ub = ub;
  const int groups = act == tandem::ActQuant::kDynamicGroup ? (cols + group - 1) / group : 1;
  std::vector<uint8_t> want_q(static_cast<size_t>(rows * cols));
  std::vector<float> want_s(static_cast<size_t>(rows * groups));
  for (int r = 0; r < rows; ++r) {
    tandem::quantize_activation_row(x.data() + r * cols, cols, spec, want_q.data() + r * cols, want_s.data() + r * groups);
  }
  DeviceArray<bf16_bits> d_x(*g.device, to_bf16(x));
  DeviceArray<uint8_t> d_q(*g.device, static_cast<size_t>(rows * cols));
  DeviceArray<float> d_s(*g.device, static_cast<size_t>(rows * groups));
  DeviceArray<bf16_bits> d_dq(*g.device, static_cast<size_t>(rows * cols));
  d_q.poison();
  d_s.poison();
  tandem::gpu::Fp8QuantArgs a;
  a.x = d_x.get();
  a.ldx = cols;
  a.rows = rows;
  a.cols = cols;
  a.act = to_gpu_act(act);
  a.group = group;
  a.static_scale = spec.static_scale;
  a.ub = ub;
  a.q = d_q.get();
  a.ldq = cols;
  a.scales = d_s.get();
  a.dq = d_dq.get();
  a.lddq = cols;
  api.quantize(a, g.stream());
  const std::vector<uint8_t> q = d_q.download();
  const std::vector<float> s = d_s.download();
  const std::vector<bf16_bits> dq = d_dq.download();
  size_t bad_q = 0, bad_s = 0, bad_dq = 0;
  for (size_t i = 0; i < q.size(); ++i) {
    bad_q += q[i] != want_q[i];
    const float sc = want_s[(i / static_cast<size_t>(cols)) * static_cast<size_t>(groups) + (i % static_cast<size_t>(cols)) / static_cast<size_t>(act == tandem::ActQuant::kDynamicGroup ? group : cols)];
    bad_dq += dq[i] != tandem::gpu::float_to_bf16_bits(tandem::gpu::fp8_bits_to_float(want_q[i]) * sc);
  }
  for (size_t i = 0; i < s.size(); ++i) bad_s += std::memcmp(&s[i], &want_s[i], 4) != 0;
  CHECK(bad_q == 0 && bad_s == 0 && bad_dq == 0, "fp8 quantize %dx%d act=%d group=%d ub=%g: %zu codes, %zu scales, %zu bf16 values differ",
        rows, cols, static_cast<int>(act), group, ub, bad_q, bad_s, bad_dq);
}

inline void check_fp8_dequantize(Gpu& g, tandem::gpu::Fp8KernelApi& api, int n, int k, int group, bool scaled, uint32_t seed) {
  std::mt19937 rng(seed);
  const tandem::Fp8Matrix w = random_fp8(rng, n, k, group);
  const int64_t ldo = k + 8;
  DeviceArray<uint8_t> d_w(*g.device, w.q);
  DeviceArray<float> d_s(*g.device, w.scales);
  DeviceArray<bf16_bits> d_out(*g.device, static_cast<size_t>(n * ldo));
  d_out.poison();
  tandem::gpu::Fp8DequantArgs a;
  a.w = d_w.get();
  a.ldw = k;
  a.n = n;
  a.k = k;
  a.scales = scaled ? d_s.get() : nullptr;
  a.groups = static_cast<int>(w.k_groups());
  a.group_k = group;
  a.out = d_out.get();
  a.ldo = ldo;
  api.dequantize(a, g.stream());
  const std::vector<bf16_bits> got = d_out.download();
  std::vector<float> row(static_cast<size_t>(k));
  size_t bad = 0, gaps = 0;
  for (int r = 0; r < n; ++r) {
    w.dequantize_row(r, row.data());
    for (int c = 0; c < k; ++c) {
      const float want = scaled ? row[static_cast<size_t>(c)] : tandem::gpu::fp8_bits_to_float(w.q[static_cast<size_t>(r * k + c)]);
      bad += got[static_cast<size_t>(r * ldo + c)] != tandem::gpu::float_to_bf16_bits(want);
    }
    for (int64_t c = k; c < ldo; ++c) gaps += got[static_cast<size_t>(r * ldo + c)] != 0xffff;
  }
  CHECK(bad == 0 && gaps == 0, "fp8 dequantize %dx%d group %d %s: %zu values differ, %zu row-gap elements written", n, k, group,
        scaled ? "scaled" : "unscaled", bad, gaps);
}

inline void test_fp8_kernels(Gpu& g) {
  using A = tandem::ActQuant;
  auto api = open_fp8_kernels(g);
  tandem::ThreadPool pool(2);
  int cases = 0;
  uint32_t seed = 900;
  const Fp8GemvCase gemv[] = {
      {1, 97, 64, 64, A::kNone, 0, false, false, false, false},
      {1, 33, 1040, 16, A::kNone, 0, true, false, false, true},
      {2, 264, 512, 128, A::kDynamicGroup, 0, false, false, false, true},
      {3, 97, 1040, 128, A::kDynamicGroup, 0, true, true, false, false},
      {5, 200, 3072, 3072, A::kDynamicToken, 0, false, true, false, true},
      {8, 129, 3072, 3072, A::kDynamicToken, 1.5f, true, false, true, false},
      {7, 64, 256, 256, A::kStaticTensor, 0, false, false, false, true},
      {8, 33, 1040, 128, A::kDynamicToken, 0, false, false, false, true},
      {4, 300, 4096, 128, A::kDynamicGroup, 0, false, false, true, true},
  };
  for (const Fp8GemvCase& c : gemv) {
    check_fp8_gemv(g, *api, pool, c, ++seed);
    ++cases;
  }
  {
    tandem::gpu::Fp8GemmArgs big;
    big.out.m = 9;
    big.out.k = 64;
    CHECK(!api->gemm_rows(big, g.stream()), "fp8 gemv takes at most 8 rows");
  }
  for (auto [rows, cols, act, group, ub] : {std::tuple<int, int, A, int, float>{3, 1040, A::kDynamicToken, 0, 0.0f},
                                            {2, 700, A::kDynamicToken, 0, 1.0f},
                                            {4, 1040, A::kDynamicGroup, 128, 0.0f},
                                            {1, 96, A::kDynamicGroup, 16, 0.0f},
                                            {2, 300, A::kStaticTensor, 0, 0.0f}}) {
    check_fp8_quantize(g, *api, rows, cols, act, group, ub, ++seed);
    ++cases;
  }
  check_fp8_dequantize(g, *api, 37, 300, 128, true, ++seed);
  check_fp8_dequantize(g, *api, 20, 64, 64, true, ++seed);
  check_fp8_dequantize(g, *api, 20, 64, 64, false, ++seed);
  cases += 3;
  // Attention over an e4m3 pool (the CPU backend's kernel reads the same codes and scales):
  // prefills (head_dim 64 and 128 too, which then stay on CUDA cores), prefix hits, decodes
  // at long context over several splits.
  const std::vector<GpuAttnSeq> specs = {{0, 40}, {37, 9}, {5, 1}, {300, 1}, {0, 2}};
  for (const GpuAttnCase& c : {GpuAttnCase{64, 8, 2, 16}, GpuAttnCase{128, 4, 4, 4}, GpuAttnCase{40, 7, 1, 1}}) {
    check_attention_batch(g, c, specs, {1, 3}, ++seed, true);
    ++cases;
  }
  if (g.name == "simt") {  // an e4m3 pool past 2^32 bytes (64-bit KV offsets)
    check_attention_batch(g, GpuAttnCase{64, 8, 2, 16}, specs, {1, 3}, ++seed, true, true);
    ++cases;
  }
  std::printf("gpu fp8: %d cases (GEMV W8A16/W8A8 per-row and block scales, activation quantization, weight dequantization, attention over e4m3 KV) checked on %s\n",
              cases, g.name.c_str());
}

}  // namespace tandem_test::gpu
