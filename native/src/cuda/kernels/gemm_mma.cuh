// The many-rows GEMM: tensor cores through mma.sync m16n8k16 (bf16 in, f32 accumulators).
//
// A CTA computes a BM x BN tile of c over all of k in 64-wide k tiles. Global -> shared copies
// are cp.async (16 bytes, zero-filled past m, n and k) into STAGES buffers: while tile kt is
// multiplied, tiles kt + 1 .. kt + STAGES - 1 are in flight. One __syncthreads per k tile,
// placed before the tile's last 16-wide k step, so that the next tile's first fragments load
// while that step's mma run (fragments are double-buffered across k steps).
// Shared tiles are [rows][64] bf16 (128-byte rows) with the 16-byte chunks XOR-swizzled
// (chunk ^ row % 8), so the cp.async stores and each ldmatrix phase (8 rows, one chunk
// column) hit all 32 banks once. Both operands are row-major along k (a is [m][k], w is
// [n][k]), so A and B fragments both come from non-transposed ldmatrix.x4: for A, matrices
// (rows 0-7 | 8-15) x (k 0-7 | 8-15) give a0..a3; for B, matrices (n 0-7: k 0-7, k 8-15 |
// n 8-15: k 0-7, k 8-15) give b0, b1 of two n8 tiles. Warps are laid out WARPS_M x WARPS_N,
// each owning a WM x WN sub-tile (MT = WM/16 by NT = WN/8 mma tiles). The epilogue stores
// straight from the accumulators (c0,c1: row g, cols 2t, 2t+1; c2,c3: row g + 8) with bias
// and the old c added, guarded by m and n. CTAs are rasterized in groups of kMmaGroupM tile
// rows, so that concurrently running CTAs share a and w panels in L2. When the tiles do not
// fill the GPU, k is split over blockIdx.y as in the few-rows path: partial sums go to the
// workspace and gemm_splitk_reduce_kernel applies the epilogue.
#pragma once

#include <type_traits>

#include "../fp8.h"
#include "../kernel_api.h"
#include "bf16_vec.cuh"
#include "fp8_vec.cuh"
#include "gemm_epilogue.cuh"
#include "launch.h"

