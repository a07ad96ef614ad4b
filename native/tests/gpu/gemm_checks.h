// The GPU GEMM (kernels/gemm*.cuh) against a double-precision product of the same bf16 inputs.
// Each case runs through KernelApi::gemm (the plan the backend gets) and, on the SIMT target,
// through the other paths that apply to it (gemm_run with a forced path): the few-rows kernel
// with 1 and 3 k splits, and the mma.sync tiles (64x128 for every shape, 128x128 and 128x256
// where m > 16), so each tile's indexing is checked on shapes that would not choose it. The
// shapes cover:
//  - m = 1, 2, 3, 7, 9, 16 (few-rows: 1, 2, 4, 8 and 16 rows per pass, split-K through the
//    workspace and its reduce kernel, k staged in several chunks) and 17, 33, 64, 65, 130,
//    257 (partial mma tiles in m; split-K of the mma path);
//  - n odd and off every tile (97, 129, 200, 264, 33), so the last warp's columns, the last
//    n8 tile and single trailing columns are guarded;
//  - k = 8, 32, 40, 96, 264, 1032, 3336: below, at and past one 64-wide k tile, partial k
//    tiles, more k tiles than pipeline stages, k ranges that split into a short last range;
//  - row strides larger than k (a, w) and n (c); the gaps of a and w hold NaN, so reading past
//    k shows up, and the gaps of c (and a canary row after the last) must stay poisoned, as
//    must the workspace past the [splits][m][n] partials;
//  - bias or none, f32 or bf16 output, and accumulation into existing f32 values.
// On a GPU (TANDEM_TEST_DEVICE=cuda) only the auto plan runs, so a few larger shapes are added
// there that choose the paths small shapes do not: few rows without splits over many blocks,
// 16 rows with the activations' shared-memory cap, and the 128x128 and 128x256 tiles.
// Tolerance: f32 accumulation of exact bf16 products, 2e-4 of sum |a w| + |bias| + |c|; bf16
// output adds one rounding of the result (2^-8 relative).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "gpu_test_util.h"
// The kernels themselves (SIMT target), to force each path; all templates or inline, so this
// shares their definitions with kernels_simt.cc.
#include "../../src/cuda/kernels/gemm.cuh"

