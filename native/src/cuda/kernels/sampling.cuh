// Placeholder sampler: greedy arg max only, one block per row. Replaced by the full sampler.
#pragma once

#include "../kernel_api.h"
#include "launch.h"
#include "reduce.cuh"

namespace tandem::gpu::TD_NS {

TD_GLOBAL void sample_greedy_kernel(SampleArgs a) {
  TD_SHARED(ArgMax, scratch, 32);
  const SampleRowDesc row = a.rows[blockIdx.x];
  const float* logits = a.logits + static_cast<int64_t>(row.logit_row) * a.logit_stride;
  ArgMax best{-INFINITY, 0x7fffffff};
  for (int v = static_cast<int>(threadIdx.x); v < a.vocab; v += static_cast<int>(blockDim.x)) best = better(best, ArgMax{logits[v], v});
  best = block_argmax(best, scratch);
  if (threadIdx.x == 0) {
    a.out_tokens[blockIdx.x] = best.index;
    a.out_logprobs[blockIdx.x] = NAN;
    for (int k = 0; k < a.top_stride; ++k) {
      a.out_top_ids[static_cast<int64_t>(blockIdx.x) * a.top_stride + k] = -1;
      a.out_top_logprobs[static_cast<int64_t>(blockIdx.x) * a.top_stride + k] = NAN;
    }
  }
}

inline void launch_sample(const SampleArgs& a, void* stream) {
  td::launch(sample_greedy_kernel, {static_cast<unsigned>(a.num_rows)}, 128, 0, stream, a);
}

}  // namespace tandem::gpu::TD_NS