namespace tandem::gpu::TD_NS {

inline constexpr int kMmaGroupM = 8;

template <int BM_, int BN_, int WM_, int WN_, int STAGES_, int MIN_BLOCKS_>
struct GemmMmaConfig {
  static constexpr int BM = BM_, BN = BN_, WM = WM_, WN = WN_, STAGES = STAGES_;
  static constexpr int MIN_BLOCKS = MIN_BLOCKS_;  // resident CTAs per SM the registers must allow
  static constexpr int BK = 64;  // bf16: one 128-byte shared row
  static constexpr int WARPS_M = BM / WM, WARPS_N = BN / WN;
  static constexpr int THREADS = WARPS_M * WARPS_N * 32;
  static constexpr int MT = WM / 16, NT = WN / 8;
  static constexpr int ROWS_PER_PASS = THREADS / 8;  // rows one cp.async pass covers (8 chunks a row)
  static constexpr int A_ELEMS = BM * BK, B_ELEMS = BN * BK, STAGE_ELEMS = A_ELEMS + B_ELEMS;
  static constexpr size_t SMEM_BYTES = static_cast<size_t>(STAGES) * STAGE_ELEMS * sizeof(td::bf16_bits);
  static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tile");
  static_assert(BM % ROWS_PER_PASS == 0 && BN % ROWS_PER_PASS == 0, "copy passes");
  static_assert(STAGES >= 2, "pipeline");
};

// 64 x 64 warp tiles issue 8 ldmatrix.x4 per 32 mma (a 32 x 32 warp tile: 4 per 8): the least
// shared-memory traffic per mma, which is what bounds an mma.sync GEMM on Hopper.
// Large m and n: 128 x 256 CTA, 8 warps of 64 x 64, 3 stages (144 KB shared, one CTA per SM).
using GemmMmaLarge = GemmMmaConfig<128, 256, 64, 64, 3, 1>;
// Mid: 128 x 128, 4 warps of 64 x 64, 3 stages (96 KB shared, two CTAs per SM).
using GemmMmaMid = GemmMmaConfig<128, 128, 64, 64, 3, 2>;
// Small m or few tiles: 64 x 128, 8 warps of 32 x 32, 4 stages (96 KB shared, two CTAs per SM).
using GemmMmaSmall = GemmMmaConfig<64, 128, 32, 32, 4, 2>;

// The rows one thread copies into a shared tile, one per copy pass (passes are ROWS_PER_PASS
// tile rows apart), each already offset to the thread's 16-byte chunk: bit i of `ok` says
// whether pass i's row exists (else its chunks are zero-filled and `any`, a valid address, is
// named instead). Strided rows (a dense matrix, or one expert's contiguous run) cost one base
// and a stride; gathered rows (an expert's tokens, scattered over the activations) a pointer
// per pass. The grouped MoE GEMM (moe_gemm_mma.cuh) uses both.
struct GemmMmaStridedRows {
  const td::bf16_bits* base;
  int64_t pass;
  uint32_t ok;
  const td::bf16_bits* any;
  TD_DEVICE const td::bf16_bits* row(int i) const { return base + i * pass; }
};

template <int PASSES>
struct GemmMmaGatheredRows {
  const td::bf16_bits* rows[PASSES];
  uint32_t ok;
  const td::bf16_bits* any;
  TD_DEVICE const td::bf16_bits* row(int i) const { return rows[i]; }
};

// e4m3 B rows with scales per row and k group (FP8 experts): strided as GemmMmaStridedRows, in
// bytes; scales [row][groups] of group_k columns (a multiple of 8; groups == 1: one per row).
// The main loop loads a thread's 8 e4m3 of a pass into registers one k tile ahead and stores
// them as bf16(e4m3 x scale), the dequantize kernel's value (fp8_quant.cuh), into the swizzled
// shared tile: the same bf16 B tile the dequantized copy gives, without the copy.
struct GemmMmaFp8Rows {
  const fp8_bits* base;  // this thread's first row, at its chunk (8 columns a chunk)
  int64_t pass;          // bytes (= elements) between passes' rows
  const float* scales;   // the first row's scales
  int64_t scale_pass;    // floats between passes' rows' scales
  int groups, group_k;
  uint32_t ok;
  TD_DEVICE const fp8_bits* row(int i) const { return base + i * pass; }
};

/** This thread's copy row (tile rows crow + i * ROWS_PER_PASS) and 16-byte chunk column. */
TD_DEVICE int gemm_mma_copy_row() { return static_cast<int>(threadIdx.x) >> 3; }
TD_DEVICE int gemm_mma_copy_chunk() { return static_cast<int>(threadIdx.x) & 7; }

/**
 * The tensor-core main loop of one CTA: acc (zeroed here) = A tile . B tile^T over k tiles
 * [kt_begin, kt_begin + ktiles) of 64, the operands' rows named by `a_rows` / `b_rows` (one per
 * copy pass, see above), k the reduction length (chunks at or past it are zero-filled).
 * Returns after every copy landed; the caller's epilogue reads only acc (no barrier needed).
 */
template <class C, class ARows, class BRows>
TD_DEVICE void gemm_mma_mainloop(td::bf16_bits* smem, const ARows& a_rows, const BRows& b_rows, int k, int kt_begin, int ktiles,
                                 float (&acc)[C::MT][C::NT][4]) {
  constexpr int BM = C::BM, BN = C::BN, BK = C::BK, WM = C::WM, WN = C::WN, MT = C::MT, NT = C::NT;
  constexpr int STAGES = C::STAGES, RPP = C::ROWS_PER_PASS;
  constexpr int A_PASSES = BM / RPP, B_PASSES = BN / RPP;
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5;
  const int wm = warp / C::WARPS_N, wn = warp % C::WARPS_N;

  // Copy assignment: this thread moves chunk (tid % 8) of rows tid / 8 + i * RPP of both tiles.
  const int cchunk = gemm_mma_copy_chunk(), crow = gemm_mma_copy_row();
  const int s_copy = crow * BK + ((cchunk ^ (crow & 7)) << 3);  // RPP % 8 == 0: same swizzle every pass

  constexpr bool kFp8B = std::is_same_v<BRows, GemmMmaFp8Rows>;
  // FP8 B: this thread's 8 e4m3 of each pass for one k tile, and their scales, in registers.
  uint32_t b8[kFp8B ? B_PASSES : 1][2];
  float b8s[kFp8B ? B_PASSES : 1];
  auto fetch_b8 = [&](int kt) {
    if constexpr (kFp8B) {
      const int kc = (kt_begin + kt) * BK + cchunk * 8;
      TD_GEMM_UNROLL
      for (int i = 0; i < B_PASSES; ++i) {
        const bool ok = kc < k && ((b_rows.ok >> i) & 1u);
        b8[i][0] = b8[i][1] = 0u;
        b8s[i] = 0.0f;
        if (ok) {
          gemm_load_stream8(b_rows.row(i) + (kt_begin + kt) * BK, b8[i][0], b8[i][1]);
          b8s[i] = b_rows.scales[i * b_rows.scale_pass + (b_rows.groups > 1 ? kc / b_rows.group_k : 0)];
        }
      }
    }
  };
  auto store_b8 = [&](int stage) {
    if constexpr (kFp8B) {
      td::bf16_bits* sb = smem + stage * C::STAGE_ELEMS + C::A_ELEMS;
      TD_GEMM_UNROLL
      for (int i = 0; i < B_PASSES; ++i) {
        float f[8];
        fp8x8_to_float(b8[i][0], b8[i][1], b8s[i], f);
        *reinterpret_cast<td::vec16*>(sb + s_copy + i * RPP * BK) = pack8(f);
      }
    }
  };
  auto load_stage = [&](int stage, int kt) {
    td::bf16_bits* sa = smem + stage * C::STAGE_ELEMS;
    td::bf16_bits* sb = sa + C::A_ELEMS;
    const int k0 = (kt_begin + kt) * BK;
    const bool k_ok = k0 + cchunk * 8 < k;
    TD_GEMM_UNROLL
    for (int i = 0; i < A_PASSES; ++i) {
      const bool ok = k_ok && ((a_rows.ok >> i) & 1u);
      td::cp_async16(sa + s_copy + i * RPP * BK, ok ? a_rows.row(i) + k0 : a_rows.any, ok);
    }
    if constexpr (!kFp8B) {
      TD_GEMM_UNROLL
      for (int i = 0; i < B_PASSES; ++i) {
        const bool ok = k_ok && ((b_rows.ok >> i) & 1u);
        td::cp_async16(sb + s_copy + i * RPP * BK, ok ? b_rows.row(i) + k0 : b_rows.any, ok);
      }
    }
  };

  // Prologue: tiles 0 .. STAGES-1 in flight, one commit group each (FP8 B: stored as they
  // arrive, and tile STAGES's fetched into registers).
  TD_GEMM_UNROLL
  for (int s = 0; s < STAGES; ++s) {
    if (s < ktiles) {
      load_stage(s, s);
      if constexpr (kFp8B) {
        fetch_b8(s);
        store_b8(s);
      }
    }
    td::cp_async_commit();
  }
  if (kFp8B && STAGES < ktiles) fetch_b8(STAGES);

  TD_GEMM_UNROLL
  for (int mt = 0; mt < MT; ++mt) {
    TD_GEMM_UNROLL
    for (int nt = 0; nt < NT; ++nt) {
      TD_GEMM_UNROLL
      for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.0f;
    }
  }

  // ldmatrix row addresses. A: matrix q = lane / 8 is rows 8 (q & 1), k chunk q >> 1.
  // B: matrix q is n rows 8 (q >> 1), k chunk q & 1. Rows are multiples of 8 plus lane % 8.
  const int swz = lane & 7;
  const int a_row = (wm * WM + swz + ((lane >> 3) & 1) * 8) * BK;
  const int a_chunk = lane >> 4;
  const int b_row = (wn * WN + swz + (lane >> 4) * 8) * BK;
  const int b_chunk = (lane >> 3) & 1;

  // Fragments are double-buffered: those of k step ks + 1 (or of the next tile's step 0) are
  // loaded before the mma of step ks, so ldmatrix latency hides behind the tensor cores.
  uint32_t af[2][MT][4];
  uint32_t bf[2][NT][2];
  auto load_frags = [&](int buf, int stage, int ks) {
    const td::bf16_bits* sa = smem + stage * C::STAGE_ELEMS;
    const td::bf16_bits* sb = sa + C::A_ELEMS;
    TD_GEMM_UNROLL
    for (int mt = 0; mt < MT; ++mt) {
      td::ldmatrix_x4(af[buf][mt], sa + a_row + mt * 16 * BK + (((2 * ks + a_chunk) ^ swz) << 3));
    }
    TD_GEMM_UNROLL
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t r[4];
      td::ldmatrix_x4(r, sb + b_row + np * 16 * BK + (((2 * ks + b_chunk) ^ swz) << 3));
      bf[buf][2 * np][0] = r[0];
      bf[buf][2 * np][1] = r[1];
      bf[buf][2 * np + 1][0] = r[2];
      bf[buf][2 * np + 1][1] = r[3];
    }
  };

