// Placeholder GEMM: one thread per output, f32 accumulation. Replaced by the tiled kernels.
#pragma once

#include "../kernel_api.h"
#include "launch.h"

namespace tandem::gpu::TD_NS {

TD_GLOBAL void gemm_naive_kernel(GemmArgs g) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx < static_cast<int64_t>(g.m) * g.n) {
    const int64_t i = idx / g.n, j = idx % g.n;
    float acc = 0.0f;
    for (int k = 0; k < g.k; ++k) acc += td::bf16_to_float(g.a[i * g.lda + k]) * td::bf16_to_float(g.w[j * g.ldw + k]);
    if (g.bias != nullptr) acc += g.bias[j];
    if (g.out == GemmOut::kF32) {
      float* c = static_cast<float*>(g.c) + i * g.ldc + j;
      *c = g.accumulate ? *c + acc : acc;
    } else {
      static_cast<td::bf16_bits*>(g.c)[i * g.ldc + j] = td::float_to_bf16(acc);
    }
  }
}

inline void launch_gemm(const GemmArgs& g, void* stream) {
  const int64_t total = static_cast<int64_t>(g.m) * g.n;
  td::launch(gemm_naive_kernel, {td::ceil_div(total, 128)}, 128, 0, stream, g);
}

}  // namespace tandem::gpu::TD_NS
