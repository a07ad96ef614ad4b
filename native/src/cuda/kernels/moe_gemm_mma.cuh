// The MoE grouped GEMMs on tensor cores (moe_api.h, MoeGemmArgs::mma_rows > 0): a prefill's
// experts each get many rows, and the CUDA-core path (moe_gemm.cuh) would stream an expert's
// weights once per 8 of them. Each CTA is one BM x BN tile of `gemm_mma_mainloop`
// (gemm_mma.cuh: the dense GEMM's cp.async pipeline, swizzled shared tiles and mma.sync
// fragments), placed by the grouping instead of by a dense grid:
//
//   blockIdx.y  tile t of the step: expert e = the last with mma_tile_offsets[e] <= t (the group
//               kernel's prefix sum of ceil(count / BM) per expert), j = t - offsets[e]; its rows
//               are slots padded_offsets[e] + j * BM + [0, BM), those at or past counts[e] masked
//               (zero-filled in, never stored): a tile never spans two experts, and a run that is
//               not a tile multiple leaves a partial last tile
//   blockIdx.x  output columns (fastest: the CTAs of one tile run together and share its A rows
//               in L2; the next tile of the same expert finds the expert's weights there)
//
//   gate/up  A rows gathered: xn[sorted[slot] / top_k]. B is the expert's [2 inter][hidden]
//            stacked gate then up rows, read interleaved by 8 (tile rows 16p..16p+7 are gate rows
//            n0 + 8p.., 16p+8..16p+15 the up rows of the same columns), so a thread's mma tiles
//            2q and 2q + 1 hold gate and up of the same output columns and the epilogue stores
//            bf16(SiLU(gate) x up) straight from the accumulators: BN / 2 output columns per CTA
//   down     A rows strided: act[slot] (the gate/up output, contiguous per expert run). B is the
//            expert's [hidden][inter]; the epilogue multiplies by the entry's routing weight and
//            stores f32 y[slot], as the CUDA-core path does (combine un-permutes)
//   FP8      (MoeGemmArgs::w8) B's e4m3 rows go through registers one k tile ahead and land in
//            shared memory as bf16(e4m3 x scale) (gemm_mma.cuh, GemmMmaFp8Rows): the bf16 tile a
//            dequantized copy of the experts would give, read at half the bytes, with no copy
//
// Grids are upper bounds (moe_max_mma_tiles): a CTA past the step's tile count returns before
// its first barrier, whole.
#pragma once

#include "../moe_api.h"
#include "gemm_mma.cuh"
#include "launch.h"
#include "moe_gemm.cuh"