  constexpr int KS = BK / 16;
  td::cp_async_wait<STAGES - 1>();
  td::sync_threads();  // tile 0 landed for every thread
  if (ktiles > 0) load_frags(0, 0, 0);
  for (int kt = 0; kt < ktiles; ++kt) {
    const int stage = kt % STAGES;
    TD_GEMM_UNROLL
    for (int ks = 0; ks < KS; ++ks) {
      if (ks + 1 < KS) {
        load_frags((ks + 1) & 1, stage, ks + 1);
      } else {
        // Groups committed: STAGES + kt; tile kt + 1 is the (kt + 2)-th, so STAGES - 2 may
        // still be pending. The barrier also means every warp has read this stage (its last
        // fragments are in registers), so tile kt + STAGES can be copied into it.
        td::cp_async_wait<STAGES - 2>();
        td::sync_threads();
        if (kt + STAGES < ktiles) {
          load_stage(stage, kt + STAGES);
          if constexpr (kFp8B) {
            store_b8(stage);  // fetched one tile ago
            if (kt + STAGES + 1 < ktiles) fetch_b8(kt + STAGES + 1);
          }
        }
        td::cp_async_commit();
        if (kt + 1 < ktiles) load_frags((ks + 1) & 1, (kt + 1) % STAGES, 0);
      }
      TD_GEMM_UNROLL
      for (int mt = 0; mt < MT; ++mt) {
        TD_GEMM_UNROLL
        for (int nt = 0; nt < NT; ++nt) td::mma_bf16_16816(acc[mt][nt], af[ks & 1][mt], bf[ks & 1][nt], acc[mt][nt]);
      }
    }
  }
  td::cp_async_wait<0>();
}

