// The few-rows GEMM (decode: m <= kRowsMaxM): memory-bound, on tensor cores.
//
// The weights are mma.sync's A operand (16 weight rows = 16 output columns by 16 k) and the
// activation rows its B operand (8 rows by 16 k; two n8 tiles at 16 rows), so that one mma
// consumes 512 bytes of weights whatever m is. On CUDA cores every weight element cost m FMAs
// plus its unpacking, which at 8 rows ran at half of cuBLASLt's speed on an H200
// (bench/results/gpu-h200/gemm.json: 8B qkv 12.9 vs 23.9 TFLOP/s); an mma costs one
// instruction per 512 bytes, so every m up to 16 streams the weights at the rate m = 1 does.
//
// Block: 256 threads, 32 weight rows (kRowsBlockCols) over the block's k range [kbeg, kbeg +
// kc) (blockIdx.y = split). Warp w = 4 cg + q owns rows 16 cg .. 16 cg + 15 of the block's 32
// and the k-group q: of every 256 k of the range (kRowsKStep) it takes the 64 at 64 q. Lane l
// = 4 g + t streams rows 16 cg + g and 16 cg + g + 8 at k offsets 8 t and 32 + 8 t of those
// 64 (16-byte loads, never cached in L1; the next 256's loads are issued before this one's
// mma), so every 16 bytes it holds are 8 consecutive k of one row. mma.sync adds over k in any
// order both operands agree on, so the 8 k of lane t are its k columns: elements 4 s .. 4 s +
// 3 are, in mma step s, A's (2t, 2t+1, 2t+8, 2t+9), i.e. the vector's words 2 s and 2 s + 1
// are a0/a2 (row g) and a1/a3 (row g + 8); the activations' same 8 k, read from shared memory
// as one 16-byte vector of row g, give b0, b1. The block copies its k range of the m
// activation rows into shared memory (bf16, [MR][kchunk], zero-filled past m and k; by
// cp.async while the first weight loads are in flight), a chunk of at most kRowsSmemCap
// bytes at a time. At the end the four k-groups' accumulators meet in shared memory and are
// added in k-group order.
//
// Every sum is taken in the same order for every column and row: the 16-k mma steps in k
// order within a k-group, then the k-groups 0..3, then (split-K) the splits. The order
// depends on the split plan alone, never on a column's or a row's place in its tile, so a
// column computes the same bits whichever block and position it has (the fused decode
// kernels rely on that).
//
// Split-K (blockIdx.y over ceil(k / kc) ranges) fills the GPU when n alone is too few columns;
// the partial sums go to the workspace [split][m][n] and gemm_splitk_reduce_kernel
// (gemm_epilogue.cuh) adds them in split order and applies the epilogue. Without splits the
// epilogue is applied directly.
#pragma once

#include "../kernel_api.h"
#include "bf16_vec.cuh"
#include "gemm_epilogue.cuh"
#include "launch.h"