namespace tandem_test::gpu {

struct GpuGemmCase {
  int m, n, k;
  int pad_a, pad_w, pad_c;  // row stride minus k (a, w) or minus n rounded up to 8 (c); multiples of 8
  bool bias;
  tandem::gpu::GemmOut out;
  bool accumulate;
};

struct GpuGemmPath {
  tandem::gpu::simt_target::GemmPath path;
  int rows_splits;  // k splits asked of gemm_run (0: its own choice)
  const char* name;
};

inline void check_gemm_case(Gpu& g, const GpuGemmCase& c, uint32_t seed, int* runs, int* splits_seen) {
  using tandem::gpu::GemmOut;
  using namespace tandem::gpu::simt_target;
  std::mt19937 rng(seed);
  const int m = c.m, n = c.n, k = c.k;
  const int64_t lda = k + c.pad_a, ldw = k + c.pad_w, ldc = (n + 7) / 8 * 8 + c.pad_c;
  const bool f32 = c.out == GemmOut::kF32;

  // Inputs: bf16 values, NaN in the stride gaps.
  auto fill = [&](int rows, int64_t ld) {
    std::vector<float> v = random_bf16_floats(rng, static_cast<size_t>(rows * ld));
    for (int i = 0; i < rows; ++i) {
      for (int64_t j = k; j < ld; ++j) v[static_cast<size_t>(i * ld + j)] = NAN;
    }
    return v;
  };
  const std::vector<float> a = fill(m, lda), w = fill(n, ldw);
  const std::vector<float> bias = random_floats(rng, static_cast<size_t>(n));
  // Old c for accumulate: values in [m][n], NaN in the gaps and in the canary row m.
  std::vector<float> c_old(static_cast<size_t>((m + 1) * ldc), NAN);
  if (c.accumulate) {
    const std::vector<float> r = random_floats(rng, static_cast<size_t>(m * n));
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) c_old[static_cast<size_t>(i * ldc + j)] = r[static_cast<size_t>(i * n + j)];
    }
  }

  std::vector<double> want(static_cast<size_t>(m * n)), mag(want.size());
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double s = 0, t = 0;
      for (int kk = 0; kk < k; ++kk) {
        const double p = static_cast<double>(a[static_cast<size_t>(i * lda + kk)]) * w[static_cast<size_t>(j * ldw + kk)];
        s += p;
        t += std::fabs(p);
      }
      if (c.bias) {
        s += bias[static_cast<size_t>(j)];
        t += std::fabs(bias[static_cast<size_t>(j)]);
      }
      if (c.accumulate) {
        s += c_old[static_cast<size_t>(i * ldc + j)];
        t += std::fabs(c_old[static_cast<size_t>(i * ldc + j)]);
      }
      want[static_cast<size_t>(i * n + j)] = s;
      mag[static_cast<size_t>(i * n + j)] = t;
    }
  }

  DeviceArray<bf16_bits> d_a(*g.device, to_bf16(a));
  DeviceArray<bf16_bits> d_w(*g.device, to_bf16(w));
  DeviceArray<float> d_bias(*g.device, bias);
  DeviceArray<float> d_c32(*g.device, f32 ? static_cast<size_t>((m + 1) * ldc) : 1);
  DeviceArray<bf16_bits> d_c16(*g.device, f32 ? 1 : static_cast<size_t>((m + 1) * ldc));
  DeviceArray<float> d_ws(*g.device, static_cast<size_t>(tandem::gpu::gemm_workspace_floats(m, n)));

  // The auto plan, then (SIMT) other paths and split counts, each distinct plan once.
  tandem::gpu::GemmArgs plan_args;
  plan_args.m = m;
  plan_args.n = n;
  plan_args.k = k;
  plan_args.workspace = d_ws.get();
  plan_args.workspace_floats = static_cast<int64_t>(d_ws.size());
  auto plan_of = [&](GemmPath path, int want) {  // (path, k splits) gemm_run takes
    if (path == GemmPath::kAuto || path == GemmPath::kRows) {
      GemmRowsPlan rows;
      if (gemm_rows_plan(plan_args, want, rows)) return std::make_pair(GemmPath::kRows, rows.splits);
      path = gemm_choose_mma(plan_args);
    }
    int splits = 1;
    if (path == GemmPath::kMmaLarge) gemm_mma_split<GemmMmaLarge>(plan_args, want, &splits);
    if (path == GemmPath::kMmaMid) gemm_mma_split<GemmMmaMid>(plan_args, want, &splits);
    if (path == GemmPath::kMmaSmall) gemm_mma_split<GemmMmaSmall>(plan_args, want, &splits);
    return std::make_pair(path, splits);
  };
  std::vector<GpuGemmPath> wanted = {{GemmPath::kAuto, 0, "auto"}};
  if (g.name == "simt") {
    if (m <= kRowsMaxM) {
      // Few rows: the rows kernel's splits, and the 64x128 tile (the fallback) with auto splits
      // (not on the longest k, to keep the suite fast).
      wanted.push_back({GemmPath::kRows, 1, "rows"});
      wanted.push_back({GemmPath::kRows, 3, "rows"});
      if (k <= 1032) wanted.push_back({GemmPath::kMmaSmall, 0, "mma 64x128"});
    } else {
      wanted.push_back({GemmPath::kMmaSmall, 1, "mma 64x128"});
      wanted.push_back({GemmPath::kMmaSmall, 3, "mma 64x128"});
      wanted.push_back({GemmPath::kMmaMid, 1, "mma 128x128"});
      wanted.push_back({GemmPath::kMmaLarge, 2, "mma 128x256"});
    }
  }
  std::vector<GpuGemmPath> paths;
  std::vector<std::pair<GemmPath, int>> seen;
  for (const GpuGemmPath& p : wanted) {
    const auto plan = plan_of(p.path, p.rows_splits);
    if (std::find(seen.begin(), seen.end(), plan) != seen.end()) continue;
    seen.push_back(plan);
    paths.push_back({p.path, p.rows_splits, p.name});
    *splits_seen |= plan.second > 1 ? (plan.first == GemmPath::kRows ? 1 : 2) : 0;
  }

  for (const GpuGemmPath& p : paths) {
    if (f32) {
      d_c32.upload(c_old);  // NaN everywhere unless accumulating
    } else {
      d_c16.poison();
    }
    d_ws.poison();
    tandem::gpu::GemmArgs args;
    args.m = m;
    args.n = n;
    args.k = k;
    args.a = d_a.get();
    args.lda = lda;
    args.w = d_w.get();
    args.ldw = ldw;
    args.bias = c.bias ? d_bias.get() : nullptr;
    args.c = f32 ? static_cast<void*>(d_c32.get()) : static_cast<void*>(d_c16.get());
    args.ldc = ldc;
    args.out = c.out;
    args.accumulate = c.accumulate;
    args.workspace = d_ws.get();
    args.workspace_floats = static_cast<int64_t>(d_ws.size());
    if (p.path == GemmPath::kAuto) {
      g.kernels->gemm(args, g.stream());
    } else {
      gemm_run(args, g.stream(), p.path, p.rows_splits);
    }
    g.device->synchronize();
    ++*runs;
    const std::vector<float> got = f32 ? d_c32.download() : from_bf16(d_c16.download());

    double worst = 0;  // error over tolerance, worst element
    int bad = 0, first_i = -1, first_j = -1, gap_written = 0;
    for (int i = 0; i <= m; ++i) {
      for (int64_t j = 0; j < ldc; ++j) {
        const float v = got[static_cast<size_t>(i * ldc + j)];
        if (i == m || j >= n) {
          gap_written += !std::isnan(v);
          continue;
        }
        const double ref = want[static_cast<size_t>(i * n + j)];
        const double tol = 2e-4 * mag[static_cast<size_t>(i * n + j)] + (f32 ? 0.0 : std::fabs(ref) / 256.0) + 1e-30;
        const double e = std::isfinite(v) ? std::fabs(v - ref) / tol : INFINITY;
        worst = std::max(worst, e);
        if (e > 1.0 && bad++ == 0) {
          first_i = i;
          first_j = static_cast<int>(j);
        }
      }
    }
    const int splits = plan_of(p.path, p.rows_splits).second;
    CHECK(bad == 0, "gemm %s (%d splits) m=%d n=%d k=%d %s%s%s: %d elements off (first [%d][%d]: got %g want %g), worst %.3g x tolerance",
          p.name, splits, m, n, k, f32 ? "f32" : "bf16", c.bias ? " bias" : "", c.accumulate ? " accumulate" : "", bad, first_i,
          first_j, bad ? static_cast<double>(got[static_cast<size_t>(first_i * ldc + first_j)]) : 0.0,
          bad ? want[static_cast<size_t>(first_i * n + first_j)] : 0.0, worst);
    CHECK(gap_written == 0, "gemm %s (%d splits) m=%d n=%d k=%d: %d elements written outside [m][n] (row gaps, row m)", p.name,
          splits, m, n, k, gap_written);
    // Split-K partials fill [splits][m][n] of the workspace and nothing after it.
    const std::vector<float> ws = d_ws.download();
    int ws_written = 0;
    for (size_t i = static_cast<size_t>(splits > 1 ? splits : 0) * m * n; i < ws.size(); ++i) ws_written += !std::isnan(ws[i]);
    CHECK(ws_written == 0, "gemm %s (%d splits) m=%d n=%d k=%d: %d workspace floats written past [splits][m][n]", p.name, splits,
          m, n, k, ws_written);
  }
}

