// The few-rows GEMM (decode: m <= kRowsMaxM): memory-bound, on CUDA cores.
//
// Block: 8 warps; warp w owns kRowsCols consecutive output columns (rows of w) for all m rows
// over the block's k range [kbeg, kbeg + kc) (blockIdx.y = split). The block copies that range
// of the m activation rows into shared memory (bf16, [MR][kchunk], zero-filled past m; by
// cp.async while the first weight loads are already in flight), one chunk of at most
// kRowsSmemCap bytes at a time. Lane l then streams the
// weights at k = kbeg + 8 l + 256 j: per iteration kRowsUnroll x kRowsCols 16-byte loads in
// flight, each row of w read as 512 contiguous bytes per warp, never cached in L1. Each lane
// keeps MR x kRowsCols partial sums in registers; at the end a reduce-scatter over the warp's
// lanes (shuffles, halving the values each step) leaves every sum complete in one lane.
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
inline constexpr int kRowsCols = 4;           // output columns per warp
inline constexpr int kRowsUnroll = 2;         // 256-wide k steps per iteration (loads in flight: x kRowsCols)
inline constexpr int kRowsKStep = 256;        // k covered by one warp-wide 16-byte load
inline constexpr int kRowsSmemCap = 96 * 1024;  // bytes of staged activations per block

// Halving reduce-scatter across the warp: at offset O, lanes with bit O set keep the upper half
// of their C values and receive their partner's upper half; the others keep the lower half.
// Once one value is left, the remaining offsets are a plain butterfly. `base` accumulates the
// index (into the original C values) of this lane's first remaining value.
template <int C, int O, int V>
TD_DEVICE void gemm_reduce_scatter(float (&acc)[V], unsigned lane, int& base) {
  if constexpr (O > 0) {
    if constexpr (C == 1) {
      acc[0] += td::shfl_xor(acc[0], O);
      gemm_reduce_scatter<1, O / 2>(acc, lane, base);
    } else {
      const bool upper = (lane & static_cast<unsigned>(O)) != 0;
      TD_GEMM_UNROLL
      for (int i = 0; i < C / 2; ++i) {
        const float send = upper ? acc[i] : acc[i + C / 2];
        const float keep = upper ? acc[i + C / 2] : acc[i];
        acc[i] = keep + td::shfl_xor(send, O);
      }
      if (upper) base += C / 2;
      gemm_reduce_scatter<C / 2, O / 2>(acc, lane, base);
    }
  }
}

TD_DEVICE void gemm_rows_load(td::vec16 (&wv)[kRowsUnroll][kRowsCols], const td::bf16_bits* const (&wp)[kRowsCols], int kk,
                              int klen) {
  TD_GEMM_UNROLL
  for (int u = 0; u < kRowsUnroll; ++u) {
    const bool ok = kk + u * kRowsKStep < klen;
    TD_GEMM_UNROLL
    for (int c = 0; c < kRowsCols; ++c) {
      if (ok) {
        wv[u][c] = gemm_load_stream(wp[c] + kk + u * kRowsKStep);
      } else {
        wv[u][c] = td::vec16{0u, 0u, 0u, 0u};
      }
    }
  }
}

/**
 * The dot products of one warp: rows [0, g.m) of g.a against the weight rows wp[c] (already
 * offset to the split's first k, kbeg) over k [kbeg, kbeg + klen), the activations staged
 * through `sa` (MR * kchunk bf16) a chunk at a time by the whole block. On return lane `lane`
 * holds in acc[0, kOwn) the complete sums of values base, base + 1, ... (value v = row v / NC,
 * column v % NC). Every block thread must call it (it has block barriers). Each sum's order
 * depends only on k, never on the value's index, so a column computes the same bits whichever
 * warp and position it has (the fused decode kernels rely on that).
 */
