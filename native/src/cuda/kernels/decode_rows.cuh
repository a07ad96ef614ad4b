// The fused decode GEMVs (decode_api.h): the few-rows GEMM's main loop (gemm_rows_dot) with
// an epilogue finished in the same launch by the last block of each group to arrive.
//
//   grid (tiles, splits), 256 threads. Block (t, s): 32 weight rows over k range s.
//     1. dot products -> workspace[s][r][weight row]            (every block, every split)
//     2. last block of the group (kResidualNorm, kSiluMul: the tile's splits; kQkvRope: every
//        tile and split of a group of whole heads) sums the splits in split order and applies
//        the epilogue: += into the residual | silu(gate) * up | bias, q/k norm, RoPE, K/V write
//     3. last group to finish (kResidualNorm with a norm, kQkvRope with a progress slot): the
//        RMSNorm of every row into the next input | the layer-progress mark
//
// Tiles: kResidualNorm and kQkvRope take 32 consecutive weight rows per block, as
// gemm_rows_kernel; kSiluMul pairs them: tile t's columns are gate rows 16 t .. 16 t + 15 and
// the up rows of the same indices, so a tile finishes 16 outputs of the activation.
// The split plan is gemm_rows_plan's for the same product, so every partial sum, and the
// split-order reduction after it, is the unfused path's. FP8 weights (DecodeGemvArgs::w8): the
// FP8 GEMV's plan and block dot (fp8_rows_dot, 32 weight rows a block), its scaled sums into
// the same workspace, then the same epilogues.
#pragma once

#include <stdexcept>

#include "../decode_api.h"
#include "fp8_gemm_rows.cuh"
#include "gemm_rows.cuh"
#include "last_block.cuh"
#include "row_ops.cuh"

