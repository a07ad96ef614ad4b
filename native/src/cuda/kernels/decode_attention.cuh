// The decode attention with its merge in the same launch: the split blocks of a (sequence, KV
// head) are kernels/attention.cuh's decode blocks, and the last of them to finish merges the
// group's query heads with the merge kernel's own body (attention_merge_head), reading the
// other blocks' partials past L1 (every row of a decode span: the span's blocks count in on its
// leader's counter). Same bits as attention_decode_kernel + attention_merge_kernel, one launch
// instead of two.
#pragma once

#include "attention.cuh"
#include "last_block.cuh"

namespace tandem::gpu::TD_NS {

// grid (num_decode, num_kv_heads, num_splits); counters: num_decode x num_kv_heads ints, zero.
template <int kUnused = 0>
TD_GLOBAL void TD_LAUNCH_BOUNDS(kAttentionThreads) attention_decode_merge_kernel(AttentionArgs a, int* counters) {
  TD_SHARED(int, flag, 1);
  td::grid_dependency_wait();  // before any early return: every block's exit implies the QKV's
  td::grid_dependents_launch();
  const int kv_head = static_cast<int>(blockIdx.y);
  const AttentionTile tile = attention_decode_tile(a);
  if (tile.num_tokens == 0) return;  // inside a span: its leader's blocks compute and merge it
  attention_tile<true>(a, tile, kv_head, static_cast<int>(blockIdx.z));
  int* counter = counters + static_cast<int64_t>(blockIdx.x) * a.geo.num_kv_heads + kv_head;
  if (!last_block_arrive(counter, a.num_splits, flag)) return;
  const int group = a.num_heads / a.geo.num_kv_heads;
  for (int t = 0; t < tile.num_tokens; ++t) {
    for (int h = kv_head * group; h < (kv_head + 1) * group; ++h) {
      attention_merge_head(a, static_cast<int>(blockIdx.x) + t, h, CgLoad{});
    }
  }
}

/** Decode sequences only (a.num_prefill_items is ignored); overlap: a programmatic dependent launch. */
inline void launch_decode_attention(const AttentionArgs& a, int* counters, void* stream, bool overlap) {
  if (a.num_decode <= 0) return;
  const size_t bytes = static_cast<size_t>(attention_shared_floats(attention_decode_rows(a), a.geo.head_dim)) * sizeof(float);
  td::launch_dependent(overlap, attention_decode_merge_kernel<0>,
             {static_cast<unsigned>(a.num_decode), static_cast<unsigned>(a.geo.num_kv_heads), static_cast<unsigned>(a.num_splits)},
             kAttentionThreads, bytes, stream, a, counters);
}

}  // namespace tandem::gpu::TD_NS
