// The FP8 decode GEMV (fp8_kernels.h): c[m][n] = sum_k a[m][k] w[n][k] with e4m3 weights,
// m <= kFp8RowsMaxRows, memory-bound. The shape of gemm_rows.cuh (bf16), with FP8 weights and
// the activation quantization inside:
//
// Block: 8 warps, 32 output columns (weight rows) for all m rows over the block's k range
// (blockIdx.y = split). The block stages that range of the activation rows (bf16) in shared
// memory, a chunk at a time; for W8A8 it then quantizes them there, in place (each value
// replaced by its e4m3 value, exact in bf16), with one scale per row (dynamic: the row's amax
// over all of k, read by every block in a pre-pass; or the static input scale) or per row and
// group (dynamic per group: the group's amax, from shared memory; group_k divides 512 so a
// chunk holds whole groups). Every 16-byte weight load holds 16 e4m3 weights of one row and
// scale group, decoded exactly (sm_89+: cvt.rn.f16x2.e4m3x2; otherwise integer ops and a
// multiply by 2^120, exact for subnormals too). Two main loops:
//   - tensor cores (per-row scales, or groups of a multiple of 64 k: fp8_rows_mma): the bf16
//     few-rows GEMM's layout, the weights decoded to bf16 as mma's A operand, so a weight costs
//     its decoding and no per-row FMA (the CUDA-core loop's cost grows with m); block-scaled
//     weights add each 64-k slice's mma sum times its scales;
//   - CUDA cores (16 or 32-wide groups): warp w owns 4 columns, lane l streams them at k = 16 l
//     + 512 j in f32, multiplying each 16-wide partial by its scales, a butterfly finishing it.
// Per-row scales apply once at the end. Split-K partials go to the workspace and
// gemm_splitk_reduce (gemm_epilogue.cuh) applies the epilogue in split order.
#pragma once

#include "../fp8_kernels.h"
#include "bf16_vec.cuh"
#include "fp8_vec.cuh"
#include "gemm_epilogue.cuh"
#include "gemm_rows.cuh"
#include "launch.h"
#include "reduce.cuh"

