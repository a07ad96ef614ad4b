// MoE grouped GEMMs and the weighted combine (moe_api.h). A CTA owns one tile: kMoeTileRows
// consecutive slots of one expert's run (the group kernel padded every run to a multiple of
// it, so a tile never spans two experts; padding slots hold entry -1 and are skipped) and
// cols_per_cta output columns. The tile's A rows are staged whole in shared memory (bf16),
// then each warp takes one output column at a time and streams that weight row once with
// 16-byte loads, multiplying it into all the tile's rows (8 accumulators per lane), reduced
// with warp shuffles. So every weight row of an expert is read once per tile: a decode step
// (at most one tile per expert hit) reads exactly the chosen experts' weights, once.
//   gate/up: A rows are xn[token] (gathered); the warp reads the gate row and the up row of its
//            column together and stores bf16(SiLU(gate) x up) (the CPU's silu_mul order).
//   down:    A rows are act[slot]; the epilogue multiplies by the entry's routing weight and
//            stores f32 y[slot] (the weighted un-permute happens in combine, a gather).
// FP8 experts (MoeGemmArgs::w8): 8-byte loads of 8 e4m3 weights, each times its row's scale for
// that k group in f32, so a decode step reads half the bytes of bf16 experts.
// Grids are upper bounds (moe_max_slots / kMoeTileRows tiles): a CTA past the step's padded
// total returns before its first barrier, whole, so captured graphs fit any routing.
#pragma once

#include "../moe_api.h"
#include "bf16_vec.cuh"
#include "fp8_vec.cuh"
#include "launch.h"
#include "reduce.cuh"

