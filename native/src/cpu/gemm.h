// CPU GEMM/GEMV over WeightMatrix (f32 or bf16 panels, f32 accumulate), multi-threaded over
// weight panels (blocks of output rows). The micro kernel multiplies a vector of output rows by
// one broadcast activation per k, for up to kMr tokens at once (8 on AVX-512, 6 on AVX2):
//  - few tokens (decode, small batches): one pass over each panel straight from memory. This
//    is bound by weight bytes, so bf16 storage roughly halves its time.
//  - many tokens (prefill): k-blocks of a panel (bf16 widened once into an L1 buffer) are reused
//    by every token tile, so the loop is bound by FMAs instead.
#pragma once

#include <cstdint>

namespace tandem {

class ThreadPool;

namespace cpu {

class WeightMatrix;

/**
 * Y[t][n] = X[t][k] * W[n][k]^T (+ bias[n]), with W in Hugging Face [out, in] layout,
 * n = w.rows(), k = w.cols(). X and Y are row-major f32.
 */
void matmul_nt(ThreadPool& pool, const float* x, int64_t t, const WeightMatrix& w, const float* bias,
               float* y);

/** Plain double-accumulating product, for tests. */
void matmul_nt_reference(const float* x, int64_t t, const WeightMatrix& w, const float* bias, float* y);

}  // namespace cpu
}  // namespace tandem