namespace tandem::gpu::TD_NS {

inline constexpr int kFp8RowsMaxRows = kFp8RowsMaxM;  // registers: MR x cols accumulators and partials
inline constexpr int kFp8RowsThreads = 256;
inline constexpr int kFp8RowsWarps = kFp8RowsThreads / 32;
inline constexpr int kFp8Cols = 4;          // output columns per warp
inline constexpr int kFp8KStep = 512;       // k covered by one warp-wide 16-byte load (16 e4m3 per lane)
inline constexpr int kFp8Unroll = 2;
inline constexpr int kFp8SmemCap = 96 * 1024;

TD_DEVICE void fp8x16_to_float(const td::vec16& v, float* out) {
  fp8x4_to_float(v.x, out);
  fp8x4_to_float(v.y, out + 4);
  fp8x4_to_float(v.z, out + 8);
  fp8x4_to_float(v.w, out + 12);
}

/** How the GEMV runs one product: MR rows, `splits` k ranges of kc, staged kchunk at a time. */
struct Fp8RowsPlan {
  int mr = 0;
  int kc = 0;
  int kchunk = 0;
  int splits = 0;
};

inline bool fp8_rows_plan(const Fp8GemmArgs& a, Fp8RowsPlan& p) {
  const GemmArgs& g = a.out;
  if (g.m < 1 || g.m > kFp8RowsMaxRows || g.k % 16 != 0 || a.ldw % 16 != 0 || a.lda % 8 != 0) return false;
  if (a.w_groups > 1 && (a.group_k % 16 != 0 || a.w_groups != (g.k + a.group_k - 1) / a.group_k)) return false;
  if (a.act == Fp8Act::kDynamicGroup && (a.w_groups < 2 || kFp8KStep % a.group_k != 0)) return false;
  p.mr = 1;
  while (p.mr < g.m) p.mr *= 2;
  const int max_chunk = std::max(kFp8KStep, kFp8SmemCap / (p.mr * 2) / kFp8KStep * kFp8KStep);
  const int ksteps = (g.k + kFp8KStep - 1) / kFp8KStep;
  const int blocks_n = (g.n + kFp8RowsWarps * kFp8Cols - 1) / (kFp8RowsWarps * kFp8Cols);
  int s = (2 * kGemmSms + blocks_n - 1) / blocks_n;
  if (g.workspace == nullptr) s = 1;
  s = std::max(1, std::min({s, kGemmMaxSplits, ksteps, gemm_splits_that_fit(g)}));
  const int kc = ((g.k + s - 1) / s + kFp8KStep - 1) / kFp8KStep * kFp8KStep;
  p.kc = kc;
  p.splits = std::max(1, (g.k + kc - 1) / kc);
  const int chunks = (kc + max_chunk - 1) / max_chunk;
  p.kchunk = ((kc + chunks - 1) / chunks + kFp8KStep - 1) / kFp8KStep * kFp8KStep;
  return true;
}

/** Bytes of dynamic shared memory: the staged rows, then group scales, then row scales. */
inline size_t fp8_rows_smem(int mr, int kchunk) {
  return static_cast<size_t>(mr) * kchunk * 2 + static_cast<size_t>(mr) * (kchunk / 16) * 4 + static_cast<size_t>(mr) * 4;
}

TD_DEVICE float fp8_act_scale(const Fp8GemmArgs& a, float amax) {
  if (a.act_ub > 0.0f) amax = fminf(amax, a.act_ub);
  return fp8_dynamic_scale(amax);
}

/**
 * Whether the tensor-core main loop takes the product: per-row weight scales, or k groups that
 * are whole 64-wide slices (its mma steps mix the 64 k of a slice; 16 or 32-wide groups run on
 * CUDA cores).
 */
TD_HOST_DEVICE bool fp8_rows_mma(const Fp8GemmArgs& a) { return a.w_groups <= 1 || a.group_k % 64 == 0; }

/**
 * Stages chunk [c0, cend) of the split's activation rows in shared memory (zeros past m and the
 * chunk) and, for W8A8, quantizes them there: each value becomes its e4m3 value (exact in bf16),
 * the per-group scales go to sgrp, the row scales are already in srow. Has block barriers.
 */
template <int MR>
TD_DEVICE void fp8_rows_stage(const Fp8GemmArgs& a, int kbeg, int c0, int cend, int kchunk, td::bf16_bits* sa, float* sgrp,
                              const float* srow, int gpc) {
  const GemmArgs& g = a.out;
  const unsigned lane = td::lane_id();
  const int warp = static_cast<int>(threadIdx.x / 32), tid = static_cast<int>(threadIdx.x);
  td::sync_threads();  // the previous chunk (and the row scales) are done with
  gemm_rows_stage<MR>(a.a, a.lda, g.m, kbeg, c0, cend, kchunk, sa);
  if (a.act == Fp8Act::kNone) return;
  if (a.act == Fp8Act::kDynamicGroup) {
    // One warp per (row, group) of the chunk: the group's amax (zeros past the chunk's end).
    for (int pair = warp; pair < MR * gpc; pair += kFp8RowsWarps) {
      const int r = pair / gpc, gi = pair - r * gpc;
      float amax = 0.0f;
      for (int c = static_cast<int>(lane); c < a.group_k; c += 32) amax = fmaxf(amax, fabsf(td::bf16_to_float(sa[r * kchunk + gi * a.group_k + c])));
      amax = warp_max(amax);
      if (lane == 0) sgrp[r * gpc + gi] = fp8_act_scale(a, amax);
    }
    td::sync_threads();
  }
  // Each value becomes its e4m3 value (exact in bf16); the scales stay aside.
  for (int e = tid; e < MR * kchunk; e += kFp8RowsThreads) {
    const int r = e / kchunk, c = e - r * kchunk;
    const float s = a.act == Fp8Act::kDynamicGroup ? sgrp[r * gpc + c / a.group_k] : srow[r];
    sa[e] = td::float_to_bf16(fp8_bits_to_float(fp8_quantize(td::bf16_to_float(sa[e]), s)));
  }
  td::sync_threads();
}

/** Four e4m3 (a 32-bit word) as two bf16 pairs, exactly: lo = values 0, 1; hi = values 2, 3. */
TD_DEVICE void fp8x4_to_bf16x2(uint32_t x, uint32_t& lo, uint32_t& hi) {
  float f[4];
  fp8x4_to_float(x, f);
  lo = td::pack_bf16x2(f[0], f[1]);
  hi = td::pack_bf16x2(f[2], f[3]);
}

// The tensor-core main loop (fp8_rows_mma): the bf16 few-rows GEMM's layout (gemm_rows.cuh)
// with 16 e4m3 a 16-byte load. Warp w = 4 cg + q owns block columns 16 cg .. 16 cg + 15 and, of
// every 512 k (kFp8KStep), the two 64-k slices at 128 q and 128 q + 64; lane 4 g + t streams
// rows 16 cg + g and + 8 at offset 16 t of each slice. In mma step s of a slice, lane t's
// elements 4 s .. 4 s + 3 (decoded to bf16, exactly) are A's k columns 2t, 2t+1, 2t+8, 2t+9,
// and the same 4 activations of row g (shared memory, already e4m3 values for W8A8) its B. A
// slice lies in one scale group: with groups its 4 mma go to a fresh accumulator that is added
// times (weight scale x activation scale), as the CUDA-core loop adds its 16-wide partials.
template <int MR, bool kGroups>
TD_DEVICE void fp8_rows_mma_loop(const Fp8GemmArgs& a, int kbeg, int klen, int kchunk, td::bf16_bits* sa, float* sgrp,
                                 const float* srow, int gpc, const fp8_bits* const (&wp)[2], const int (&rows)[2],
                                 float (&acc)[4]) {
  static_assert(MR <= 8, "one n8 tile of activation rows");
  const unsigned lane = td::lane_id();
  const int q = static_cast<int>(threadIdx.x / 32) % 4;
  const int gr = static_cast<int>(lane / 4), t = static_cast<int>(lane % 4);
  acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
  auto load = [&](td::vec16 (&wv)[2][2], int kk, int cend) {
    TD_GEMM_UNROLL
    for (int u = 0; u < 2; ++u) {
      TD_GEMM_UNROLL
      for (int c = 0; c < 2; ++c) {
        const int ku = kk + 64 * u;
        wv[u][c] = ku < cend ? gemm_load_stream(reinterpret_cast<const td::bf16_bits*>(wp[c] + ku)) : td::vec16{0u, 0u, 0u, 0u};
      }
    }
  };
  for (int c0 = 0; c0 < klen; c0 += kchunk) {
    const int cend = td::imin(klen, c0 + kchunk);
    fp8_rows_stage<MR>(a, kbeg, c0, cend, kchunk, sa, sgrp, srow, gpc);
    int kk = c0 + 128 * q + 16 * t;  // this lane's offset in the split, first slice of the step
    td::vec16 wv[2][2];
    load(wv, kk, cend);
    // The trip count is the block's, not the lane's: mma.sync needs the whole warp.
    for (int step = c0; step < cend; step += kFp8KStep) {
      td::vec16 nx[2][2];
      load(nx, kk + kFp8KStep, cend);
      TD_GEMM_UNROLL
      for (int u = 0; u < 2; ++u) {
        const int slice = step + 128 * q + 64 * u;  // the warp's slice (split offset)
        if (slice >= cend) continue;               // the warp's, whole
        td::vec16 av[2] = {td::vec16{0u, 0u, 0u, 0u}, td::vec16{0u, 0u, 0u, 0u}};
        if (gr < MR) {
          const td::bf16_bits* ar = sa + gr * kchunk + (slice - c0) + 16 * t;
          av[0] = *reinterpret_cast<const td::vec16*>(ar);
          av[1] = *reinterpret_cast<const td::vec16*>(ar + 8);
        }
        const uint32_t w0[4] = {wv[u][0].x, wv[u][0].y, wv[u][0].z, wv[u][0].w};
        const uint32_t w1[4] = {wv[u][1].x, wv[u][1].y, wv[u][1].z, wv[u][1].w};
        float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        float(&d)[4] = kGroups ? part : acc;
        TD_GEMM_UNROLL
        for (int s = 0; s < 4; ++s) {
          uint32_t a0, a1, a2, a3;
          fp8x4_to_bf16x2(w0[s], a0, a2);
          fp8x4_to_bf16x2(w1[s], a1, a3);
          const uint32_t fa[4] = {a0, a1, a2, a3};
          const td::vec16& v = av[s / 2];
          const uint32_t b[2] = {s % 2 == 0 ? v.x : v.z, s % 2 == 0 ? v.y : v.w};
          td::mma_bf16_16816(d, fa, b, d);
        }
        if constexpr (kGroups) {
          const int gk = (kbeg + slice) / a.group_k;
          const float ws[2] = {a.w_scales[static_cast<int64_t>(rows[0]) * a.w_groups + gk],
                               a.w_scales[static_cast<int64_t>(rows[1]) * a.w_groups + gk]};
          TD_GEMM_UNROLL
          for (int i = 0; i < 4; ++i) {
            const int r = 2 * t + (i & 1);
            const float as = a.act == Fp8Act::kDynamicGroup && r < MR ? sgrp[r * gpc + (slice - c0) / a.group_k] : 1.0f;
            acc[i] += part[i] * (ws[i >> 1] * as);
          }
        }
      }
      kk += kFp8KStep;
      TD_GEMM_UNROLL
      for (int u = 0; u < 2; ++u) {
        wv[u][0] = nx[u][0];
        wv[u][1] = nx[u][1];
      }
    }
  }
}

// The CUDA-core main loop (16 or 32-wide k groups): warp w owns block columns 4 w .. 4 w + 3;
// lane l streams them at k = 16 l + 512 j, decodes 16 weights to f32 and multiplies them into
// every row; each 16-wide partial is added times its scales. On return every lane holds every
// sum of the warp, acc[r * kFp8Cols + c], complete over the split.
template <int MR, bool kGroups>
TD_DEVICE void fp8_rows_core_loop(const Fp8GemmArgs& a, int kbeg, int klen, int kchunk, td::bf16_bits* sa, float* sgrp,
                                  const float* srow, int gpc, const int (&wrow)[kFp8Cols], float (&acc)[MR * kFp8Cols]) {
  constexpr int NC = kFp8Cols, V = MR * NC;
  const GemmArgs& g = a.out;
  const unsigned lane = td::lane_id();
  const fp8_bits* wp[NC];
  TD_GEMM_UNROLL
  for (int c = 0; c < NC; ++c) wp[c] = a.w + static_cast<int64_t>(wrow[c]) * a.ldw + kbeg;
  TD_GEMM_UNROLL
  for (int i = 0; i < V; ++i) acc[i] = 0.0f;
  for (int c0 = 0; c0 < klen; c0 += kchunk) {
    const int cend = td::imin(klen, c0 + kchunk);
    fp8_rows_stage<MR>(a, kbeg, c0, cend, kchunk, sa, sgrp, srow, gpc);
    for (int kk = c0 + static_cast<int>(lane) * 16; kk < cend; kk += kFp8Unroll * kFp8KStep) {
      td::vec16 wv[kFp8Unroll][NC];
      TD_GEMM_UNROLL
      for (int u = 0; u < kFp8Unroll; ++u) {
        TD_GEMM_UNROLL
        for (int c = 0; c < NC; ++c) {
          const int ku = kk + u * kFp8KStep;
          wv[u][c] = ku < cend ? gemm_load_stream(reinterpret_cast<const td::bf16_bits*>(wp[c] + ku)) : td::vec16{0u, 0u, 0u, 0u};
        }
      }
      TD_GEMM_UNROLL
      for (int u = 0; u < kFp8Unroll; ++u) {
        const int ku = kk + u * kFp8KStep;
        if (ku < cend) {
          float wf[NC][16];
          TD_GEMM_UNROLL
          for (int c = 0; c < NC; ++c) fp8x16_to_float(wv[u][c], wf[c]);
          float wsc[NC];
          int gi = 0;
          if constexpr (kGroups) {
            const int gk = (kbeg + ku) / a.group_k;
            TD_GEMM_UNROLL
            for (int c = 0; c < NC; ++c) wsc[c] = a.w_scales[static_cast<int64_t>(wrow[c]) * a.w_groups + gk];
            gi = (ku - c0) / td::imax(a.group_k, 1);
          }
          TD_GEMM_UNROLL
          for (int r = 0; r < MR; ++r) {
            if (r < g.m) {
              float af[16];
              unpack8(*reinterpret_cast<const td::vec16*>(sa + r * kchunk + ku - c0), af);
              unpack8(*reinterpret_cast<const td::vec16*>(sa + r * kchunk + ku - c0 + 8), af + 8);
              const float as = kGroups && a.act == Fp8Act::kDynamicGroup ? sgrp[r * gpc + gi] : 1.0f;
              TD_GEMM_UNROLL
              for (int c = 0; c < NC; ++c) {
                float s = 0.0f;
                TD_GEMM_UNROLL
                for (int e = 0; e < 16; ++e) s += af[e] * wf[c][e];
                if constexpr (kGroups) {
                  acc[r * NC + c] += s * (wsc[c] * as);
                } else {
                  acc[r * NC + c] += s;
                }
              }
            }
          }
        }
      }
    }
  }
  TD_GEMM_UNROLL
  for (int i = 0; i < V; ++i) acc[i] = warp_sum(acc[i]);
}

/**
 * The dot products of one block's split: its 32 weight rows (block column c is weight row
 * row_of(c) < n) over k range [kbeg, kbeg + klen) for the MR activation rows, scaled (weight
 * scales, activation scales): store(r, c, sum) once for every row r < m and block column c,
 * from some thread. Shared by fp8_rows_kernel and the fused decode GEMV (decode_rows.cuh), so
 * both compute the same bits. kMma: the tensor-core main loop (callers pass fp8_rows_mma; each
 * loop is its own kernel, so the CUDA-core loop's registers do not limit the other's blocks).
 * smem: fp8_rows_smem(MR, kchunk). Only weights are read before td::grid_dependency_wait (a
 * programmatic dependent launch may run it). Every block thread must call it (block barriers).
 */
template <int MR, bool kGroups, bool kMma, class RowOf, class Store>
TD_DEVICE void fp8_rows_dot(const Fp8GemmArgs& a, int kbeg, int klen, int kchunk, unsigned char* smem, RowOf&& row_of,
                            Store&& store) {
  constexpr int NC = kFp8Cols;
  const GemmArgs& g = a.out;
  td::bf16_bits* sa = reinterpret_cast<td::bf16_bits*>(smem);
  float* sgrp = reinterpret_cast<float*>(smem + static_cast<size_t>(MR) * kchunk * 2);  // [MR][kchunk / group_k]
  float* srow = sgrp + MR * (kchunk / 16);                                              // [MR]
  const unsigned lane = td::lane_id();
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int q = warp % 4, gr = static_cast<int>(lane / 4), t = static_cast<int>(lane % 4);
  const bool quantize = a.act != Fp8Act::kNone;
  const int gpc = a.act == Fp8Act::kDynamicGroup ? kchunk / a.group_k : 0;  // groups per chunk
  static_assert(kMma || kGroups, "per-row scales always take the tensor cores");

  // This lane's rows in the tensor-core layout; their first two steps go to L2 before the wait.
  const int rows[2] = {row_of((warp / 4) * 16 + gr), row_of((warp / 4) * 16 + gr + 8)};
  const fp8_bits* wp[2] = {a.w + static_cast<int64_t>(rows[0]) * a.ldw + kbeg, a.w + static_cast<int64_t>(rows[1]) * a.ldw + kbeg};
  if (t == 0) {
    for (int i = 0; i < 2 && 128 * q + i * kFp8KStep < klen; ++i) {
      td::prefetch_l2(wp[0] + 128 * q + i * kFp8KStep);
      td::prefetch_l2(wp[1] + 128 * q + i * kFp8KStep);
    }
  }
  td::grid_dependency_wait();
  td::grid_dependents_launch();

  // Row scales: the static scale, or each row's dynamic scale over all of k.
  for (int r = warp; r < MR; r += kFp8RowsWarps) {
    float s = 1.0f;
    if (r < g.m && a.act == Fp8Act::kStatic) s = a.act_static_scale;
    if (r < g.m && a.act == Fp8Act::kDynamicToken) {
      float amax = 0.0f;
      const td::bf16_bits* row = a.a + static_cast<int64_t>(r) * a.lda;
      for (int c = static_cast<int>(lane) * 8; c < g.k; c += 256) {
        float v[8];
        unpack8(*reinterpret_cast<const td::vec16*>(row + c), v);
        for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(v[e]));
      }
      s = fp8_act_scale(a, warp_max(amax));
    }
    if (lane == 0) srow[r] = s;
  }
  // The scales that apply once, to a finished sum.
  auto finish = [&](int r, int c, float v) {
    if (!kGroups) v *= a.w_scales[row_of(c)];
    if (quantize && a.act != Fp8Act::kDynamicGroup) v *= srow[r];
    store(r, c, v);
  };

