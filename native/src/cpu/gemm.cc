#include "gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "simd.h"

#include "../core/thread_pool.h"
#include "weight_matrix.h"

namespace tandem {
namespace cpu {
namespace {

// GCC/Clang vector extensions at the target's native width (zmm on AVX-512, ymm on AVX/AVX2,
// xmm elsewhere), so one source serves every target; intrinsics appear only where codegen
// needed pinning (the bf16 load).
constexpr int kNr = kPanelRows;  // two vectors of output rows per panel
constexpr int kLanes = kNr / 2;
#if defined(__AVX512F__)
constexpr int kMr = 8;  // tokens per tile: 8 x 2 accumulators + 2 weights + 1 broadcast of 32 zmm
#else
constexpr int kMr = 6;  // 12 accumulators of 16 ymm/xmm registers
#endif
constexpr int kPrefetchK = 16;  // GEMV prefetch distance in k rows (1 KiB of bf16 on AVX-512)
constexpr int kKc = 256;  // k-block: kKc x kNr f32 (32 KiB on AVX-512) stays in L1 across token tiles

typedef float vf __attribute__((vector_size(kLanes * sizeof(float))));
typedef uint16_t vh __attribute__((vector_size(kLanes * sizeof(uint16_t))));
typedef uint32_t vu __attribute__((vector_size(kLanes * sizeof(uint32_t))));

inline vf load(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// bf16 is the high half of an f32: widen to 32 bits and shift. Intrinsics pin this to one
// full-width vpmovzxwd + vpslld; left to itself GCC (tuned to prefer 256-bit vectors) splits
// the widening into halves and re-inserts them, which made the bf16 GEMV compute-bound.
inline vf load(const uint16_t* p) {
#if defined(__AVX512F__)
  const __m512i u = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16);
  return (vf)_mm512_castsi512_ps(u);
#elif defined(__AVX2__)
  const __m256i u = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16);
  return (vf)_mm256_castsi256_ps(u);
#else
  vh h;
  std::memcpy(&h, p, sizeof(h));
  const vu u = __builtin_convertvector(h, vu) << 16;
  return (vf)u;  // same-size vector cast: a bit cast
#endif
}

inline void store(float* p, vf v) { std::memcpy(p, &v, sizeof(v)); }

inline float widen(float v) { return v; }
inline float widen(uint16_t v) { return bf16_bits_to_f32(v); }

// ---- micro kernel ---------------------------------------------------------------------------

// M tokens x kNr rows over kc: acc[i] += x[i][kk] * panel[kk] (one broadcast FMA per vector).
// One token has only two accumulator chains, so it alternates two sets to hide FMA latency.
template <int M, typename W>
inline void tile(const W* panel, const float* x, int64_t ldx, int64_t kc, vf (&acc)[M][2]) {
  for (int i = 0; i < M; ++i) acc[i][0] = acc[i][1] = vf{};
  int64_t kk = 0;
  if constexpr (M == 1) {
    vf b0{}, b1{};
    for (; kk + 2 <= kc; kk += 2) {
      // Software prefetch a little ahead: one core's stream otherwise stalls on DRAM latency
      // (about +10% GB/s measured on the GEMV; prefetching past the end is harmless).
      for (int64_t b = 0; b < static_cast<int64_t>(2 * kNr * sizeof(W)); b += 64) {
        __builtin_prefetch(reinterpret_cast<const char*>(panel + (kk + kPrefetchK) * kNr) + b);
      }
      acc[0][0] += x[kk] * load(panel + kk * kNr);
      acc[0][1] += x[kk] * load(panel + kk * kNr + kLanes);
      b0 += x[kk + 1] * load(panel + (kk + 1) * kNr);
      b1 += x[kk + 1] * load(panel + (kk + 1) * kNr + kLanes);
    }
    acc[0][0] += b0;
    acc[0][1] += b1;
  }
  for (; kk < kc; ++kk) {
    const vf w0 = load(panel + kk * kNr);
    const vf w1 = load(panel + kk * kNr + kLanes);
    for (int i = 0; i < M; ++i) {
      const float xv = x[i * ldx + kk];
      acc[i][0] += xv * w0;
      acc[i][1] += xv * w1;
    }
  }
}

// y[i][0..cols) = (first ? bias : y) + acc[i]; cols < kNr only in a matrix's last panel.
template <int M>
inline void write_tile(const vf (&acc)[M][2], float* y, int64_t ldy, int64_t cols, bool first, const float* bias) {
  for (int i = 0; i < M; ++i) {
    float* yr = y + i * ldy;
    if (cols == kNr) {
      vf lo = acc[i][0], hi = acc[i][1];
      if (!first) {
        lo += load(yr);
        hi += load(yr + kLanes);
      } else if (bias != nullptr) {
        lo += load(bias);
        hi += load(bias + kLanes);
      }
      store(yr, lo);
      store(yr + kLanes, hi);
    } else {
      float tmp[kNr];
      store(tmp, acc[i][0]);
      store(tmp + kLanes, acc[i][1]);
      for (int64_t j = 0; j < cols; ++j) {
        const float base = !first ? yr[j] : bias != nullptr ? bias[j] : 0.0f;
        yr[j] = base + tmp[j];
      }
    }
  }
}

template <int M, typename W>
inline void tile_rows(const W* panel, const float* x, int64_t ldx, int64_t kc, float* y, int64_t ldy, int64_t cols,
                      bool first, const float* bias) {
  vf acc[M][2];
  tile<M>(panel, x, ldx, kc, acc);
  write_tile<M>(acc, y, ldy, cols, first, bias);
}

// Runtime token count (1..kMr) -> the template instance.
template <typename W>
void tile_any(int m, const W* panel, const float* x, int64_t ldx, int64_t kc, float* y, int64_t ldy, int64_t cols,
              bool first, const float* bias) {
  switch (m) {
    case 1: tile_rows<1>(panel, x, ldx, kc, y, ldy, cols, first, bias); break;
    case 2: tile_rows<2>(panel, x, ldx, kc, y, ldy, cols, first, bias); break;
    case 3: tile_rows<3>(panel, x, ldx, kc, y, ldy, cols, first, bias); break;
    case 4: tile_rows<4>(panel, x, ldx, kc, y, ldy, cols, first, bias); break;
    case 5: tile_rows<5>(panel, x, ldx, kc, y, ldy, cols, first, bias); break;
    case 6: tile_rows<6>(panel, x, ldx, kc, y, ldy, cols, first, bias); break;
#if defined(__AVX512F__)
    case 7: tile_rows<7>(panel, x, ldx, kc, y, ldy, cols, first, bias); break;
    case 8: tile_rows<8>(panel, x, ldx, kc, y, ldy, cols, first, bias); break;
#endif
    default: break;
  }
}

// ---- drivers ---------------------------------------------------------------------------------

// Few tokens (decode): one pass over each panel, straight from memory; the loop is bound by
// weight bytes, which is where bf16 storage pays.
template <typename W>
void gemm_small(ThreadPool& pool, const float* x, int64_t t, int64_t k, const W* packed, int64_t n,
                const float* bias, float* y) {
  const int64_t panels = (n + kNr - 1) / kNr;
  pool.parallel_for(panels, 1, [&](int64_t p_begin, int64_t p_end, int) {
    for (int64_t p = p_begin; p < p_end; ++p) {
      const int64_t n0 = p * kNr;
      tile_any(static_cast<int>(t), packed + p * k * kNr, x, k, k, y + n0, n, std::min<int64_t>(kNr, n - n0), true,
               bias != nullptr ? bias + n0 : nullptr);
    }
  });
}

inline const float* block_f32(const float* panel, int64_t, float*) { return panel; }

// bf16 k-block widened once into an L1 buffer, then reused by every token tile.
inline const float* block_f32(const uint16_t* panel, int64_t elems, float* wide) {
  int64_t i = 0;
  for (; i + kLanes <= elems; i += kLanes) store(wide + i, load(panel + i));
  for (; i < elems; ++i) wide[i] = widen(panel[i]);
  return wide;
}

// Many tokens (prefill): k-blocked so a panel block stays in L1 while all token tiles use it.
template <typename W>
void gemm_large(ThreadPool& pool, const float* x, int64_t t, int64_t k, const W* packed, int64_t n,
                const float* bias, float* y) {
  const int64_t panels = (n + kNr - 1) / kNr;
  pool.parallel_for(panels, 1, [&](int64_t p_begin, int64_t p_end, int) {
    alignas(64) float wide[kKc * kNr];
    for (int64_t p = p_begin; p < p_end; ++p) {
      const int64_t n0 = p * kNr;
      const int64_t cols = std::min<int64_t>(kNr, n - n0);
      const float* b = bias != nullptr ? bias + n0 : nullptr;
      for (int64_t k0 = 0; k0 < k; k0 += kKc) {
        const int64_t kc = std::min<int64_t>(kKc, k - k0);
        const float* block = block_f32(packed + (p * k + k0) * kNr, kc * kNr, wide);
        const bool first = k0 == 0;
        int64_t t0 = 0;
        for (; t0 + kMr <= t; t0 += kMr) {
          tile_rows<kMr>(block, x + t0 * k + k0, k, kc, y + t0 * n + n0, n, cols, first, b);
        }
        if (t0 < t) tile_any(static_cast<int>(t - t0), block, x + t0 * k + k0, k, kc, y + t0 * n + n0, n, cols, first, b);
      }
    }
  });
}

template <typename W>
void gemm(ThreadPool& pool, const float* x, int64_t t, int64_t k, const W* packed, int64_t n, const float* bias,
          float* y) {
  if (t <= kMr) {
    gemm_small(pool, x, t, k, packed, n, bias, y);
  } else {
    gemm_large(pool, x, t, k, packed, n, bias, y);
  }
}

}  // namespace

void matmul_nt(ThreadPool& pool, const float* x, int64_t t, const WeightMatrix& w, const float* bias, float* y) {
  if (t <= 0) return;
  if (w.type() == WeightType::kBF16) {
    gemm(pool, x, t, w.cols(), w.bf16(), w.rows(), bias, y);
  } else {
    gemm(pool, x, t, w.cols(), w.f32(), w.rows(), bias, y);
  }
}

void matmul_nt_reference(const float* x, int64_t t, const WeightMatrix& w, const float* bias, float* y) {
  const int64_t n = w.rows(), k = w.cols();
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t j = 0; j < n; ++j) {
    w.row_to_f32(j, row.data());
    for (int64_t i = 0; i < t; ++i) {
      double s = bias != nullptr ? bias[j] : 0.0;
      for (int64_t kk = 0; kk < k; ++kk) s += static_cast<double>(x[i * k + kk]) * row[static_cast<size_t>(kk)];
      y[i * n + j] = static_cast<float>(s);
    }
  }
}

}  // namespace cpu
}  // namespace tandem