inline void test_gemm(Gpu& g) {
  using tandem::gpu::GemmOut;
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<GpuGemmCase> cases = {
      // few rows (decode); auto splits k for m = 1 (k 1032: 5 ranges of 256, the last 8 long) and m = 2, 16
      {1, 97, 1032, 8, 24, 8, true, GemmOut::kF32, false},
      {2, 200, 264, 0, 8, 8, false, GemmOut::kBf16, false},
      {3, 129, 40, 16, 0, 8, true, GemmOut::kF32, true},
      {7, 264, 96, 8, 8, 0, true, GemmOut::kBf16, false},
      {16, 97, 1032, 0, 0, 8, false, GemmOut::kF32, true},
      {16, 33, 8, 8, 8, 16, true, GemmOut::kBf16, false},
      {9, 33, 3336, 0, 8, 8, true, GemmOut::kF32, false},  // one split stages k in 2 chunks (16 rows: 3072 max)
      // many rows (tensor cores)
      {17, 129, 32, 8, 0, 8, true, GemmOut::kBf16, false},
      {33, 200, 264, 0, 16, 0, true, GemmOut::kF32, true},
      {64, 264, 40, 8, 8, 8, false, GemmOut::kF32, false},
      {65, 97, 1032, 8, 0, 0, true, GemmOut::kF32, false},
      {130, 129, 96, 0, 8, 8, false, GemmOut::kBf16, false},
      {257, 200, 200, 8, 8, 8, true, GemmOut::kF32, true},
      {257, 33, 8, 0, 0, 8, true, GemmOut::kBf16, false},
  };
  uint32_t seed = 4100;
  int runs = 0, splits_seen = 0;
  for (const auto& c : cases) check_gemm_case(g, c, seed++, &runs, &splits_seen);
  if (g.name != "simt") {
    const std::vector<GpuGemmCase> large = {
        {4, 20001, 1032, 8, 8, 8, true, GemmOut::kBf16, false},      // few rows, no split, 626 blocks
        {16, 4095, 4096, 0, 8, 0, true, GemmOut::kF32, true},        // 16 rows, 3 splits of 1536
        {12, 9001, 4096, 8, 0, 8, false, GemmOut::kBf16, false},     // 16 rows, no split, k staged in 2 chunks
        {200, 8500, 136, 8, 0, 8, true, GemmOut::kBf16, false},      // 128x128: 134 tiles
        {1100, 3900, 264, 0, 0, 8, true, GemmOut::kF32, true},       // 128x256: 144 tiles
    };
    for (const auto& c : large) check_gemm_case(g, c, seed++, &runs, &splits_seen);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (g.name == "simt") CHECK(splits_seen == 3, "gemm: split-K of both paths should be among the runs (%d)", splits_seen);
  std::printf("gpu gemm: %zu shapes, %d plans (rows and mma 64x128 / 128x128 / 128x256 tiles, 1 to 5 k splits) checked on %s in %.1f s\n",
              cases.size(), runs, g.name.c_str(), secs);
}

}  // namespace tandem_test::gpu