  if constexpr (kMma) {
    float acc[4];
    fp8_rows_mma_loop<MR, kGroups>(a, kbeg, klen, kchunk, sa, sgrp, srow, gpc, wp, rows, acc);
    // The k-groups meet in shared memory (over the staged rows: 4 x MR x 32 floats fit), then
    // each sum in k-group order.
    float* red = reinterpret_cast<float*>(sa);
    td::sync_threads();
    TD_GEMM_UNROLL
    for (int i = 0; i < 4; ++i) {
      const int r = 2 * t + (i & 1), col = (warp / 4) * 16 + gr + (i >= 2 ? 8 : 0);
      if (r < MR) red[(q * MR + r) * 32 + col] = acc[i];
    }
    td::sync_threads();
    for (int e = static_cast<int>(threadIdx.x); e < g.m * 32; e += kFp8RowsThreads) {
      float v = red[e];
      TD_GEMM_UNROLL
      for (int p = 1; p < 4; ++p) v += red[p * MR * 32 + e];
      finish(e / 32, e % 32, v);
    }
  } else {
    int wrow[NC];
    TD_GEMM_UNROLL
    for (int c = 0; c < NC; ++c) wrow[c] = row_of(NC * warp + c);
    float acc[MR * NC];
    fp8_rows_core_loop<MR, kGroups>(a, kbeg, klen, kchunk, sa, sgrp, srow, gpc, wrow, acc);
    // Every lane holds every sum: lane i finishes sum i (a register array indexed by a constant per unrolled step).
    TD_GEMM_UNROLL
    for (int i = 0; i < MR * NC; ++i) {
      if (static_cast<int>(lane) == i && i / NC < g.m) finish(i / NC, NC * warp + i % NC, acc[i]);
    }
  }
}