namespace tandem::gpu::TD_NS {

inline constexpr int kDecodeTileRows = kRowsBlockCols;  // weight rows per block (32)

struct DecodeGemvPlan {
  GemmRowsPlan rows;
  int tiles = 0;
  int groups = 0;           // epilogue groups (counters 0..groups-1; the grid's is `groups`)
  int tiles_per_group = 1;  // kQkvRope: tiles covering a group of whole heads
  int heads_per_group = 1;
};

TD_HOST_DEVICE GemmArgs decode_gemm_args(const DecodeGemvArgs& a) {
  GemmArgs g;
  g.m = a.m;
  g.n = a.n;
  g.k = a.k;
  g.a = a.a;
  g.lda = a.lda;
  g.w = a.w;
  g.ldw = a.ldw;
  g.bias = a.bias;
  g.workspace = a.workspace;
  g.workspace_floats = a.workspace_floats;
  return g;
}

/** The FP8 GEMV's arguments for the same product (DecodeGemvArgs::w8). */
TD_HOST_DEVICE Fp8GemmArgs decode_fp8_args(const DecodeGemvArgs& a) {
  Fp8GemmArgs f;
  f.out = decode_gemm_args(a);
  f.a = a.a;
  f.lda = a.lda;
  f.act = a.w8_act;
  f.act_static_scale = a.w8_act_static;
  f.act_ub = a.w8_act_ub;
  f.w = a.w8;
  f.ldw = a.ldw;
  f.w_scales = a.w8_scales;
  f.w_groups = a.w8_groups;
  f.group_k = a.w8_group_k;
  return f;
}

inline int decode_gcd(int a, int b) { return b == 0 ? a : decode_gcd(b, a % b); }

/** The launch of a fused GEMV; false when it does not apply (m outside 1..kDecodeMaxRows, an FP8 layout the GEMV does not take). */
inline bool decode_gemv_plan(const DecodeGemvArgs& a, DecodeGemvPlan& p) {
  if (a.m < 1 || a.m > kDecodeMaxRows || a.n < 1 || a.k < 8) return false;
  if (a.w8 != nullptr) {
    Fp8RowsPlan f;
    if (!fp8_rows_plan(decode_fp8_args(a), f)) return false;
    p.rows.mr = f.mr;
    p.rows.kc = f.kc;
    p.rows.kchunk = f.kchunk;
    p.rows.splits = f.splits;
  } else if (!gemm_rows_plan(decode_gemm_args(a), 0, p.rows)) {
    return false;
  }
  switch (a.epilogue) {
    case DecodeEpilogue::kSiluMul:
      if (a.n % 2 != 0) return false;
      p.tiles = td::ceil_div(a.n / 2, kDecodeTileRows / 2);
      p.groups = p.tiles;
      break;
    case DecodeEpilogue::kQkvRope: {
      const int d = a.rope.head_dim;
      if (d < 2 || a.n % d != 0) return false;
      p.heads_per_group = kDecodeTileRows / decode_gcd(d, kDecodeTileRows);  // lcm(d, 32) / d
      p.tiles_per_group = p.heads_per_group * d / kDecodeTileRows;
      p.tiles = td::ceil_div(a.n, kDecodeTileRows);
      p.groups = td::ceil_div(a.n / d, p.heads_per_group);
      break;
    }
    default:
      p.tiles = td::ceil_div(a.n, kDecodeTileRows);
      p.groups = p.tiles;
      break;
  }
  return true;
}

/** Sum over the splits of one (row, weight row), in split order as gemm_splitk_reduce_kernel. */
TD_DEVICE float decode_split_sum(const DecodeGemvArgs& a, int splits, int r, int col) {
  const int64_t total = static_cast<int64_t>(a.m) * a.n, i = static_cast<int64_t>(r) * a.n + col;
  float s = load_cg(a.workspace + i);
  for (int p = 1; p < splits; ++p) s += load_cg(a.workspace + p * total + i);
  return s;
}

// kW: 0 bf16 weights (gemm_rows_dot), 1 FP8 with a scale per row, 2 FP8 with scales per k group
// on tensor cores, 3 the same on CUDA cores (fp8_rows_mma).
template <int MR, int kW>
TD_GLOBAL void TD_LAUNCH_BOUNDS(kRowsThreads) decode_gemv_kernel(DecodeGemvArgs a, DecodeGemvPlan p) {
  static_assert(kW == 0 || (kFp8RowsThreads == kRowsThreads && kFp8RowsWarps * kFp8Cols == kDecodeTileRows),
                "the FP8 main loop covers a block's 32 rows");
  TD_DYNAMIC_SHARED(td::bf16_bits, sa);
  TD_SHARED(int, flag, 1);
  TD_SHARED(float, scratch, 32);
  const GemmArgs g = decode_gemm_args(a);
  const int tile = static_cast<int>(blockIdx.x), split = static_cast<int>(blockIdx.y);
  const int kbeg = split * p.rows.kc;
  const int klen = td::imin(p.rows.kc, g.k - kbeg);
  const unsigned lane = td::lane_id();
  const int warp = static_cast<int>(threadIdx.x / 32);
  const bool silu = a.epilogue == DecodeEpilogue::kSiluMul;
  const int inter = a.n / 2;

  // Block-local column c (0..31) is weight row wrow(c); its sum is stored when keep(c). kSiluMul
  // pairs them: columns 0..15 are gate rows j0 .. j0 + 15, columns 16..31 the up rows of the
  // same indices, so the tile finishes 16 outputs of the activation.
  const int j0 = tile * (kDecodeTileRows / 2), col0 = tile * kDecodeTileRows;
  auto wrow = [&](int c) { return silu ? (c < 16 ? j0 + c : inter + j0 + c - 16) : col0 + c; };
  auto keep = [&](int c) { return silu ? j0 + c % 16 < inter : col0 + c < g.n; };
  auto put = [&](int r, int c, float v) {
    if (keep(c)) a.workspace[(static_cast<int64_t>(split) * g.m + r) * g.n + wrow(c)] = v;
  };
  if constexpr (kW == 0) {
    int cols[2];
    gemm_rows_lane_cols(cols);
    const td::bf16_bits* wp[2];  // rows past n read row n - 1; never stored
    TD_GEMM_UNROLL
    for (int c = 0; c < 2; ++c) wp[c] = g.w + static_cast<int64_t>(td::imin(wrow(cols[c]), g.n - 1)) * g.ldw + kbeg;
    gemm_rows_dot<MR>(g, kbeg, klen, p.rows.kchunk, sa, wp, put);
  } else {
    // Rows past n read row n - 1; never stored.
    fp8_rows_dot<MR, (kW >= 2), (kW != 3)>(decode_fp8_args(a), kbeg, klen, p.rows.kchunk, reinterpret_cast<unsigned char*>(sa),
                              [&](int c) { return td::imin(wrow(c), g.n - 1); }, put);
  }

  // ---- the group's last block: its epilogue.
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  const int splits = p.rows.splits;
  if (a.epilogue == DecodeEpilogue::kQkvRope) {
    const int group = tile / p.tiles_per_group;
    const int group_tiles = td::imin(p.tiles_per_group, p.tiles - group * p.tiles_per_group);
    if (!last_block_arrive(a.counters + group, group_tiles * splits, flag)) return;
    const int d = a.rope.head_dim, heads = a.n / d;
    const int h0 = group * p.heads_per_group, h1 = td::imin(heads, h0 + p.heads_per_group);
    const int c0 = h0 * d, cols = (h1 - h0) * d;
    for (int e = tid; e < g.m * cols; e += nt) {
      const int r = e / cols, col = c0 + e % cols;
      a.rope.qkv[r * a.rope.qkv_stride + col] = decode_split_sum(a, splits, r, col);
    }
    td::sync_threads();  // the block's writes are visible to its warps
    const int items = g.m * (h1 - h0);
    for (int it = warp; it < items; it += nt / 32) qkv_rope_head(a.rope, it / (h1 - h0), h0 + it % (h1 - h0), lane);
    if (a.progress == nullptr || !last_block_arrive(a.counters + p.groups, p.groups, flag)) return;
    if (tid == 0) {
      // The host or a peer polls the flag: every group's K/V (seen through the counters) first.
      td::threadfence_system();
      *reinterpret_cast<volatile int64_t*>(a.progress) = a.progress_value;
    }
    return;
  }
  if (!last_block_arrive(a.counters + tile, splits, flag)) return;
  if (silu) {
    constexpr int kCols = kDecodeTileRows / 2;
    for (int e = tid; e < g.m * kCols; e += nt) {
      const int r = e / kCols, j = j0 + e % kCols;
      if (j >= inter) continue;
      const float gate = td::bf16_to_float(td::float_to_bf16(decode_split_sum(a, splits, r, j)));
      const float up = td::bf16_to_float(td::float_to_bf16(decode_split_sum(a, splits, r, inter + j)));
      a.act[r * a.ldact + j] = td::float_to_bf16(silu_mul1(gate, up));
    }
    return;
  }
  // kResidualNorm: this tile's columns into the residual (gemm_store1 with accumulate).
  for (int e = tid; e < g.m * kDecodeTileRows; e += nt) {
    const int r = e / kDecodeTileRows, col = col0 + e % kDecodeTileRows;
    if (col >= g.n) continue;
    float v = decode_split_sum(a, splits, r, col);
    if (a.bias != nullptr) v += a.bias[col];
    float* px = a.x + r * a.ldx + col;
    *px = load_cg(px) + v;
  }
  if (a.norm_weight == nullptr || !last_block_arrive(a.counters + p.groups, p.groups, flag)) return;
  for (int r = 0; r < g.m; ++r) rmsnorm_row(a.x + r * a.ldx, a.norm_weight, g.n, a.eps, a.xn + r * a.ldxn, scratch, CgLoad{});
}

template <int MR, int kW>
void decode_gemv_launch(const DecodeGemvArgs& a, const DecodeGemvPlan& p, void* stream, bool overlap) {
  const size_t smem = kW == 0 ? static_cast<size_t>(MR) * p.rows.kchunk * sizeof(td::bf16_bits) : fp8_rows_smem(MR, p.rows.kchunk);
  td::launch_dependent(overlap, decode_gemv_kernel<MR, kW>, {static_cast<unsigned>(p.tiles), static_cast<unsigned>(p.rows.splits)},
                       kRowsThreads, smem, stream, a, p);
}

template <int kW>
void decode_gemv_rows(const DecodeGemvArgs& a, const DecodeGemvPlan& p, void* stream, bool overlap) {
  switch (p.rows.mr) {
    case 1: decode_gemv_launch<1, kW>(a, p, stream, overlap); break;
    case 2: decode_gemv_launch<2, kW>(a, p, stream, overlap); break;
    case 4: decode_gemv_launch<4, kW>(a, p, stream, overlap); break;
    case 8: decode_gemv_launch<8, kW>(a, p, stream, overlap); break;
    default:
      if constexpr (kW == 0) decode_gemv_launch<16, 0>(a, p, stream, overlap);  // the FP8 plan stops at kFp8RowsMaxM (8)
      break;
  }
}

/** overlap: a programmatic dependent launch (the weights stream while the kernel before finishes). */
inline void launch_decode_gemv(const DecodeGemvArgs& a, void* stream, bool overlap) {
  DecodeGemvPlan p;
  if (!decode_gemv_plan(a, p)) throw std::invalid_argument("decode gemv: shape out of range (m 1..16, or 1..8 for FP8; n, k, head_dim)");
  if (a.w8 == nullptr) {
    decode_gemv_rows<0>(a, p, stream, overlap);
  } else if (a.w8_groups > 1) {
    if (fp8_rows_mma(decode_fp8_args(a))) {
      decode_gemv_rows<2>(a, p, stream, overlap);
    } else {
      decode_gemv_rows<3>(a, p, stream, overlap);
    }
  } else {
    decode_gemv_rows<1>(a, p, stream, overlap);
  }
}

}  // namespace tandem::gpu::TD_NS
