// What both GEMM paths share: the output epilogue (bias, accumulate, f32 or bf16 store), the
// split-K reduction over the workspace, a streaming 16-byte weight load, the unroll pragma for
// loops over register arrays, and launch bounds with a minimum of resident blocks (CUDA only).
#pragma once

#include "../kernel_api.h"
#include "../kernel_lang.h"
#include "launch.h"

#if TD_CUDA
#define TD_GEMM_UNROLL _Pragma("unroll")
#define TD_GEMM_BOUNDS(threads, min_blocks) __launch_bounds__(threads, min_blocks)
#else
#define TD_GEMM_UNROLL _Pragma("GCC unroll 16")
#define TD_GEMM_BOUNDS(threads, min_blocks)
#endif

namespace tandem::gpu::TD_NS {

inline constexpr int kGemmSms = 132;       // H100 SXM; fixed, so plans (and results) do not vary by card
inline constexpr int kGemmMaxSplits = 16;

/** Splits whose partials fit the caller's workspace (at least 1). */
inline int gemm_splits_that_fit(const GemmArgs& g) {
  const int64_t per_split = static_cast<int64_t>(g.m) * g.n;
  if (g.workspace == nullptr || per_split <= 0) return 1;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(kGemmMaxSplits, g.workspace_floats / per_split)));
}  // gemm_workspace_floats(m, n) = 16 m n: [split][m][n] partials

struct alignas(8) GemmF32x2 {
  float x, y;
};

/** out[row][col] = v + bias[col] (+ out[row][col] when accumulate), as f32 or bf16. */
TD_DEVICE void gemm_store1(const GemmArgs& g, int64_t row, int col, float v) {
  if (g.bias != nullptr) v += g.bias[col];
  if (g.out == GemmOut::kF32) {
    float* p = static_cast<float*>(g.c) + row * g.ldc + col;
    *p = g.accumulate ? *p + v : v;
  } else {
    static_cast<td::bf16_bits*>(g.c)[row * g.ldc + col] = td::float_to_bf16(v);
  }
}

/**
 * Columns col and col + 1 (col even, col < n) of one row; b0, b1 are the bias values already
 * loaded (0 without bias). One 8-byte (f32) or 4-byte (bf16) store when both are inside n:
 * ldc is a multiple of 4 (f32) or 8 (bf16) and the base is 16-byte aligned.
 */
TD_DEVICE void gemm_store2(const GemmArgs& g, int64_t row, int col, float v0, float v1, float b0, float b1) {
  v0 += b0;
  v1 += b1;
  if (g.out == GemmOut::kF32) {
    float* p = static_cast<float*>(g.c) + row * g.ldc + col;
    if (col + 1 < g.n) {
      GemmF32x2* p2 = reinterpret_cast<GemmF32x2*>(p);
      if (g.accumulate) {
        const GemmF32x2 old = *p2;
        v0 += old.x;
        v1 += old.y;
      }
      GemmF32x2 out;
      out.x = v0;
      out.y = v1;
      *p2 = out;
    } else {
      *p = g.accumulate ? *p + v0 : v0;
    }
  } else {
    td::bf16_bits* p = static_cast<td::bf16_bits*>(g.c) + row * g.ldc + col;
    if (col + 1 < g.n) {
      *reinterpret_cast<uint32_t*>(p) = td::pack_bf16x2(v0, v1);
    } else {
      *p = td::float_to_bf16(v0);
    }
  }
}

/** 16 bytes of weights read once: not kept in L1 (CUDA), a plain load (SIMT). */
TD_DEVICE td::vec16 gemm_load_stream(const td::bf16_bits* p) {
#if TD_CUDA
  td::vec16 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
#else
  return *reinterpret_cast<const td::vec16*>(p);
#endif
}

/** 8 bytes of weights read once (8 e4m3): one 64-bit load not kept in L1 (CUDA), plain loads (SIMT). */
TD_DEVICE void gemm_load_stream8(const void* p, uint32_t& lo, uint32_t& hi) {
#if TD_CUDA
  asm("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];\n" : "=r"(lo), "=r"(hi) : "l"(p));
#else
  lo = static_cast<const uint32_t*>(p)[0];
  hi = static_cast<const uint32_t*>(p)[1];
#endif
}

// Split-K: out[i][j] = epilogue(sum over splits s = 0, 1, ... of workspace[s][i][j]), in split
// order (deterministic: no atomics).
template <int kUnused = 0>
TD_GLOBAL void gemm_splitk_reduce_kernel(GemmArgs g, int splits) {
  const int64_t total = static_cast<int64_t>(g.m) * g.n;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    float s = g.workspace[i];
    for (int p = 1; p < splits; ++p) s += g.workspace[p * total + i];
    const int64_t r = i / g.n;
    gemm_store1(g, r, static_cast<int>(i - r * g.n), s);
  }
}

inline void gemm_splitk_reduce(const GemmArgs& g, int splits, void* stream) {
  const int64_t total = static_cast<int64_t>(g.m) * g.n;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 1024));
  td::launch(gemm_splitk_reduce_kernel<0>, {blocks}, 256, 0, stream, g, splits);
}

}  // namespace tandem::gpu::TD_NS
