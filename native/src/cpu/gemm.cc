#include "gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "simd.h"

#include "../core/thread_pool.h"
#include "../cuda/fp8.h"
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

// e4m3 -> f32 times 2^-8 (the scale absorbs the 2^8, fp8_gemm below): the sign-extended byte
// shifted left by 7 is an IEEE half with e4m3's exponent and mantissa bits in place (bit 14,
// the sign's copy, masked off), and F16C widens halves exactly, subnormals included, in one
// instruction. Without F16C a 256-entry table does the same.
constexpr float kFp8Unscale = 256.0f;

inline float fp8_table_value(uint8_t b) { return gpu::fp8_bits_to_float(b) * (1.0f / kFp8Unscale); }

#if !defined(__F16C__)
struct Fp8Table {
  float v[256];
  Fp8Table() {
    for (int i = 0; i < 256; ++i) v[i] = fp8_table_value(static_cast<uint8_t>(i));
  }
};
const Fp8Table kFp8Table;
#endif

inline vf load(const uint8_t* p) {
#if defined(__AVX512F__) && defined(__F16C__)
  __m256i h = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  h = _mm256_and_si256(_mm256_slli_epi16(h, 7), _mm256_set1_epi16(static_cast<short>(0xbfff)));
  return (vf)_mm512_cvtph_ps(h);
#elif defined(__AVX__) && defined(__F16C__)
  __m128i h = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  h = _mm_and_si128(_mm_slli_epi16(h, 7), _mm_set1_epi16(static_cast<short>(0xbfff)));
  return (vf)_mm256_cvtph_ps(h);
#else
  vf v;
  for (int i = 0; i < kLanes; ++i) v[i] = kFp8Table.v[p[i]];
  return v;
#endif
}

inline void store(float* p, vf v) { std::memcpy(p, &v, sizeof(v)); }

inline float widen(float v) { return v; }
inline float widen(uint16_t v) { return bf16_bits_to_f32(v); }
inline float widen(uint8_t v) { return fp8_table_value(v); }

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

