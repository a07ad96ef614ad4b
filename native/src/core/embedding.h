// Host pooling of an embedding pass, written once for every backend (CPU on its residual
// stream in place, GPU after one download of it), so equal hidden states pool to equal bits.
#pragma once

#include <cstdint>

#include "backend.h"

namespace tandem {

class ThreadPool;

/**
 * Pools each sequence of `batch` from `x` (the residual stream before the final norm,
 * [num_tokens][hidden], rows in batch token order) into dst [num_seqs][hidden], unnormalized.
 * One numeric order: every row through cpu::rmsnorm with the final norm's weight; kLast is that
 * row; kMean sums the rows in double, in token order, and divides once. Sequences run in
 * parallel on `pool`; each is computed by one thread, so the bits do not depend on threading.
 */
void pool_final_hidden(const float* x, const ForwardBatch& batch, Pooling pooling, const float* norm_weight, int64_t hidden,
                       float eps, float* dst, ThreadPool& pool);

}  // namespace tandem
