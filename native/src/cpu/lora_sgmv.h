// The CPU backend's multi-LoRA kernel: a segmented gather-GEMM in two halves (Punica's SGMV).
// Tokens of one step come in runs that share an adapter (segments); for each segment the
// shrink computes t = x·Aᵀ (rank columns) and the expand adds scale·t·Bᵀ into the base GEMM's
// output columns. The base weights are never merged, and one call covers every adapter of
// the step.
#pragma once

#include <cstdint>
#include <vector>

#include "../core/lora.h"

namespace tandem {

class ThreadPool;

namespace cpu {

/** A run of consecutive tokens [begin, end) of a forward batch that use one adapter. */
struct LoraSegment {
  int64_t begin = 0, end = 0;
  const LoraAdapter* adapter = nullptr;
};

/**
 * out[i][col_offset + j] += scale · Σ_k (Σ_c x[i][c]·A[k][c]) · B[j][k] for every token i of
 * every segment whose adapter targets `target` in `layer`. `scratch` is grown as needed.
 */
void sgmv_shrink_expand(ThreadPool& pool, const std::vector<LoraSegment>& segments, int64_t layer, LoraTarget target,
                        const float* x, int64_t x_stride, int64_t in_features, float* out, int64_t out_stride,
                        int64_t col_offset, int64_t out_features, std::vector<float>& scratch);

}  // namespace cpu
}  // namespace tandem