namespace tandem::gpu::TD_NS {

inline constexpr int kRowsMaxM = 16;          // largest m the few-rows path takes
inline constexpr int kRowsThreads = 256;
inline constexpr int kRowsWarps = kRowsThreads / 32;
inline constexpr int kRowsBlockCols = 32;     // output columns (weight rows) per block: 2 column groups of 16
inline constexpr int kRowsKGroups = 4;        // warps sharing a column group, each over its share of k
inline constexpr int kRowsKStep = 256;        // k the block covers per iteration (4 k-groups x 64)
inline constexpr int kRowsSmemCap = 96 * 1024;  // bytes of staged activations per block
inline constexpr int kRowsPrefetchSteps = 2;   // 256-wide steps past the first whose weights go to L2 before the wait
static_assert(kRowsWarps == 2 * kRowsKGroups, "two column groups of 16 rows");

/** The block-local columns (0..31) of this lane's two weight rows: row g and row g + 8 of its warp's group. */
TD_DEVICE void gemm_rows_lane_cols(int (&cols)[2]) {
  const int warp = static_cast<int>(threadIdx.x / 32), g = static_cast<int>(td::lane_id() / 4);
  cols[0] = (warp / kRowsKGroups) * 16 + g;
  cols[1] = cols[0] + 8;
}

// This lane's weights for one 256-wide step at kk (its first k offset in the split): rows 0, 1
// at kk and kk + 32; zeros past klen.
TD_DEVICE void gemm_rows_load(td::vec16 (&wv)[2][2], const td::bf16_bits* const (&wp)[2], int kk, int klen) {
  TD_GEMM_UNROLL
  for (int u = 0; u < 2; ++u) {
    const bool ok = kk + 32 * u < klen;
    TD_GEMM_UNROLL
    for (int c = 0; c < 2; ++c) wv[u][c] = ok ? gemm_load_stream(wp[c] + kk + 32 * u) : td::vec16{0u, 0u, 0u, 0u};
  }
}

/**
 * Stages k [c0, cend) of activation rows [0, MR) into sa ([MR][kchunk] bf16, zeros past the
 * chunk and for rows whose row_of(r) is null) by cp.async, then waits for every thread's copies
 * (a block barrier). row_of(r): row r's element 0 of the staged range (16-byte aligned), or
 * null; `any`: a valid address the zero-filling copies name. The FP8 GEMV and the MoE
 * grouped GEMM (gathered rows) stage theirs the same way.
 */
template <int MR, class RowOf>
TD_DEVICE void gemm_rows_stage_rows(RowOf&& row_of, const td::bf16_bits* any, int c0, int cend, int kchunk, td::bf16_bits* sa) {
  const int vecs = kchunk / 8;
  for (int e = static_cast<int>(threadIdx.x); e < MR * vecs; e += static_cast<int>(blockDim.x)) {
    const int r = e / vecs, v = e - r * vecs;
    const td::bf16_bits* row = row_of(r);
    const bool ok = row != nullptr && c0 + v * 8 < cend;
    td::cp_async16(sa + r * kchunk + v * 8, ok ? row + c0 + v * 8 : any, ok);
  }
  td::cp_async_commit();
  td::cp_async_wait<0>();
  td::sync_threads();
}

/** gemm_rows_stage_rows for rows [0, m) of a (row stride lda) from column kbeg. */
template <int MR>
TD_DEVICE void gemm_rows_stage(const td::bf16_bits* a, int64_t lda, int m, int kbeg, int c0, int cend, int kchunk, td::bf16_bits* sa) {
  gemm_rows_stage_rows<MR>([&](int r) { return r < m ? a + static_cast<int64_t>(r) * lda + kbeg : nullptr; }, a, c0, cend, kchunk, sa);
}

/**
 * The mma of one 256-wide step: this lane's weights wv (gemm_rows_load at its offset kk) times
 * the staged rows' same k, which sit at ks = kk - (the chunk's first k) in sa ([MR][kchunk]),
 * into acc (one n8 tile of rows, two at MR 16).
 */
template <int MR>
TD_DEVICE void gemm_rows_mma_step(float (&acc)[MR > 8 ? 2 : 1][4], const td::vec16 (&wv)[2][2], const td::bf16_bits* sa, int kchunk,
                                  int ks) {
  constexpr int NT = MR > 8 ? 2 : 1;
  const int gr = static_cast<int>(td::lane_id() / 4);
  TD_GEMM_UNROLL
  for (int u = 0; u < 2; ++u) {
    td::vec16 av[NT];
    TD_GEMM_UNROLL
    for (int j = 0; j < NT; ++j) {
      const int r = 8 * j + gr;
      av[j] = r < MR ? *reinterpret_cast<const td::vec16*>(sa + r * kchunk + ks + 32 * u) : td::vec16{0u, 0u, 0u, 0u};
    }
    const uint32_t w0[4] = {wv[u][0].x, wv[u][0].y, wv[u][0].z, wv[u][0].w};
    const uint32_t w1[4] = {wv[u][1].x, wv[u][1].y, wv[u][1].z, wv[u][1].w};
    TD_GEMM_UNROLL
    for (int s = 0; s < 2; ++s) {
      const uint32_t a[4] = {w0[2 * s], w1[2 * s], w0[2 * s + 1], w1[2 * s + 1]};
      TD_GEMM_UNROLL
      for (int j = 0; j < NT; ++j) {
        const uint32_t x[4] = {av[j].x, av[j].y, av[j].z, av[j].w};
        const uint32_t b[2] = {x[2 * s], x[2 * s + 1]};
        td::mma_bf16_16816(acc[j], a, b, acc[j]);
      }
    }
  }
}

/**
 * The k-groups' accumulators meet in `red` (shared, kRowsKGroups x MR x 32 floats; it may alias
 * the staged rows: a barrier comes first) and each sum is taken in k-group order: store(r, col,
 * sum) once for every row r < m and block-local column col. Has block barriers.
 */
template <int MR, class Store>
TD_DEVICE void gemm_rows_reduce(const float (&acc)[MR > 8 ? 2 : 1][4], float* red, int m, Store&& store) {
  constexpr int NT = MR > 8 ? 2 : 1;
  const unsigned lane = td::lane_id();
  const int warp = static_cast<int>(threadIdx.x / 32), q = warp % kRowsKGroups;
  const int gr = static_cast<int>(lane / 4), t = static_cast<int>(lane % 4);
  td::sync_threads();  // every warp is done with what red aliases or held before
  const int col0 = (warp / kRowsKGroups) * 16 + gr;
  TD_GEMM_UNROLL
  for (int j = 0; j < NT; ++j) {
    TD_GEMM_UNROLL
    for (int i = 0; i < 4; ++i) {
      const int r = 8 * j + 2 * t + (i & 1), col = col0 + (i >= 2 ? 8 : 0);
      if (r < MR) red[(q * MR + r) * kRowsBlockCols + col] = acc[j][i];
    }
  }
  td::sync_threads();
  for (int e = static_cast<int>(threadIdx.x); e < m * kRowsBlockCols; e += kRowsThreads) {
    float s = red[e];
    TD_GEMM_UNROLL
    for (int p = 1; p < kRowsKGroups; ++p) s += red[p * MR * kRowsBlockCols + e];
    store(e / kRowsBlockCols, e % kRowsBlockCols, s);
  }
}

/**
 * The dot products of one block: rows [0, g.m) of g.a against its 32 weight rows over k [kbeg,
 * kbeg + klen), the activations staged through `sa` (MR * kchunk bf16, kchunk a multiple of
 * kRowsKStep) a chunk at a time. wp[c]: this lane's weight rows (gemm_rows_lane_cols), already
 * offset to kbeg. Calls store(r, col, sum) once for every row r < g.m and block-local column
 * col, from some thread of the block. Every block thread must call it (it has block barriers).
 * It reads nothing but the weights before td::grid_dependency_wait, so a kernel built on it may
 * be launched as a programmatic dependent (td::launch_dependent) if it does the same.
 */
template <int MR, class Store>
TD_DEVICE void gemm_rows_dot(const GemmArgs& g, int kbeg, int klen, int kchunk, td::bf16_bits* sa,
                             const td::bf16_bits* const (&wp)[2], Store&& store) {
  constexpr int NT = MR > 8 ? 2 : 1;  // n8 tiles of activation rows
  const int q = static_cast<int>(threadIdx.x / 32) % kRowsKGroups, t = static_cast<int>(td::lane_id() % 4);
  float acc[NT][4];
  TD_GEMM_UNROLL
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

  for (int c0 = 0; c0 < klen; c0 += kchunk) {
    const int cend = td::imin(klen, c0 + kchunk);  // this chunk: k [kbeg + c0, kbeg + cend)
    // kk: this lane's first k offset (in the split) of the current 256-wide step.
    int kk = c0 + 64 * q + 8 * t;
    td::vec16 wv[2][2];
    gemm_rows_load(wv, wp, kk, cend);  // in flight while the activations land
    if (c0 == 0) {
      // The weights do not depend on the kernel before (a programmatic dependent launch may
      // start while it runs): the next kRowsPrefetchSteps steps' lines go to L2 too, then wait.
      if (t == 0) {
        for (int i = 1; i <= kRowsPrefetchSteps && kk + i * kRowsKStep < cend; ++i) {
          td::prefetch_l2(wp[0] + kk + i * kRowsKStep);
          td::prefetch_l2(wp[1] + kk + i * kRowsKStep);
        }
      }
      td::grid_dependency_wait();
      td::grid_dependents_launch();
    } else {
      td::sync_threads();  // every warp is done with the previous chunk
    }
    gemm_rows_stage<MR>(g.a, g.lda, g.m, kbeg, c0, cend, kchunk, sa);

    // The trip count is the block's, not the lane's: mma.sync needs the whole warp.
    for (int step = c0; step < cend; step += kRowsKStep) {
      td::vec16 nx[2][2];
      gemm_rows_load(nx, wp, kk + kRowsKStep, cend);
      gemm_rows_mma_step<MR>(acc, wv, sa, kchunk, kk - c0);
      kk += kRowsKStep;
      TD_GEMM_UNROLL
      for (int u = 0; u < 2; ++u) {
        wv[u][0] = nx[u][0];
        wv[u][1] = nx[u][1];
      }
    }
  }

  gemm_rows_reduce<MR>(acc, reinterpret_cast<float*>(sa), g.m, store);  // 4 x MR x 32 floats <= MR x kchunk bf16
}

/**
 * One sum of a few-rows product (bf16 or FP8 weights): the epilogue straight into c without
 * splits, else the split's partial into the workspace (gemm_splitk_reduce applies the epilogue).
 */
TD_DEVICE void gemm_rows_store(const GemmArgs& g, int split, int r, int col, float v) {
  if (col >= g.n) return;
  if (gridDim.y == 1) {
    gemm_store1(g, r, col, v);
  } else {
    g.workspace[(static_cast<int64_t>(split) * g.m + r) * g.n + col] = v;
  }
}

// grid (ceil(n / kRowsBlockCols), splits); dynamic shared memory MR * kchunk bf16.
// Split s covers k [s kc, (s + 1) kc); the block stages it kchunk at a time.
template <int MR>
TD_GLOBAL void TD_LAUNCH_BOUNDS(kRowsThreads) gemm_rows_kernel(GemmArgs g, int kc, int kchunk) {
  TD_DYNAMIC_SHARED(td::bf16_bits, sa);
  const int split = static_cast<int>(blockIdx.y);
  const int kbeg = split * kc;
  const int klen = td::imin(kc, g.k - kbeg);

  // Columns past n read row n - 1 (valid memory); their sums are never stored.
  const int col0 = static_cast<int>(blockIdx.x) * kRowsBlockCols;
  int cols[2];
  gemm_rows_lane_cols(cols);
  const td::bf16_bits* wp[2];
  TD_GEMM_UNROLL
  for (int c = 0; c < 2; ++c) wp[c] = g.w + static_cast<int64_t>(td::imin(col0 + cols[c], g.n - 1)) * g.ldw + kbeg;

  gemm_rows_dot<MR>(g, kbeg, klen, kchunk, sa, wp, [&](int r, int c, float v) { gemm_rows_store(g, split, r, col0 + c, v); });
}

/** How the few-rows path runs one product: MR rows per pass, `splits` k ranges of kc, staged kchunk at a time. */
struct GemmRowsPlan {
  int mr = 0;
  int kc = 0;
  int kchunk = 0;
  int splits = 0;
};

/**
 * Plans the few-rows path; false when it does not apply (m > kRowsMaxM). want_splits 0: enough
 * splits for ~2 blocks per SM, bounded by kGemmMaxSplits and k / 256; 1 without a workspace.
 * Splits only come from filling the GPU (n < 264 x 32 columns), so the workspace they use is
 * at most splits x m x n < 16 x 528 x 32 floats.
 */
inline bool gemm_rows_plan(const GemmArgs& g, int want_splits, GemmRowsPlan& p) {
  if (g.m < 1 || g.m > kRowsMaxM) return false;
  p.mr = 1;
  while (p.mr < g.m) p.mr *= 2;
  const int max_chunk = kRowsSmemCap / (p.mr * 2) / kRowsKStep * kRowsKStep;
  const int ksteps = (g.k + kRowsKStep - 1) / kRowsKStep;
  const int blocks_n = (g.n + kRowsBlockCols - 1) / kRowsBlockCols;
  int s = want_splits;
  if (s <= 0) s = (2 * kGemmSms + blocks_n - 1) / blocks_n;
  if (g.workspace == nullptr) s = 1;
  s = std::max(1, std::min({s, kGemmMaxSplits, ksteps, gemm_splits_that_fit(g)}));
  const int kc = std::max(kRowsKStep, ((g.k + s - 1) / s + kRowsKStep - 1) / kRowsKStep * kRowsKStep);
  p.kc = kc;
  p.splits = std::max(1, (g.k + kc - 1) / kc);
  // Equal chunks, each at most max_chunk (multiples of 256).
  const int chunks = (kc + max_chunk - 1) / max_chunk;
  p.kchunk = ((kc + chunks - 1) / chunks + kRowsKStep - 1) / kRowsKStep * kRowsKStep;
  return true;
}

template <int MR>
void gemm_rows_launch(const GemmArgs& g, const GemmRowsPlan& p, void* stream) {
  const unsigned blocks_n = td::ceil_div(g.n, kRowsBlockCols);
  const size_t smem = static_cast<size_t>(MR) * p.kchunk * sizeof(td::bf16_bits);
  td::launch(gemm_rows_kernel<MR>, {blocks_n, static_cast<unsigned>(p.splits)}, kRowsThreads, smem, stream, g, p.kc,
             p.kchunk);
}

inline void gemm_rows_run(const GemmArgs& g, const GemmRowsPlan& p, void* stream) {
  switch (p.mr) {
    case 1: gemm_rows_launch<1>(g, p, stream); break;
    case 2: gemm_rows_launch<2>(g, p, stream); break;
    case 4: gemm_rows_launch<4>(g, p, stream); break;
    case 8: gemm_rows_launch<8>(g, p, stream); break;
    default: gemm_rows_launch<16>(g, p, stream); break;
  }
  if (p.splits > 1) gemm_splitk_reduce(g, p.splits, stream);
}

}  // namespace tandem::gpu::TD_NS