namespace tandem::gpu::TD_NS {

inline constexpr unsigned kMoeGemmThreads = 256;

/** The expert whose run holds slot: the last e with padded_offsets[e] <= slot < padded_offsets[e + 1]. */
TD_DEVICE int moe_expert_of(const int32_t* po, int num_experts, int slot) {
  int lo = 0, hi = num_experts - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (po[mid] <= slot) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

TD_DEVICE float moe_silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// kDown false: gate/up (A = xn by token, out act bf16); true: down (A = act by slot, out y f32).
// kFp8: e4m3 weights with scales (a.w8).
template <bool kDown, bool kFp8>
TD_GLOBAL void TD_LAUNCH_BOUNDS(kMoeGemmThreads) moe_gemm_kernel(MoeGemmArgs a) {
  constexpr int R = kMoeTileRows;
  TD_DYNAMIC_SHARED(td::bf16_bits, xs);  // [R][k]
  TD_SHARED(int32_t, entry, R);
  TD_SHARED(int32_t, valid_rows, 1);
  const int total = a.padded_offsets[a.num_experts];
  const int slot0 = static_cast<int>(blockIdx.x) * R;
  if (slot0 >= total) return;  // the whole CTA, before any barrier
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, warps = static_cast<int>(blockDim.x / 32);
  const unsigned lane = td::lane_id();
  const int expert = moe_expert_of(a.padded_offsets, a.num_experts, slot0);
  const int k = kDown ? a.inter : a.hidden;      // reduction length
  const int n_out = kDown ? a.hidden : a.inter;  // output columns
  if (tid < R) entry[tid] = a.sorted[slot0 + tid];
  td::sync_threads();
  if (tid == 0) {  // a run's real slots come first, its padding last
    int v = 0;
    while (v < R && entry[v] >= 0) ++v;
    valid_rows[0] = v;
  }
  for (int i = tid * 8; i < R * k; i += static_cast<int>(blockDim.x) * 8) {
    const int r = i / k, c = i % k;
    const int e = entry[r];
    td::vec16 v{0, 0, 0, 0};
    if (e >= 0) {
      const td::bf16_bits* row = kDown ? a.a + static_cast<int64_t>(slot0 + r) * k : a.a + static_cast<int64_t>(e / a.top_k) * k;
      v = *reinterpret_cast<const td::vec16*>(row + c);
    }
    *reinterpret_cast<td::vec16*>(xs + i) = v;
  }
  td::sync_threads();
  const int rows = valid_rows[0];  // a decode tile often has one: the padding costs no FMAs
  const int c_begin = static_cast<int>(blockIdx.y) * a.cols_per_cta;
  const int c_end = td::imin(c_begin + a.cols_per_cta, n_out);
  for (int n = c_begin + warp; n < c_end; n += warps) {
    // gate/up: rows n (gate) and inter + n (up) of expert's [2 inter][hidden]; down: row n of [hidden][inter].
    const int64_t row0 = static_cast<int64_t>(expert) * (kDown ? a.hidden : 2 * a.inter) + n, row1 = row0 + a.inter;
    const td::bf16_bits* w0 = a.w + row0 * k;
    const td::bf16_bits* w1 = w0 + static_cast<int64_t>(a.inter) * k;
    float acc0[R], acc1[R];
    for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = 0.0f;
    for (int i = static_cast<int>(lane) * 8; i < k; i += 256) {
      float wv0[8], wv1[8] = {}, xv[8];
      if constexpr (kFp8) {
        const int gi = i / a.w8_group_k;
        fp8x8_to_float(a.w8 + row0 * k + i, a.w8_scales[row0 * a.w8_groups + gi], wv0);
        if constexpr (!kDown) fp8x8_to_float(a.w8 + row1 * k + i, a.w8_scales[row1 * a.w8_groups + gi], wv1);
      } else {
        unpack8(*reinterpret_cast<const td::vec16*>(w0 + i), wv0);
        if constexpr (!kDown) unpack8(*reinterpret_cast<const td::vec16*>(w1 + i), wv1);
      }
      for (int r = 0; r < R; ++r) {
        if (r >= rows) break;
        unpack8(*reinterpret_cast<const td::vec16*>(xs + r * k + i), xv);
        for (int j = 0; j < 8; ++j) {
          acc0[r] += wv0[j] * xv[j];
          if constexpr (!kDown) acc1[r] += wv1[j] * xv[j];
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      if (r >= rows) break;  // the CTA's (uniform): padding rows cost no shuffles either
      const float v0 = warp_sum(acc0[r]);
      const float v1 = kDown ? 0.0f : warp_sum(acc1[r]);
      const int e = entry[r];
      if (lane == static_cast<unsigned>(r) && e >= 0) {
        const int64_t slot = slot0 + r;
        if (kDown) {
          a.y[slot * a.hidden + n] = v0 * a.weights[e];
        } else {
          a.act[slot * a.inter + n] = td::float_to_bf16(moe_silu_mul(v0, v1));
        }
      }
    }
  }
}

inline constexpr unsigned kMoeCombineThreads = 256;

// One CTA per token: its entries' weighted outputs in ascending expert id (transformers'
// index_add_ order), then the gated shared expert, added into the residual.
TD_GLOBAL void TD_LAUNCH_BOUNDS(kMoeCombineThreads) moe_combine_kernel(MoeCombineArgs a) {
  TD_SHARED(int32_t, order, kMaxMoeTopKPlus1);
  TD_SHARED(float, scratch, 32);
  const int t = static_cast<int>(blockIdx.x), tid = static_cast<int>(threadIdx.x), k = a.top_k, h = a.hidden;
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
    for (int j = 0; j < k; ++j) o += a.y[static_cast<int64_t>(a.position[static_cast<int64_t>(t) * k + order[j]]) * h + i];
    if (a.shared_gate != nullptr) o += gate * a.shared[static_cast<int64_t>(t) * h + i];
    xr[i] += o;
  }
}

inline void launch_moe_gemm(const MoeGemmArgs& a, bool down, void* stream) {
  const int n_out = down ? a.hidden : a.inter, k = down ? a.inter : a.hidden;
  const td::Grid grid{static_cast<unsigned>(a.max_slots / kMoeTileRows), td::ceil_div(n_out, a.cols_per_cta), 1};
  const size_t shared = static_cast<size_t>(kMoeTileRows) * static_cast<size_t>(k) * 2;
  if (a.w8 != nullptr) {
    if (down) {
      td::launch(moe_gemm_kernel<true, true>, grid, kMoeGemmThreads, shared, stream, a);
    } else {
      td::launch(moe_gemm_kernel<false, true>, grid, kMoeGemmThreads, shared, stream, a);
    }
  } else if (down) {
    td::launch(moe_gemm_kernel<true, false>, grid, kMoeGemmThreads, shared, stream, a);
  } else {
    td::launch(moe_gemm_kernel<false, false>, grid, kMoeGemmThreads, shared, stream, a);
  }
}

inline void launch_moe_combine(const MoeCombineArgs& a, void* stream) {
  td::launch(moe_combine_kernel, {static_cast<unsigned>(a.num_tokens)}, kMoeCombineThreads, 0, stream, a);
}

}  // namespace tandem::gpu::TD_NS
