// The GEMM of the GPU backend: c[m][n] = a[m][:] . w[n][:] + bias[n] (+ c[m][n]), bf16 a and w,
// f32 accumulation, f32 or bf16 c. Two paths; the plan picks one per shape:
//   - few rows (m <= kRowsMaxM = 16, decode): gemm_rows.cuh, bandwidth-bound. The weights are
//     the mma's 16-row A operand and the activation rows its 8-wide B, so an mma consumes 512
//     bytes of weights at any m (on CUDA cores a weight element cost m FMAs and its unpacking:
//     half cuBLASLt's speed at 8 rows on an H200), and 32 weight rows a CTA give n / 32 CTAs
//     to stream them, where a >= 64-row tile would waste >= 3/4 of its work with n / 128.
//     Split-K through the workspace when n alone cannot fill the GPU.
//   - many rows: gemm_mma.cuh, mma.sync tensor cores, one of three CTA tiles: 128x256 when
//     m > 256 and that still makes a full wave of CTAs (>= kGemmSms), else 128x128 when
//     m > 64 and that makes a full wave, else 64x128 (the most CTAs, for small products);
//     a grid still short of one CTA per SM splits k (>= 256 each) through the workspace.
// Every kernel is a template or inline, so a test translation unit may include this header
// beside kernels_simt.cc: the checks force each path on the SIMT target through gemm_run.
#pragma once

#include "../kernel_api.h"
#include "gemm_mma.cuh"
#include "gemm_rows.cuh"
#include "launch.h"

namespace tandem::gpu::TD_NS {

enum class GemmPath { kAuto, kRows, kMmaSmall, kMmaMid, kMmaLarge };

template <class C>
inline int64_t gemm_mma_tiles(const GemmArgs& g) {
  return static_cast<int64_t>((g.m + C::BM - 1) / C::BM) * ((g.n + C::BN - 1) / C::BN);
}

inline GemmPath gemm_choose_mma(const GemmArgs& g) {
  if (g.m > 256 && gemm_mma_tiles<GemmMmaLarge>(g) >= kGemmSms) return GemmPath::kMmaLarge;
  if (g.m > 64 && gemm_mma_tiles<GemmMmaMid>(g) >= kGemmSms) return GemmPath::kMmaMid;
  return GemmPath::kMmaSmall;
}

/**
 * Runs the product on `path` (kAuto: the plan above). splits > 0 asks for that many k splits
 * (a path may take fewer: the few-rows path at least 256 of k each, the mma path 64). A forced
 * kRows that does not apply falls back to the tensor-core path.
 */
inline void gemm_run(const GemmArgs& g, void* stream, GemmPath path, int splits = 0) {
  if (g.m <= 0 || g.n <= 0) return;
  if (path == GemmPath::kAuto || path == GemmPath::kRows) {
    GemmRowsPlan plan;
    if (gemm_rows_plan(g, splits, plan)) {
      gemm_rows_run(g, plan, stream);
      return;
    }
    path = gemm_choose_mma(g);
  }
  switch (path) {
    case GemmPath::kMmaLarge: gemm_mma_launch<GemmMmaLarge>(g, stream, splits); break;
    case GemmPath::kMmaMid: gemm_mma_launch<GemmMmaMid>(g, stream, splits); break;
    default: gemm_mma_launch<GemmMmaSmall>(g, stream, splits); break;
  }
}

inline void launch_gemm(const GemmArgs& g, void* stream) { gemm_run(g, stream, GemmPath::kAuto); }

}  // namespace tandem::gpu::TD_NS
