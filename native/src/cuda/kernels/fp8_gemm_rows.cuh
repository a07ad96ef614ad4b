// The FP8 decode GEMV (fp8_kernels.h): c[m][n] = sum_k a[m][k] w[n][k] with e4m3 weights,
// m <= kFp8RowsMaxRows, memory-bound, on CUDA cores. The shape of gemm_rows.cuh (bf16), with
// FP8 weights and the activation quantization inside:
//
// Block: 8 warps; warp w owns kFp8Cols consecutive output columns for all m rows over the
// block's k range (blockIdx.y = split). The block stages that range of the activation rows
// (bf16) in shared memory, a chunk at a time; for W8A8 it then quantizes them there, in place
// (each value replaced by its e4m3 value, exact in bf16), with one scale per row (dynamic: the
// row's amax over all of k, read by every block in a pre-pass; or the static input scale) or
// per row and group (dynamic per group: the group's amax, from shared memory; group_k divides
// 512 so a chunk holds whole groups). Lane l streams the weights at k = 16 l + 512 j: one
// 16-byte load per column holds 16 e4m3 weights of one scale group, decoded to f32 exactly
// (sm_89+: cvt.rn.f16x2.e4m3x2; otherwise integer ops and a multiply by 2^120, exact for
// subnormals too). Block-scaled weights multiply each 16-wide partial sum by the weight's
// group scale (and the activations' group scale); per-row scales apply once at the end. A
// butterfly over the warp's lanes finishes each sum; split-K partials go to the workspace and
// gemm_splitk_reduce (gemm_epilogue.cuh) applies the epilogue in split order.
#pragma once

#include "../fp8_kernels.h"
#include "bf16_vec.cuh"
#include "fp8_vec.cuh"
#include "gemm_epilogue.cuh"
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
 * The dot products of one block's split: this warp's kFp8Cols weight rows `wrow` (each < n) over
 * k range [kbeg, kbeg + klen) for the MR activation rows, every sum finished (every lane holds all
 * of them: acc[r * kFp8Cols + c]) and scaled (weight row scale, activation row scale): what the
 * GEMV stores for the split. Shared by fp8_rows_kernel and the fused decode GEMV
 * (decode_rows.cuh), so both compute the same bits. smem: fp8_rows_smem(MR, kchunk).
 */
template <int MR, bool kGroups>
TD_DEVICE void fp8_rows_dot(const Fp8GemmArgs& a, int kbeg, int klen, int kchunk, unsigned char* smem, const int* wrow,
                            float (&acc)[MR * kFp8Cols]) {
  constexpr int NC = kFp8Cols, V = MR * NC;
  const GemmArgs& g = a.out;
  td::bf16_bits* sa = reinterpret_cast<td::bf16_bits*>(smem);
  float* sgrp = reinterpret_cast<float*>(smem + static_cast<size_t>(MR) * kchunk * 2);  // [MR][kchunk / group_k]
  float* srow = sgrp + MR * (kchunk / 16);                                              // [MR]
  const unsigned lane = td::lane_id();
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int tid = static_cast<int>(threadIdx.x);
  const bool quantize = a.act != Fp8Act::kNone;
  const int gpc = a.act == Fp8Act::kDynamicGroup ? kchunk / a.group_k : 0;  // groups per chunk

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

  const fp8_bits* wp[NC];
  TD_GEMM_UNROLL
  for (int c = 0; c < NC; ++c) wp[c] = a.w + static_cast<int64_t>(wrow[c]) * a.ldw + kbeg;
  TD_GEMM_UNROLL
  for (int i = 0; i < V; ++i) acc[i] = 0.0f;

  const int vecs = kchunk / 8;
  for (int c0 = 0; c0 < klen; c0 += kchunk) {
    const int cend = td::imin(klen, c0 + kchunk);
    td::sync_threads();  // the previous chunk (and the row scales) are done with
    for (int e = tid; e < MR * vecs; e += kFp8RowsThreads) {
      const int r = e / vecs, v = e - r * vecs;
      const bool ok = r < g.m && c0 + v * 8 < cend;
      const td::bf16_bits* src = ok ? a.a + static_cast<int64_t>(r) * a.lda + kbeg + c0 + v * 8 : a.a;
      td::cp_async16(sa + r * kchunk + v * 8, src, ok);
    }
    td::cp_async_commit();
    td::cp_async_wait<0>();
    td::sync_threads();
    if (quantize) {
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
  for (int i = 0; i < V; ++i) {
    float v = warp_sum(acc[i]);
    if (!kGroups) v *= a.w_scales[wrow[i % NC]];
    if (quantize && a.act != Fp8Act::kDynamicGroup) v *= srow[i / NC];
    acc[i] = v;
  }
}

// grid (ceil(n / (kFp8RowsWarps * kFp8Cols)), splits); dynamic shared memory fp8_rows_smem(MR, kchunk).
template <int MR, bool kGroups>
TD_GLOBAL void TD_LAUNCH_BOUNDS(kFp8RowsThreads) fp8_rows_kernel(Fp8GemmArgs a, int kc, int kchunk) {
  TD_DYNAMIC_SHARED(unsigned char, smem);
  constexpr int NC = kFp8Cols, V = MR * NC;
  const GemmArgs& g = a.out;
  const int split = static_cast<int>(blockIdx.y);
  const int kbeg = split * kc;
  const int klen = td::imin(kc, g.k - kbeg);
  const unsigned lane = td::lane_id();
  const int col0 = (static_cast<int>(blockIdx.x) * kFp8RowsWarps + static_cast<int>(threadIdx.x / 32)) * NC;
  int colc[NC];
  TD_GEMM_UNROLL
  for (int c = 0; c < NC; ++c) colc[c] = td::imin(col0 + c, g.n - 1);  // columns past n read row n - 1; never stored
  float acc[V];
  fp8_rows_dot<MR, kGroups>(a, kbeg, klen, kchunk, smem, colc, acc);
  if (lane < static_cast<unsigned>(V)) {
    // Lane i stores value i (a register array indexed by a constant per unrolled step).
    TD_GEMM_UNROLL
    for (int i = 0; i < V; ++i) {
      if (static_cast<int>(lane) == i) {
        const int r = i / NC, col = col0 + i % NC;
        if (r < g.m && col < g.n) {
          if (gridDim.y == 1) {
            gemm_store1(g, r, col, acc[i]);
          } else {
            g.workspace[(static_cast<int64_t>(split) * g.m + r) * g.n + col] = acc[i];
          }
        }
      }
    }
  }
}

template <int MR>
void fp8_rows_launch(const Fp8GemmArgs& a, const Fp8RowsPlan& p, void* stream) {
  const unsigned blocks_n = td::ceil_div(a.out.n, kFp8RowsWarps * kFp8Cols);
  const td::Grid grid{blocks_n, static_cast<unsigned>(p.splits), 1};
  const size_t smem = fp8_rows_smem(MR, p.kchunk);
  if (a.w_groups > 1) {
    td::launch(fp8_rows_kernel<MR, true>, grid, kFp8RowsThreads, smem, stream, a, p.kc, p.kchunk);
  } else {
    td::launch(fp8_rows_kernel<MR, false>, grid, kFp8RowsThreads, smem, stream, a, p.kc, p.kchunk);
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