template <int MR>
TD_DEVICE void gemm_rows_dot(const GemmArgs& g, int kbeg, int klen, int kchunk, td::bf16_bits* sa,
                             const td::bf16_bits* const (&wp)[kRowsCols], float (&acc)[MR * kRowsCols], int& base) {
  constexpr int NC = kRowsCols, V = MR * NC;
  const unsigned lane = td::lane_id();
  TD_GEMM_UNROLL
  for (int i = 0; i < V; ++i) acc[i] = 0.0f;

  const int vecs = kchunk / 8;
  for (int c0 = 0; c0 < klen; c0 += kchunk) {
    const int cend = td::imin(klen, c0 + kchunk);  // this chunk: k [kbeg + c0, kbeg + cend)
    if (c0 > 0) td::sync_threads();  // every warp is done with the previous chunk
    // Stage a[0..MR)[chunk] (zeros past m and past the chunk).
    for (int e = static_cast<int>(threadIdx.x); e < MR * vecs; e += kRowsThreads) {
      const int r = e / vecs, v = e - r * vecs;
      const bool ok = r < g.m && c0 + v * 8 < cend;
      const td::bf16_bits* src = ok ? g.a + static_cast<int64_t>(r) * g.lda + kbeg + c0 + v * 8 : g.a;
      td::cp_async16(sa + r * kchunk + v * 8, src, ok);
    }
    td::cp_async_commit();

    // kk: this lane's k offset in the split; the chunk's shared row starts at c0.
    int kk = c0 + static_cast<int>(lane) * 8;
    td::vec16 wv[kRowsUnroll][NC];
    gemm_rows_load(wv, wp, kk, cend);  // in flight while the activations land
    td::cp_async_wait<0>();
    td::sync_threads();

    while (kk < cend) {
      // At 16 rows a step's FMAs take longer than its loads' latency: fetch the next step's
      // weights first (registers allow it: one block per SM either way). Fewer rows rely on
      // other warps to cover the latency and keep their registers for occupancy.
      constexpr bool kPrefetch = MR >= 16;
      const int kn = kk + kRowsUnroll * kRowsKStep;
      td::vec16 nx[kRowsUnroll][NC];
      if constexpr (kPrefetch) gemm_rows_load(nx, wp, kn, cend);
      TD_GEMM_UNROLL
      for (int u = 0; u < kRowsUnroll; ++u) {
        const int ku = kk + u * kRowsKStep;
        if (ku < cend) {
          float wf[NC][8];
          TD_GEMM_UNROLL
          for (int c = 0; c < NC; ++c) unpack8(wv[u][c], wf[c]);
          TD_GEMM_UNROLL
          for (int r = 0; r < MR; ++r) {
            if (r < g.m) {
              float af[8];
              unpack8(*reinterpret_cast<const td::vec16*>(sa + r * kchunk + ku - c0), af);
              TD_GEMM_UNROLL
              for (int c = 0; c < NC; ++c) {
                float s = acc[r * NC + c];
                TD_GEMM_UNROLL
                for (int e = 0; e < 8; ++e) s += af[e] * wf[c][e];
                acc[r * NC + c] = s;
              }
            }
          }
        }
      }
      kk = kn;
      if constexpr (kPrefetch) {
        TD_GEMM_UNROLL
        for (int u = 0; u < kRowsUnroll; ++u) {
          TD_GEMM_UNROLL
          for (int c = 0; c < NC; ++c) wv[u][c] = nx[u][c];
        }
      } else if (kk < cend) {
        gemm_rows_load(wv, wp, kk, cend);
      }
    }
  }
  base = 0;
  gemm_reduce_scatter<V, 16>(acc, lane, base);
}

/** Sums one lane keeps after gemm_rows_dot, and the mask of lanes holding duplicates of them. */
template <int MR>
struct GemmRowsOwn {
  static constexpr int V = MR * kRowsCols;
  static constexpr int kOwn = V >= 32 ? V / 32 : 1;
  static constexpr unsigned kDup = V >= 32 ? 0u : 32u / V - 1u;
};

// grid (ceil(n / (kRowsWarps * kRowsCols)), splits); dynamic shared memory MR * kchunk bf16.
// Split s covers k [s kc, (s + 1) kc); the block stages it kchunk at a time.
template <int MR>
TD_GLOBAL void TD_LAUNCH_BOUNDS(kRowsThreads) gemm_rows_kernel(GemmArgs g, int kc, int kchunk) {
  TD_DYNAMIC_SHARED(td::bf16_bits, sa);
  constexpr int NC = kRowsCols;
  const int split = static_cast<int>(blockIdx.y);
  const int kbeg = split * kc;
  const int klen = td::imin(kc, g.k - kbeg);
  const unsigned lane = td::lane_id();
  const int warp = static_cast<int>(threadIdx.x / 32);

  // Columns past n read row n - 1 (valid memory); their sums are never stored.
  const int col0 = (static_cast<int>(blockIdx.x) * kRowsWarps + warp) * NC;
  const td::bf16_bits* wp[NC];
  TD_GEMM_UNROLL
  for (int c = 0; c < NC; ++c) wp[c] = g.w + static_cast<int64_t>(td::imin(col0 + c, g.n - 1)) * g.ldw + kbeg;

  float acc[MR * NC];
  int base = 0;
  gemm_rows_dot<MR>(g, kbeg, klen, kchunk, sa, wp, acc, base);
  using Own = GemmRowsOwn<MR>;
  if ((lane & Own::kDup) == 0) {
    TD_GEMM_UNROLL
    for (int j = 0; j < Own::kOwn; ++j) {
      const int v = base + j;
      const int r = v / NC, col = col0 + v % NC;
      if (r < g.m && col < g.n) {
        if (gridDim.y == 1) {
          gemm_store1(g, r, col, acc[j]);
        } else {
          g.workspace[(static_cast<int64_t>(split) * g.m + r) * g.n + col] = acc[j];
        }
      }
    }
  }
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
  const int blocks_n = (g.n + kRowsWarps * kRowsCols - 1) / (kRowsWarps * kRowsCols);
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
  const unsigned blocks_n = td::ceil_div(g.n, kRowsWarps * kRowsCols);
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