namespace tandem::gpu::TD_NS {

// The two tiles the grouped GEMM uses, the dense GEMM's own configurations: 64-row tiles while
// experts average fewer than kMoeMmaLargeAvgRows rows (gpu_backend_moe.cc: less of a tile is padding), 128-row tiles
// past it (half the B traffic per row).
using MoeMmaSmall = GemmMmaSmall;
using MoeMmaLarge = GemmMmaMid;
static_assert(MoeMmaSmall::BM == kMoeMmaRowsSmall && MoeMmaLarge::BM == kMoeMmaRowsLarge, "moe_api.h names these tiles' rows");

template <class C, bool kDown, bool kFp8>
TD_GLOBAL void TD_GEMM_BOUNDS(C::THREADS, C::MIN_BLOCKS) moe_gemm_mma_kernel(MoeGemmArgs a) {
  TD_DYNAMIC_SHARED(td::bf16_bits, smem);
  constexpr int BM = C::BM, BN = C::BN, BK = C::BK, WM = C::WM, WN = C::WN, MT = C::MT, NT = C::NT;
  constexpr int RPP = C::ROWS_PER_PASS, A_PASSES = BM / RPP, B_PASSES = BN / RPP;
  static_assert(RPP % 16 == 0 && WN % 16 == 0, "gate/up interleaves gate and up rows by 8 within 16-row groups");
  const int E = a.num_experts;
  const int tile = static_cast<int>(blockIdx.y);
  td::grid_dependency_wait();  // the grouping (and the rows) come from the kernels before
  td::grid_dependents_launch();
  if (tile >= a.mma_tile_offsets[E]) return;  // the whole CTA, before any barrier
  const int expert = moe_expert_of(a.mma_tile_offsets, E, tile);
  const int row0 = (tile - a.mma_tile_offsets[expert]) * BM;  // within the expert's run
  const int valid = td::imin(BM, a.counts[expert] - row0);
  const int slot0 = a.padded_offsets[expert] + row0;
  const int k = kDown ? a.inter : a.hidden;
  const int n_out = kDown ? a.hidden : a.inter;
  const int n0 = static_cast<int>(blockIdx.x) * (kDown ? BN : BN / 2);  // first output column

  const int cchunk = gemm_mma_copy_chunk(), crow = gemm_mma_copy_row();
  // B: the expert's weight rows for this CTA's columns (gate/up: interleaved, see above): row
  // b_row0 + i * b_step of the stacked matrix in pass i. FP8 experts: the e4m3 rows and their
  // scales, turned into the same bf16 tile on the way into shared memory (GemmMmaFp8Rows).
  uint32_t b_ok = 0;
  int64_t b_row0, b_step;
  if constexpr (kDown) {
    TD_GEMM_UNROLL
    for (int i = 0; i < B_PASSES; ++i) b_ok |= static_cast<uint32_t>(n0 + crow + i * RPP < n_out) << i;
    b_row0 = static_cast<int64_t>(expert) * a.hidden + td::imin(n0 + crow, n_out - 1);
    b_step = RPP;
  } else {
    const int col = n0 + (crow / 16) * 8 + crow % 8;  // pass i: col + i * RPP / 2
    const int up = ((crow / 8) & 1) * a.inter;
    TD_GEMM_UNROLL
    for (int i = 0; i < B_PASSES; ++i) b_ok |= static_cast<uint32_t>(col + i * RPP / 2 < n_out) << i;
    b_row0 = static_cast<int64_t>(expert) * 2 * a.inter + up + td::imin(col, n_out - 1);
    b_step = RPP / 2;
  }
  using BRows = std::conditional_t<kFp8, GemmMmaFp8Rows, GemmMmaStridedRows>;
  BRows b_rows{};
  if constexpr (kFp8) {
    b_rows = {a.w8 + b_row0 * k + cchunk * 8, b_step * k, a.w8_scales + b_row0 * a.w8_groups, b_step * a.w8_groups, a.w8_groups, a.w8_group_k, b_ok};
  } else {
    b_rows = {a.w + b_row0 * k + cchunk * 8, b_step * k, b_ok, a.w};
  }
  // A: the tile's rows, those past the expert's count masked.
  uint32_t a_ok = 0;
  TD_GEMM_UNROLL
  for (int i = 0; i < A_PASSES; ++i) a_ok |= static_cast<uint32_t>(crow + i * RPP < valid) << i;
  float acc[MT][NT][4];
  const int ktiles = (k + BK - 1) / BK;
  if constexpr (kDown) {
    const GemmMmaStridedRows a_rows{a.a + static_cast<int64_t>(slot0 + crow) * k + cchunk * 8, static_cast<int64_t>(RPP) * k, a_ok, a.a};
    gemm_mma_mainloop<C>(smem, a_rows, b_rows, k, 0, ktiles, acc);
  } else {
    GemmMmaGatheredRows<A_PASSES> a_rows{};
    a_rows.ok = a_ok;
    a_rows.any = a.a;
    TD_GEMM_UNROLL
    for (int i = 0; i < A_PASSES; ++i) {
      const int entry = ((a_ok >> i) & 1u) ? a.sorted[slot0 + crow + i * RPP] : 0;
      a_rows.rows[i] = a.a + static_cast<int64_t>(entry / a.top_k) * k + cchunk * 8;
    }
    gemm_mma_mainloop<C>(smem, a_rows, b_rows, k, 0, ktiles, acc);
  }

  // Epilogue: lane (g, t) holds rows g and g + 8, columns 2t and 2t + 1 of each mma tile.
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int wm = warp / C::WARPS_N, wn = warp % C::WARPS_N;
  const int gr = lane >> 2, tc = (lane & 3) * 2;
  TD_GEMM_UNROLL
  for (int mt = 0; mt < MT; ++mt) {
    TD_GEMM_UNROLL
    for (int h = 0; h < 2; ++h) {
      const int row = wm * WM + mt * 16 + gr + h * 8;
      if (row >= valid) continue;
      const int64_t slot = slot0 + row;
      if constexpr (kDown) {
        const float rw = a.weights[a.sorted[slot]];
        TD_GEMM_UNROLL
        for (int nt = 0; nt < NT; ++nt) {
          const int col = n0 + wn * WN + nt * 8 + tc;
          float* p = a.y + slot * a.hidden + col;
          if (col + 1 < n_out) {
            GemmF32x2 v;
            v.x = acc[mt][nt][2 * h] * rw;
            v.y = acc[mt][nt][2 * h + 1] * rw;
            *reinterpret_cast<GemmF32x2*>(p) = v;
          } else if (col < n_out) {
            *p = acc[mt][nt][2 * h] * rw;
          }
        }
      } else {
        TD_GEMM_UNROLL
        for (int q = 0; q < NT / 2; ++q) {  // tiles 2q (gate) and 2q + 1 (up) of the same columns
          const int col = n0 + (wn * WN) / 2 + q * 8 + tc;
          td::bf16_bits* p = a.act + slot * a.inter + col;
          const float v0 = moe_silu_mul(acc[mt][2 * q][2 * h], acc[mt][2 * q + 1][2 * h]);
          const float v1 = moe_silu_mul(acc[mt][2 * q][2 * h + 1], acc[mt][2 * q + 1][2 * h + 1]);
          if (col + 1 < n_out) {
            *reinterpret_cast<uint32_t*>(p) = td::pack_bf16x2(v0, v1);
          } else if (col < n_out) {
            *p = td::float_to_bf16(v0);
          }
        }
      }
    }
  }
}

template <class C>
inline void launch_moe_gemm_mma_as(const MoeGemmArgs& a, bool down, void* stream, bool overlap) {
  const int n_out = down ? a.hidden : a.inter;
  const int cols = down ? C::BN : C::BN / 2;
  const td::Grid grid{td::ceil_div(n_out, cols), static_cast<unsigned>(a.max_mma_tiles), 1};
  const bool fp8 = a.w8 != nullptr;
  if (down) {
    td::launch_dependent(overlap, fp8 ? moe_gemm_mma_kernel<C, true, true> : moe_gemm_mma_kernel<C, true, false>, grid, C::THREADS,
                         C::SMEM_BYTES, stream, a);
  } else {
    td::launch_dependent(overlap, fp8 ? moe_gemm_mma_kernel<C, false, true> : moe_gemm_mma_kernel<C, false, false>, grid, C::THREADS,
                         C::SMEM_BYTES, stream, a);
  }
}

inline void launch_moe_gemm_mma(const MoeGemmArgs& a, bool down, void* stream, bool overlap) {
  if (a.mma_rows == MoeMmaLarge::BM) {
    launch_moe_gemm_mma_as<MoeMmaLarge>(a, down, stream, overlap);
  } else {
    launch_moe_gemm_mma_as<MoeMmaSmall>(a, down, stream, overlap);
  }
}

}  // namespace tandem::gpu::TD_NS
