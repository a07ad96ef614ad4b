// CPU f32 element-wise kernels (attention dots, norms, RoPE, SiLU). Inner loops run over
// contiguous memory with GCC vector extensions (16 lanes on AVX-512 targets, else 8), which the
// compiler lowers to the target's registers. Matrix products live in gemm.h.
#pragma once

#include <cstdint>

namespace tandem {
namespace cpu {

float dot(const float* a, const float* b, int64_t n);

/** y += alpha * x over n elements. */
void axpy(float alpha, const float* x, float* y, int64_t n);

/** out = x / sqrt(mean(x^2) + eps) * weight, computed in f32 as transformers does. */
void rmsnorm(const float* x, const float* weight, int64_t n, float eps, float* out);

/** Rotates one head in place, HF rotate_half convention: pairs (i, i + d/2). */
void rope_rotate(float* head, const float* cos, const float* sin, int64_t head_dim);

/** out[i] = silu(gate[i]) * up[i]. */
void silu_mul(const float* gate, const float* up, float* out, int64_t n);

}  // namespace cpu
}  // namespace tandem
