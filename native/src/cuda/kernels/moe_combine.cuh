// The MoE combine (moe_api.h): token t's entries' weighted outputs y[slot] added in ascending
// expert id (transformers' index_add_ order), then the gated shared expert, into the residual
// x[t]; then, when asked, the row's RMSNorm (rmsnorm_row at rmsnorm_kernel's block size, so the
// same bits). One token's row is the work of one 256-thread block, done either
//   - by its own launch (moe_combine_kernel: a CTA per token), or
//   - inside the down GEMM's launch (moe_combine_arrive, MoeGemmArgs::token_counters): each CTA
//     counts itself in on the tokens of its real rows once its y columns are stored; a token is
//     done after top_k x (column blocks) arrivals (its k entries sit in k different experts'
//     tiles, and every column block of a tile stores its share), and the CTA that makes the last
//     arrival combines it, reading the other CTAs' y past L1. A decode step spends no launch on it.
// Both call moe_combine_row, so they give the same bits.
#pragma once

#include "../moe_api.h"
#include "last_block.cuh"
#include "launch.h"
#include "reduce.cuh"
#include "row_ops.cuh"

namespace tandem::gpu::TD_NS {

inline constexpr unsigned kMoeCombineThreads = kRmsNormThreads;  // its fused RMSNorm gives rmsnorm_kernel's bits

/**
 * Token t's combine by the whole block (blockDim must be kMoeCombineThreads): order (top_k + 1
 * ints) and scratch (32 floats) are shared memory; `load` reads y (past L1 where other CTAs of
 * this launch wrote it).
 */
template <class Load>
TD_DEVICE void moe_combine_row(const MoeCombineArgs& a, int t, int32_t* order, float* scratch, const Load& load) {
  const int tid = static_cast<int>(threadIdx.x), k = a.top_k, h = a.hidden;
  const int32_t* ids = a.ids + static_cast<int64_t>(t) * k;
  if (tid == 0) {  // insertion sort of the token's k slots by expert id
    for (int j = 0; j < k; ++j) {
      int p = j;
      while (p > 0 && ids[order[p - 1]] > ids[j]) {
        order[p] = order[p - 1];
        --p;
      }
      order[p] = j;
    }
  }
  float gate = 0.0f;
  if (a.shared_gate != nullptr) {
    const td::bf16_bits* x = a.xn + static_cast<int64_t>(t) * h;
    float dot = 0.0f;
    for (int i = tid; i < h; i += static_cast<int>(blockDim.x)) dot += td::bf16_to_float(x[i]) * td::bf16_to_float(a.shared_gate[i]);
    dot = block_sum(dot, scratch);  // its barriers also publish order[]
    gate = 1.0f / (1.0f + expf(-dot));
  } else {
    td::sync_threads();
  }
  float* xr = a.x + static_cast<int64_t>(t) * h;
  for (int i = tid; i < h; i += static_cast<int>(blockDim.x)) {
    float o = 0.0f;
    for (int j = 0; j < k; ++j) o += load(a.y + static_cast<int64_t>(a.position[static_cast<int64_t>(t) * k + order[j]]) * h + i);
    if (a.shared_gate != nullptr) o += gate * a.shared[static_cast<int64_t>(t) * h + i];
    xr[i] += o;
  }
  // Each thread reads back the elements it wrote (the same thread-stride order).
  if (a.norm_out != nullptr) rmsnorm_row(xr, a.norm_weight, h, a.norm_eps, a.norm_out + static_cast<int64_t>(t) * h, scratch, PlainLoad{});
  td::sync_threads();  // order[] and scratch are free again (the caller may combine another token)
}

TD_GLOBAL void TD_LAUNCH_BOUNDS(kMoeCombineThreads) moe_combine_kernel(MoeCombineArgs a) {
  TD_SHARED(int32_t, order, kMaxMoeTopKPlus1);
  TD_SHARED(float, scratch, 32);
  td::grid_dependency_wait();
  td::grid_dependents_launch();
  moe_combine_row(a, static_cast<int>(blockIdx.x), order, scratch, PlainLoad{});
}

/**
 * Called by every thread of a down-GEMM CTA after its y stores: entry[r] (shared) holds the
 * entries of its `rows` slots (-1: padding). Counts the CTA in on each real row's token
 * (counters[t], left zero by the last arrival) and combines the tokens it finished.
 */
TD_DEVICE void moe_combine_arrive(const MoeCombineArgs& a, int32_t* counters, const int32_t* entry, int rows, int column_blocks) {
  TD_SHARED(int32_t, finished, kMoeTileRows);
  TD_SHARED(int32_t, order, kMaxMoeTopKPlus1);
  TD_SHARED(float, scratch, 32);
  fence_device();  // this thread's y stores reach the device before the CTA counts in
  td::sync_threads();
  const int tid = static_cast<int>(threadIdx.x);
  if (tid < rows) {
    const int e = entry[tid];
    finished[tid] = -1;
    if (e >= 0) {
      const int t = e / a.top_k;
      if (td::atomic_add(&counters[t], 1) == a.top_k * column_blocks - 1) {
        counters[t] = 0;
        finished[tid] = t;
      }
    }
  }
  td::sync_threads();
  for (int r = 0; r < rows; ++r) {
    if (finished[r] < 0) continue;  // uniform: shared memory
    fence_device();  // acquire: the other CTAs' y rows of this token are visible from here on
    moe_combine_row(a, finished[r], order, scratch, CgLoad{});
  }
}

inline void launch_moe_combine(const MoeCombineArgs& a, void* stream, bool overlap) {
  td::launch_dependent(overlap, moe_combine_kernel, {static_cast<unsigned>(a.num_tokens)}, kMoeCombineThreads, 0, stream, a);
}

}  // namespace tandem::gpu::TD_NS