template <class C>
TD_GLOBAL void TD_GEMM_BOUNDS(C::THREADS, C::MIN_BLOCKS) gemm_mma_kernel(GemmArgs g, int kt_per_split) {
  TD_DYNAMIC_SHARED(td::bf16_bits, smem);
  constexpr int BM = C::BM, BN = C::BN, BK = C::BK, WM = C::WM, WN = C::WN, MT = C::MT, NT = C::NT;
  constexpr int RPP = C::ROWS_PER_PASS;
  constexpr int A_PASSES = BM / RPP, B_PASSES = BN / RPP;

  // Grouped rasterization: kMmaGroupM tile rows at a time, column by column within the group.
  const int tiles_m = (g.m + BM - 1) / BM, tiles_n = (g.n + BN - 1) / BN;
  const int bid = static_cast<int>(blockIdx.x);
  const int group = bid / (kMmaGroupM * tiles_n);
  const int first_m = group * kMmaGroupM;
  const int group_m = td::imin(tiles_m - first_m, kMmaGroupM);
  const int in_group = bid - group * kMmaGroupM * tiles_n;
  const int m0 = (first_m + in_group % group_m) * BM;
  const int n0 = (in_group / group_m) * BN;

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5;
  const int wm = warp / C::WARPS_N, wn = warp % C::WARPS_N;
  // Split-K (blockIdx.y): this CTA's k tiles are [kt_begin, kt_begin + ktiles).
  const int kt_begin = static_cast<int>(blockIdx.y) * kt_per_split;
  const int ktiles = td::imin((g.k + BK - 1) / BK - kt_begin, kt_per_split);

  const int cchunk = gemm_mma_copy_chunk(), crow = gemm_mma_copy_row();
  uint32_t a_ok = 0, b_ok = 0;
  TD_GEMM_UNROLL
  for (int i = 0; i < A_PASSES; ++i) a_ok |= static_cast<uint32_t>(m0 + crow + i * RPP < g.m) << i;
  TD_GEMM_UNROLL
  for (int i = 0; i < B_PASSES; ++i) b_ok |= static_cast<uint32_t>(n0 + crow + i * RPP < g.n) << i;
  const GemmMmaStridedRows a_rows{g.a + static_cast<int64_t>(td::imin(m0 + crow, g.m - 1)) * g.lda + cchunk * 8,
                                  static_cast<int64_t>(RPP) * g.lda, a_ok, g.a};
  const GemmMmaStridedRows b_rows{g.w + static_cast<int64_t>(td::imin(n0 + crow, g.n - 1)) * g.ldw + cchunk * 8,
                                  static_cast<int64_t>(RPP) * g.ldw, b_ok, g.w};
  float acc[MT][NT][4];
  gemm_mma_mainloop<C>(smem, a_rows, b_rows, g.k, kt_begin, ktiles, acc);

  // Epilogue: lane (g, t) holds rows g and g + 8, columns 2t and 2t + 1 of each mma tile.
  const int gr = lane >> 2, tc = (lane & 3) * 2;
  if (gridDim.y > 1) {  // split-K: raw partial sums to workspace[split] (row stride n, any parity)
    float* ws = g.workspace + static_cast<int64_t>(blockIdx.y) * g.m * g.n;
    TD_GEMM_UNROLL
    for (int mt = 0; mt < MT; ++mt) {
      TD_GEMM_UNROLL
      for (int h = 0; h < 2; ++h) {
        const int row = m0 + wm * WM + mt * 16 + gr + h * 8;
        if (row < g.m) {
          TD_GEMM_UNROLL
          for (int nt = 0; nt < NT; ++nt) {
            const int col = n0 + wn * WN + nt * 8 + tc;
            float* p = ws + static_cast<int64_t>(row) * g.n + col;
            if (col < g.n) p[0] = acc[mt][nt][2 * h];
            if (col + 1 < g.n) p[1] = acc[mt][nt][2 * h + 1];
          }
        }
      }
    }
    return;  // after the last barrier
  }
  float bias[NT][2];
  TD_GEMM_UNROLL
  for (int nt = 0; nt < NT; ++nt) {
    const int col = n0 + wn * WN + nt * 8 + tc;
    bias[nt][0] = g.bias != nullptr && col < g.n ? g.bias[col] : 0.0f;
    bias[nt][1] = g.bias != nullptr && col + 1 < g.n ? g.bias[col + 1] : 0.0f;
  }
  TD_GEMM_UNROLL
  for (int mt = 0; mt < MT; ++mt) {
    TD_GEMM_UNROLL
    for (int h = 0; h < 2; ++h) {
      const int row = m0 + wm * WM + mt * 16 + gr + h * 8;
      if (row < g.m) {
        TD_GEMM_UNROLL
        for (int nt = 0; nt < NT; ++nt) {
          const int col = n0 + wn * WN + nt * 8 + tc;
          if (col < g.n) gemm_store2(g, row, col, acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1], bias[nt][0], bias[nt][1]);
        }
      }
    }
  }
}