// grid (ceil(n / 32), splits); dynamic shared memory fp8_rows_smem(MR, kchunk).
template <int MR, bool kGroups, bool kMma>
TD_GLOBAL void TD_LAUNCH_BOUNDS(kFp8RowsThreads) fp8_rows_kernel(Fp8GemmArgs a, int kc, int kchunk) {
  TD_DYNAMIC_SHARED(unsigned char, smem);
  const GemmArgs& g = a.out;
  const int split = static_cast<int>(blockIdx.y);
  const int kbeg = split * kc;
  const int klen = td::imin(kc, g.k - kbeg);
  const int col0 = static_cast<int>(blockIdx.x) * kFp8RowsWarps * kFp8Cols;
  // Columns past n read row n - 1; never stored.
  fp8_rows_dot<MR, kGroups, kMma>(
      a, kbeg, klen, kchunk, smem, [&](int c) { return td::imin(col0 + c, g.n - 1); },
      [&](int r, int c, float v) { gemm_rows_store(g, split, r, col0 + c, v); });
}

template <int MR>
void fp8_rows_launch(const Fp8GemmArgs& a, const Fp8RowsPlan& p, void* stream) {
  const unsigned blocks_n = td::ceil_div(a.out.n, kFp8RowsWarps * kFp8Cols);
  const td::Grid grid{blocks_n, static_cast<unsigned>(p.splits), 1};
  const size_t smem = fp8_rows_smem(MR, p.kchunk);
  if (a.w_groups <= 1) {
    td::launch(fp8_rows_kernel<MR, false, true>, grid, kFp8RowsThreads, smem, stream, a, p.kc, p.kchunk);
  } else if (fp8_rows_mma(a)) {
    td::launch(fp8_rows_kernel<MR, true, true>, grid, kFp8RowsThreads, smem, stream, a, p.kc, p.kchunk);
  } else {
    td::launch(fp8_rows_kernel<MR, true, false>, grid, kFp8RowsThreads, smem, stream, a, p.kc, p.kchunk);
  }
}

inline bool launch_fp8_gemm_rows(const Fp8GemmArgs& a, void* stream) {
  Fp8RowsPlan p;
  if (a.out.n <= 0 || !fp8_rows_plan(a, p)) return false;
  switch (p.mr) {
    case 1: fp8_rows_launch<1>(a, p, stream); break;
    case 2: fp8_rows_launch<2>(a, p, stream); break;
    case 4: fp8_rows_launch<4>(a, p, stream); break;
    default: fp8_rows_launch<8>(a, p, stream); break;
  }
  if (p.splits > 1) gemm_splitk_reduce(a.out, p.splits, stream);
  return true;
}

}  // namespace tandem::gpu::TD_NS