inline const float* block_f32(const uint8_t* panel, int64_t elems, float* wide) {
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

// ---- FP8 ---------------------------------------------------------------------------------------
//
// y[i][r] = bias[r] + sum over k groups g of (sw[r][g] * sx[i][g]) * sum_{k in g} x[i][k] * e4m3(w[r][k])
// where x is the activations as given (W8A16: sx = 1) or their e4m3 values (W8A8: each row
// quantized per token or per group first, fp8_gemm_activations). Each group's sum is the tile
// of the other paths over the group's columns; its scale is applied once per group and row.

struct Fp8Scales {
  const float* w;     // packed [panel][k group][kNr]
  int64_t groups;     // k groups of the weight
  int64_t group_k;
  const float* x;     // [t][x_groups] activation scales, or null (1)
  int64_t x_groups;   // 1 (per token) or groups (per token and group)
};

// acc of M tokens over one group's columns, scaled and added into tot (or stored when first).
template <int M>
inline void fp8_accumulate(const vf (&acc)[M][2], vf (&tot)[M][2], const float* sw, const Fp8Scales& s, int64_t i0,
                           int64_t g, bool first) {
  const vf w0 = load(sw) * kFp8Unscale, w1 = load(sw + kLanes) * kFp8Unscale;
  for (int i = 0; i < M; ++i) {
    const float xs = s.x != nullptr ? s.x[(i0 + i) * s.x_groups + (s.x_groups == 1 ? 0 : g)] : 1.0f;
    const vf a = acc[i][0] * (w0 * xs), b = acc[i][1] * (w1 * xs);
    tot[i][0] = first ? a : tot[i][0] + a;
    tot[i][1] = first ? b : tot[i][1] + b;
  }
}

template <int M>
void fp8_tile_small(const uint8_t* panel, const float* sw, const Fp8Scales& s, const float* x, int64_t i0, int64_t k,
                    float* y, int64_t ldy, int64_t cols, const float* bias) {
  vf acc[M][2], tot[M][2] = {};
  for (int64_t g = 0, k0 = 0; k0 < k; ++g, k0 += s.group_k) {
    const int64_t kc = std::min(s.group_k, k - k0);
    tile<M>(panel + k0 * kNr, x + i0 * k + k0, k, kc, acc);
    fp8_accumulate<M>(acc, tot, sw + g * kNr, s, i0, g, g == 0);
  }
  write_tile<M>(tot, y + i0 * ldy, ldy, cols, true, bias);
}

template <int M>
void fp8_tile_block(const float* block, const float* sw, const Fp8Scales& s, const float* x, int64_t i0, int64_t k, int64_t k0,
                    int64_t kc, int64_t g, float* y, int64_t ldy, int64_t cols, const float* bias) {
  vf acc[M][2], tot[M][2] = {};
  tile<M>(block, x + i0 * k + k0, k, kc, acc);
  fp8_accumulate<M>(acc, tot, sw + g * kNr, s, i0, g, true);
  write_tile<M>(tot, y + i0 * ldy, ldy, cols, k0 == 0, bias);
}

template <template <int> class F, typename... A>
void fp8_any(int m, A&&... args) {
  switch (m) {
    case 1: F<1>::run(args...); break;
    case 2: F<2>::run(args...); break;
    case 3: F<3>::run(args...); break;
    case 4: F<4>::run(args...); break;
    case 5: F<5>::run(args...); break;
    case 6: F<6>::run(args...); break;
#if defined(__AVX512F__)
    case 7: F<7>::run(args...); break;
    case 8: F<8>::run(args...); break;
#endif
    default: break;
  }
}
template <int M>
struct Fp8Small {
  template <typename... A>
  static void run(A&&... a) { fp8_tile_small<M>(a...); }
};
template <int M>
struct Fp8Block {
  template <typename... A>
  static void run(A&&... a) { fp8_tile_block<M>(a...); }
};

void fp8_gemm(ThreadPool& pool, const float* x, int64_t t, const WeightMatrix& w, const Fp8Scales& s, const float* bias,
              float* y) {
  const int64_t k = w.cols(), n = w.rows();
  const int64_t panels = w.num_panels();
  const uint8_t* packed = w.fp8();
  if (t <= kMr) {
    pool.parallel_for(panels, 1, [&](int64_t p_begin, int64_t p_end, int) {
      for (int64_t p = p_begin; p < p_end; ++p) {
        const int64_t n0 = p * kNr;
        fp8_any<Fp8Small>(static_cast<int>(t), packed + p * k * kNr, s.w + p * s.groups * kNr, s, x, int64_t{0}, k, y + n0, n,
                          std::min<int64_t>(kNr, n - n0), bias != nullptr ? bias + n0 : nullptr);
      }
    });
    return;
  }
  // k blocks of at most kKc columns that never straddle a scale group.
  pool.parallel_for(panels, 1, [&](int64_t p_begin, int64_t p_end, int) {
    alignas(64) float wide[kKc * kNr];
    for (int64_t p = p_begin; p < p_end; ++p) {
      const int64_t n0 = p * kNr;
      const int64_t cols = std::min<int64_t>(kNr, n - n0);
      const float* b = bias != nullptr ? bias + n0 : nullptr;
      const float* sw = s.w + p * s.groups * kNr;
      for (int64_t g = 0; g < s.groups; ++g) {
        const int64_t g_end = std::min(k, (g + 1) * s.group_k);
        for (int64_t k0 = g * s.group_k; k0 < g_end; k0 += kKc) {
          const int64_t kc = std::min<int64_t>(kKc, g_end - k0);
          const float* block = block_f32(packed + (p * k + k0) * kNr, kc * kNr, wide);
          int64_t t0 = 0;
          for (; t0 + kMr <= t; t0 += kMr) fp8_tile_block<kMr>(block, sw, s, x, t0, k, k0, kc, g, y + n0, n, cols, b);
          if (t0 < t) fp8_any<Fp8Block>(static_cast<int>(t - t0), block, sw, s, x, t0, k, k0, kc, g, y + n0, n, cols, b);
        }
      }
    }
  });
}

// W8A8: each activation row quantized as the weight's spec says; the GEMM then reads the e4m3
// values (exact in f32) and applies their scales per group. Scratch grows once per thread.
void fp8_gemm_activations(ThreadPool& pool, const float* x, int64_t t, const WeightMatrix& w, const float* bias, float* y) {
  const ActQuantSpec& a = w.act_quant();
  const int64_t k = w.cols();
  const int64_t xg = a.scheme == ActQuant::kDynamicGroup ? (k + a.group - 1) / a.group : 1;
  thread_local std::vector<float> xq, sx;
  thread_local std::vector<uint8_t> bytes;
  if (xq.size() < static_cast<size_t>(t * k)) xq.resize(static_cast<size_t>(t * k));
  if (bytes.size() < static_cast<size_t>(t * k)) bytes.resize(static_cast<size_t>(t * k));
  if (sx.size() < static_cast<size_t>(t * xg)) sx.resize(static_cast<size_t>(t * xg));
  float* xqp = xq.data();
  float* sxp = sx.data();
  uint8_t* bp = bytes.data();
  pool.parallel_for(t, std::max<int64_t>(1, 16384 / std::max<int64_t>(k, 1)), [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      quantize_activation_row(x + i * k, k, a, bp + i * k, sxp + i * xg);
      for (int64_t c = 0; c < k; ++c) xqp[i * k + c] = gpu::fp8_bits_to_float(bp[i * k + c]);
    }
  });
  const Fp8Scales s{w.fp8_scales(), w.k_groups(), w.group_k(), sxp, xg};
  fp8_gemm(pool, xqp, t, w, s, bias, y);
}

}  // namespace

void matmul_nt(ThreadPool& pool, const float* x, int64_t t, const WeightMatrix& w, const float* bias, float* y) {
  if (t <= 0) return;
  if (w.type() == WeightType::kFP8) {
    if (w.act_quant().scheme != ActQuant::kNone) {
      fp8_gemm_activations(pool, x, t, w, bias, y);
    } else {
      fp8_gemm(pool, x, t, w, Fp8Scales{w.fp8_scales(), w.k_groups(), w.group_k(), nullptr, 1}, bias, y);
    }
  } else if (w.type() == WeightType::kBF16) {
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