/**
 * k splits for a tile grid that does not fill the GPU: enough CTAs for one per SM, at least
 * 4 k tiles (256 of k) per split, at most kGemmMaxSplits; 1 without a workspace. Returns k tiles
 * per split; *splits gets the count (every split non-empty).
 */
template <class C>
inline int gemm_mma_split(const GemmArgs& g, int want, int* splits) {
  const int ktiles = (g.k + C::BK - 1) / C::BK;
  const int64_t tiles = static_cast<int64_t>((g.m + C::BM - 1) / C::BM) * ((g.n + C::BN - 1) / C::BN);
  int s = want;
  if (s <= 0) s = tiles >= kGemmSms ? 1 : static_cast<int>((kGemmSms + tiles - 1) / tiles);
  if (want <= 0) s = std::min(s, ktiles / 4);
  if (g.workspace == nullptr) s = 1;
  s = std::max(1, std::min({s, kGemmMaxSplits, ktiles, gemm_splits_that_fit(g)}));
  const int per = std::max(1, (ktiles + s - 1) / s);
  *splits = std::max(1, (ktiles + per - 1) / per);
  return per;
}

template <class C>
void gemm_mma_launch(const GemmArgs& g, void* stream, int want_splits = 0) {
  const int64_t tiles = static_cast<int64_t>((g.m + C::BM - 1) / C::BM) * ((g.n + C::BN - 1) / C::BN);
  int splits = 1;
  const int per = gemm_mma_split<C>(g, want_splits, &splits);
  td::launch(gemm_mma_kernel<C>, {static_cast<unsigned>(tiles), static_cast<unsigned>(splits)}, C::THREADS, C::SMEM_BYTES,
             stream, g, per);
  if (splits > 1) gemm_splitk_reduce(g, splits, stream);
}

}  // namespace tandem::gpu::TD_NS
