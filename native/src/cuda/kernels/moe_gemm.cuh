// MoE grouped GEMMs over 8-row tiles (moe_api.h). A CTA owns one
// tile: kMoeTileRows consecutive slots of one expert's run (the grouping padded every run
// to a multiple of it, so a tile never spans two experts; padding slots hold entry -1 and are
// zero rows, never stored) and cols_per_cta output columns. The tile's A rows are staged whole
// in shared memory (bf16), then the CTA walks its columns 32 weight rows at a time with the
// few-rows GEMM's tensor-core loop (gemm_rows.cuh: the weights are mma's A operand, the tile's
// 8 rows one n8 B tile, 4 k-groups added in shared memory in a fixed order), so every weight
// row of an expert is read once per tile with 16-byte loads, and an mma consumes 512 bytes of
// weights however many of the 8 rows are real: a decode step (at most one tile per expert hit)
// reads exactly the chosen experts' weights, once, at the rate one row would.
//   gate/up: A rows are xn[token] (gathered); a pass's 32 weight rows are the gate rows of 16
//            output columns and the up rows of the same ones, and the epilogue stores
//            bf16(SiLU(gate) x up) from the two f32 sums (the CPU's silu_mul order).
//   down:    A rows are act[slot]; a pass is 32 output columns; the epilogue multiplies by the
//            entry's routing weight and stores f32 y[slot] (the weighted un-permute happens in
//            combine, a gather: with MoeGemmArgs::token_counters, in this launch, by the CTA
//            that finishes a token's last row, moe_combine.cuh).
// FP8 experts (MoeGemmArgs::w8): each lane's 8-byte load (one instruction) of 8 e4m3 weights becomes bf16(e4m3 x
// scale), the scale its row's for that k group (group widths are multiples of 8), before the
// mma: the tile the tensor-core prefill path builds (gemm_mma.cuh, GemmMmaFp8Rows), so both
// equal the bf16 kernels run on a dequantized copy, and a decode step reads half the bytes.
// Grids are upper bounds (moe_max_slots / kMoeTileRows tiles): a CTA past the step's padded
// total returns before its first barrier, whole, so captured graphs fit any routing.
#pragma once

#include "../moe_api.h"
#include "bf16_vec.cuh"
#include "fp8_vec.cuh"
#include "gemm_rows.cuh"
#include "launch.h"
#include "moe_combine.cuh"
#include "reduce.cuh"

namespace tandem::gpu::TD_NS {

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

// This lane's weights for one 256-wide step at kk (gemm_rows_load's layout: rows c = 0, 1 at
// kk and kk + 32), zeros past k. FP8: 8 e4m3 and their scale each, turned into bf16 by moe_rows_w.
struct MoeRowsFp8 {
  uint32_t q[2][2][2];
  float scale[2][2];
};

TD_DEVICE void moe_rows_load8(MoeRowsFp8& w, const MoeGemmArgs& a, const int64_t (&row)[2], int kk, int k) {
  TD_GEMM_UNROLL
  for (int u = 0; u < 2; ++u) {
    const int kc = kk + 32 * u;
    const bool ok = kc < k;
    TD_GEMM_UNROLL
    for (int c = 0; c < 2; ++c) {
      w.q[u][c][0] = w.q[u][c][1] = 0u;
      w.scale[u][c] = 0.0f;
      if (ok) {
        gemm_load_stream8(a.w8 + row[c] * k + kc, w.q[u][c][0], w.q[u][c][1]);
        w.scale[u][c] = a.w8_scales[row[c] * a.w8_groups + (a.w8_groups > 1 ? kc / a.w8_group_k : 0)];
      }
    }
  }
}

TD_DEVICE void moe_rows_w(const MoeRowsFp8& w, td::vec16 (&wv)[2][2]) {
  TD_GEMM_UNROLL
  for (int u = 0; u < 2; ++u) {
    TD_GEMM_UNROLL
    for (int c = 0; c < 2; ++c) {
      float f[8];
      fp8x8_to_float(w.q[u][c][0], w.q[u][c][1], w.scale[u][c], f);
      wv[u][c] = pack8(f);
    }
  }
}

// kDown false: gate/up (A = xn by token, out act bf16); true: down (A = act by slot, out y f32).
// kFp8: e4m3 weights with scales (a.w8). Dynamic shared memory: kMoeTileRows x k rounded up to
// kRowsKStep, bf16.
template <bool kDown, bool kFp8>
TD_GLOBAL void TD_LAUNCH_BOUNDS(kRowsThreads) moe_gemm_kernel(MoeGemmArgs a) {
  constexpr int R = kMoeTileRows;
  static_assert(R == 8, "a tile is one n8 tile of mma's B operand");
  static_assert(kRowsThreads == kMoeCombineThreads, "the combine in the down launch takes the combine kernel's block");
  constexpr int kPassCols = kDown ? kRowsBlockCols : kRowsBlockCols / 2;  // output columns of one pass
  TD_DYNAMIC_SHARED(td::bf16_bits, xs);  // [R][kpad]
  TD_SHARED(float, red, kRowsKGroups * R * kRowsBlockCols);
  TD_SHARED(float, sums, R * kRowsBlockCols);
  TD_SHARED(int32_t, entry, R);
  td::grid_dependency_wait();  // the grouping (and the rows) come from the kernels before
  td::grid_dependents_launch();
  const int total = a.padded_offsets[a.num_experts];
  const int slot0 = static_cast<int>(blockIdx.x) * R;
  if (slot0 >= total) return;  // the whole CTA, before any barrier
  const int tid = static_cast<int>(threadIdx.x);
  const int expert = moe_expert_of(a.padded_offsets, a.num_experts, slot0);
  const int k = kDown ? a.inter : a.hidden;      // reduction length
  const int n_out = kDown ? a.hidden : a.inter;  // output columns
  const int kpad = (k + kRowsKStep - 1) / kRowsKStep * kRowsKStep;
  if (tid < R) entry[tid] = a.sorted[slot0 + tid];
  td::sync_threads();
  gemm_rows_stage_rows<R>(
      [&](int r) -> const td::bf16_bits* {
        const int e = entry[r];
        if (e < 0) return nullptr;
        return kDown ? a.a + static_cast<int64_t>(slot0 + r) * k : a.a + static_cast<int64_t>(e / a.top_k) * k;
      },
      a.a, 0, k, kpad, xs);

  const int q = static_cast<int>(threadIdx.x / 32) % kRowsKGroups, t = static_cast<int>(td::lane_id() % 4);
  int lc[2];
  gemm_rows_lane_cols(lc);
  const int c_begin = static_cast<int>(blockIdx.y) * a.cols_per_cta;
  const int c_end = td::imin(c_begin + a.cols_per_cta, n_out);
  for (int n0 = c_begin; n0 < c_end; n0 += kPassCols) {
    // This lane's two weight rows of the stacked matrix; columns past n_out read column n_out - 1 (never stored).
    int64_t row[2];
    TD_GEMM_UNROLL
    for (int c = 0; c < 2; ++c) {
      if constexpr (kDown) {
        row[c] = static_cast<int64_t>(expert) * a.hidden + td::imin(n0 + lc[c], n_out - 1);
      } else {
        row[c] = static_cast<int64_t>(expert) * 2 * a.inter + (lc[c] >= 16 ? a.inter : 0) + td::imin(n0 + lc[c] % 16, n_out - 1);
      }
    }
    const td::bf16_bits* wp[2] = {nullptr, nullptr};
    if constexpr (!kFp8) {
      wp[0] = a.w + row[0] * k;
      wp[1] = a.w + row[1] * k;
    }
    float acc[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
    int kk = 64 * q + 8 * t;  // this lane's first k offset of the current 256-wide step
    td::vec16 wv[2][2];
    MoeRowsFp8 w8{}, n8{};
    if constexpr (kFp8) {
      moe_rows_load8(w8, a, row, kk, k);
    } else {
      gemm_rows_load(wv, wp, kk, k);
    }
    // The trip count is the block's, not the lane's: mma.sync needs the whole warp.
    for (int step = 0; step < kpad; step += kRowsKStep) {
      td::vec16 nx[2][2];
      if constexpr (kFp8) {
        moe_rows_load8(n8, a, row, kk + kRowsKStep, k);
        moe_rows_w(w8, wv);
      } else {
        gemm_rows_load(nx, wp, kk + kRowsKStep, k);
      }
      gemm_rows_mma_step<R>(acc, wv, xs, kpad, kk);
      kk += kRowsKStep;
      if constexpr (kFp8) {
        w8 = n8;
      } else {
        TD_GEMM_UNROLL
        for (int u = 0; u < 2; ++u) {
          wv[u][0] = nx[u][0];
          wv[u][1] = nx[u][1];
        }
      }
    }
    // Sums of the pass's 32 weight rows (its first barrier also ends the previous pass's epilogue).
    gemm_rows_reduce<R>(acc, red, R, [&](int r, int c, float v) { sums[r * kRowsBlockCols + c] = v; });
    td::sync_threads();
    for (int e = tid; e < R * kPassCols; e += kRowsThreads) {
      const int r = e / kPassCols, j = e - r * kPassCols, col = n0 + j;
      const int en = entry[r];
      if (col >= c_end || en < 0) continue;
      const int64_t slot = slot0 + r;
      if constexpr (kDown) {
        a.y[slot * a.hidden + col] = sums[r * kRowsBlockCols + j] * a.weights[en];
      } else {
        a.act[slot * a.inter + col] = td::float_to_bf16(moe_silu_mul(sums[r * kRowsBlockCols + j], sums[r * kRowsBlockCols + 16 + j]));
      }
    }
  }
  if constexpr (kDown) {
    if (a.token_counters != nullptr) moe_combine_arrive(a.combine, a.token_counters, entry, R, static_cast<int>(gridDim.y));
  }
}

inline void launch_moe_gemm(const MoeGemmArgs& a, bool down, void* stream, bool overlap) {
  const int n_out = down ? a.hidden : a.inter, k = down ? a.inter : a.hidden;
  const td::Grid grid{static_cast<unsigned>(a.max_slots / kMoeTileRows), td::ceil_div(n_out, a.cols_per_cta), 1};
  const size_t shared = static_cast<size_t>(kMoeTileRows) * static_cast<size_t>(td::ceil_div(k, kRowsKStep) * kRowsKStep) * 2;
  const bool fp8 = a.w8 != nullptr;
  if (down) {
    td::launch_dependent(overlap, fp8 ? moe_gemm_kernel<true, true> : moe_gemm_kernel<true, false>, grid, kRowsThreads, shared, stream, a);
  } else {
    td::launch_dependent(overlap, fp8 ? moe_gemm_kernel<false, true> : moe_gemm_kernel<false, false>, grid, kRowsThreads, shared, stream, a);
  }
}

}  // namespace tandem::gpu::TD_NS
