#include "kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "simd.h"

#include "../core/thread_pool.h"
#include "../cuda/bf16.h"
#include "../cuda/fp8.h"

namespace tandem {
namespace cpu {
namespace {

// Lane count follows the target's register: 16 (zmm, AVX-512), 8 (ymm, AVX), 4 (xmm, SSE/NEON).
#if defined(__AVX512F__)
constexpr int kLanes = 16;
#elif defined(__AVX__)
constexpr int kLanes = 8;
#else
constexpr int kLanes = 4;
#endif
typedef float vf __attribute__((vector_size(kLanes * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(kLanes * sizeof(int32_t))));

inline vf load(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline void store(float* p, vf v) { std::memcpy(p, &v, sizeof(v)); }

inline vf splat(float x) { return vf{} + x; }

inline float hsum(vf v) {
#if defined(__AVX512F__)
  return _mm512_reduce_add_ps((__m512)v);
#elif defined(__AVX__)
  __m128 s = _mm_add_ps(_mm256_castps256_ps128((__m256)v), _mm256_extractf128_ps((__m256)v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
#else
  float s = 0;
  for (int i = 0; i < kLanes; ++i) s += v[i];
  return s;
#endif
}

inline float hmax(vf v) {
#if defined(__AVX512F__)
  return _mm512_reduce_max_ps((__m512)v);
#else
  float m = v[0];
  for (int i = 1; i < kLanes; ++i) m = std::max(m, v[i]);
  return m;
#endif
}

// exp for x <= 0 (softmax arguments), Cephes expf: x = n ln2 + r with |r| <= ln2/2, a degree-6
// polynomial for e^r, and 2^n built in the exponent bits. About 1 ulp; inputs below -87.3
// (including -inf) give ~1e-38, which callers mask to zero.
inline vf vexp(vf x) {
  x = x < splat(-87.3f) ? splat(-87.3f) : x;
  x = x > splat(88.0f) ? splat(88.0f) : x;
  // Round x * log2(e) to nearest with the 1.5 * 2^23 trick (no -ffast-math, so it survives).
  const vf n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const vf r = x - n * 0.693359375f + n * 2.12194440e-4f;
  vf y = splat(1.9875691500e-4f);
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * r * r + r + 1.0f;
  const vi bits = (__builtin_convertvector(n, vi) + 127) << 23;
  return y * (vf)bits;  // same-size vector cast: a bit cast
}

inline vf lane_index() {
  vf v;
  for (int i = 0; i < kLanes; ++i) v[i] = static_cast<float>(i);
  return v;
}

// s[r][c] = q_r . K[j0 + c] for NR query rows at once: kt is the chunk's K transposed
// ([head_dim][kLanes]), so each step is one broadcast FMA per row and one shared K load.
template <int NR>
inline void chunk_scores(const float* const* q, const float* kt, int64_t d, vf (&s)[NR]) {
  vf a0[NR], a1[NR];  // two chains per row hide FMA latency when NR is small
  for (int r = 0; r < NR; ++r) a0[r] = a1[r] = vf{};
  int64_t dd = 0;
  for (; dd + 2 <= d; dd += 2) {
    const vf k0 = load(kt + dd * kLanes), k1 = load(kt + (dd + 1) * kLanes);
    for (int r = 0; r < NR; ++r) {
      a0[r] += q[r][dd] * k0;
      a1[r] += q[r][dd + 1] * k1;
    }
  }
  if (dd < d) {
    const vf k0 = load(kt + dd * kLanes);
    for (int r = 0; r < NR; ++r) a0[r] += q[r][dd] * k0;
  }
  for (int r = 0; r < NR; ++r) s[r] = a0[r] + a1[r];
}

// o_r[db .. db + NV vectors) = o_r * corr_r + sum_c p_r[c] * V[c]: V rows are loaded once and
// shared by the NR rows; accumulators stay in registers across the chunk's keys.
template <int NR, int NV>
inline void chunk_values(float* const* o, const float* p, const float* corr, const float* vc, int64_t dp,
                         int64_t db, int valid) {
  vf acc[NR][NV];
  for (int r = 0; r < NR; ++r) {
    for (int v = 0; v < NV; ++v) acc[r][v] = load(o[r] + db + v * kLanes) * corr[r];
  }
  for (int c = 0; c < valid; ++c) {
    const float* vr = vc + c * dp + db;
    vf vv[NV];
    for (int v = 0; v < NV; ++v) vv[v] = load(vr + v * kLanes);
    for (int r = 0; r < NR; ++r) {
      const float pr = p[r * kLanes + c];
      for (int v = 0; v < NV; ++v) acc[r][v] += pr * vv[v];
    }
  }
  for (int r = 0; r < NR; ++r) {
    for (int v = 0; v < NV; ++v) store(o[r] + db + v * kLanes, acc[r][v]);
  }
}

// The per-item state the row kernels share; arrays point into the worker's scratch.
struct TileState {
  const float* kt;  // [d][kLanes] K of the chunk, transposed
  const float* vc;  // [kLanes][dp] V of the chunk, rows padded to dp with zeros
  float* o;         // [rows][dp] unnormalized output
  float* m;         // [rows] running max
  float* l;         // [rows] running sum of exp
  float* p;         // [4][kLanes] this chunk's probabilities
  int64_t d, dp;
  float scale;
};

// One chunk of keys [j0, j0 + valid) for NR rows: scores, online softmax update, V sum.
template <int NR>
void chunk_rows(const TileState& st, const float* const* q, float* const* o, const int64_t* pos, int64_t row0,
                int64_t j0, int valid) {
  vf s[NR];
  chunk_scores<NR>(q, st.kt, st.d, s);
  const vf lanes = lane_index() + static_cast<float>(j0);
  float corr[NR];
  for (int r = 0; r < NR; ++r) {
    // Causal mask: key j0 + c is visible to this row when j0 + c <= its position (lanes past
    // the chunk's valid keys are past every row's position too).
    const vi keep = lanes <= splat(static_cast<float>(pos[r]));
    const vf sc = keep ? s[r] * st.scale : splat(-INFINITY);
    const float m_old = st.m[row0 + r];
    const float m_new = std::max(m_old, hmax(sc));
    const vf e = keep ? vexp(sc - m_new) : vf{};
    corr[r] = std::exp(m_old - m_new);  // 0 on the first chunk (m_old = -inf)
    st.l[row0 + r] = st.l[row0 + r] * corr[r] + hsum(e);
    st.m[row0 + r] = m_new;
    store(st.p + r * kLanes, e);
  }
  int64_t db = 0;
  for (; db + 4 * kLanes <= st.dp; db += 4 * kLanes) chunk_values<NR, 4>(o, st.p, corr, st.vc, st.dp, db, valid);
  for (; db < st.dp; db += kLanes) chunk_values<NR, 1>(o, st.p, corr, st.vc, st.dp, db, valid);
}

constexpr int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Rows of a tile: token-major, then the KV head's query heads.
constexpr int64_t kTargetRows = 48;
constexpr int64_t kMaxTileTokens = 16;

int64_t tile_tokens(int64_t group) { return std::clamp<int64_t>(kTargetRows / group, 1, kMaxTileTokens); }

int64_t scratch_floats(int64_t d, int64_t group) {
  const int64_t dp = round_up(d, kLanes);
  const int64_t rows = tile_tokens(group) * group;
  return d * kLanes + kLanes * dp + rows * dp + 2 * rows + 4 * kLanes + d;  // + one K row (bf16/fp8 pools)
}

// One K or V row of a bf16 / e4m3 pool as f32 (e4m3 times the layer's scale).
void gather_row(const AttentionLayer& a, int64_t elem, int64_t d, float scale, float* out) {
  if (a.kv_elem_bytes == 2) {
    const uint16_t* p = static_cast<const uint16_t*>(a.kv_pool_raw) + elem;
    for (int64_t i = 0; i < d; ++i) out[i] = gpu::bf16_bits_to_float(p[i]);
  } else {
    const uint8_t* p = static_cast<const uint8_t*>(a.kv_pool_raw) + elem;
    for (int64_t i = 0; i < d; ++i) out[i] = gpu::fp8_bits_to_float(p[i]) * scale;
  }
}

}  // namespace

float dot(const float* a, const float* b, int64_t n) {
  vf a0{}, a1{};
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    a0 += load(a + i) * load(b + i);
    a1 += load(a + i + kLanes) * load(b + i + kLanes);
  }
  for (; i + kLanes <= n; i += kLanes) a0 += load(a + i) * load(b + i);
  float s = hsum(a0 + a1);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void rmsnorm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  float ss = dot(x, x, n);
  float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = weight[i] * (x[i] * inv);
}

void rope_rotate(float* head, const float* cos, const float* sin, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    float x1 = head[i];
    float x2 = head[i + half];
    head[i] = x1 * cos[i] - x2 * sin[i];
    head[i + half] = x2 * cos[i] + x1 * sin[i];
  }
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void PagedAttention::run(ThreadPool& pool, const ForwardBatch& batch, const KvLayout& layout,
                         const AttentionLayer& a) {
  const int64_t d = layout.head_dim;
  const int64_t dp = round_up(d, kLanes);
  const int64_t group = a.num_heads / layout.num_kv_heads;
  const int64_t tq = tile_tokens(group);
  const int64_t bs = layout.block_size;

  items_.clear();
  double work = 0;  // multiply-adds, to decide whether waking the pool pays
  for (size_t si = 0; si < batch.seqs.size(); ++si) {
    const ForwardSeq& s = batch.seqs[si];
    for (int32_t first = 0; first < s.num_tokens; first += static_cast<int32_t>(tq)) {
      const int32_t count = std::min<int32_t>(static_cast<int32_t>(tq), s.num_tokens - first);
      for (int32_t h = 0; h < layout.num_kv_heads; ++h) items_.push_back({static_cast<int32_t>(si), h, first, count});
      work += 2.0 * static_cast<double>(count * group * (s.start_pos + first + count)) * static_cast<double>(d) *
              static_cast<double>(layout.num_kv_heads);
    }
  }
  // Latest tiles see the most keys: hand them out first so the last claims are the light ones.
  auto end_pos = [&](const Item& it) { return batch.seqs[static_cast<size_t>(it.seq)].start_pos + it.first + it.count; };
  std::sort(items_.begin(), items_.end(), [&](const Item& x, const Item& y) { return end_pos(x) > end_pos(y); });

  const size_t need = static_cast<size_t>(scratch_floats(d, group));
  if (scratch_.size() < static_cast<size_t>(pool.size())) scratch_.resize(static_cast<size_t>(pool.size()));
  for (auto& s : scratch_) {
    if (s.size() < need) s.resize(need);
  }

  const int64_t n_items = static_cast<int64_t>(items_.size());
  // Below ~100k multiply-adds (a few tiny decodes) one thread beats waking the others.
  const int64_t grain = work < 1e5 ? n_items : 1;
  pool.parallel_for(n_items, grain, [&](int64_t begin, int64_t end, int worker) {
    float* buf = scratch_[static_cast<size_t>(worker)].data();
    for (int64_t ii = begin; ii < end; ++ii) {
      const Item& it = items_[static_cast<size_t>(ii)];
      const ForwardSeq& s = batch.seqs[static_cast<size_t>(it.seq)];
      const int64_t rows = it.count * group;
      TileState st;
      float* kt = buf;
      float* vc = kt + d * kLanes;
      st.kt = kt;
      st.vc = vc;
      st.o = vc + kLanes * dp;
      st.m = st.o + rows * dp;
      st.l = st.m + rows;
      st.p = st.l + rows;
      float* krow = st.p + 4 * kLanes;
      st.d = d;
      st.dp = dp;
      st.scale = a.scale;
      std::fill(vc, vc + kLanes * dp, 0.0f);  // the padding columns stay zero
      std::fill(st.o, st.o + rows * dp, 0.0f);
      std::fill(st.m, st.m + rows, -INFINITY);
      std::fill(st.l, st.l + rows, 0.0f);

      const float* q_row[4];
      float* o_row[4];
      int64_t pos[4];
      const int64_t max_pos = s.start_pos + it.first + it.count - 1;
      const int64_t kv_off = it.kv_head * d;
      for (int64_t j0 = 0; j0 <= max_pos; j0 += kLanes) {
        const int valid = static_cast<int>(std::min<int64_t>(kLanes, max_pos + 1 - j0));
        for (int c = 0; c < valid; ++c) {
          const int64_t j = j0 + c;
          const int64_t at = layout.offset(s.block_table[j / bs], a.layer, 0, j % bs) + kv_off;
          if (a.kv_pool_raw == nullptr) {
            const float* k = a.kv_pool + at;
            const float* v = k + layout.kv_stride();
            for (int64_t dd = 0; dd < d; ++dd) kt[dd * kLanes + c] = k[dd];
            std::memcpy(vc + c * dp, v, static_cast<size_t>(d) * sizeof(float));
          } else {
            // bf16 / e4m3 rows widen here, once per key, into the same f32 tiles.
            gather_row(a, at + layout.kv_stride(), d, a.v_scale, vc + c * dp);
            gather_row(a, at, d, a.k_scale, krow);
            for (int64_t dd = 0; dd < d; ++dd) kt[dd * kLanes + c] = krow[dd];
          }
        }
        for (int c = valid; c < kLanes; ++c) {
          for (int64_t dd = 0; dd < d; ++dd) kt[dd * kLanes + c] = 0.0f;
        }
        for (int64_t r0 = 0; r0 < rows; r0 += 4) {
          const int nr = static_cast<int>(std::min<int64_t>(4, rows - r0));
          for (int r = 0; r < nr; ++r) {
            const int64_t row = r0 + r;
            const int64_t t = it.first + row / group;
            const int64_t h = it.kv_head * group + row % group;
            q_row[r] = a.q + (s.token_offset + t) * a.q_stride + h * d;
            o_row[r] = st.o + row * dp;
            pos[r] = s.start_pos + t;
          }
          switch (nr) {
            case 4: chunk_rows<4>(st, q_row, o_row, pos, r0, j0, valid); break;
            case 3: chunk_rows<3>(st, q_row, o_row, pos, r0, j0, valid); break;
            case 2: chunk_rows<2>(st, q_row, o_row, pos, r0, j0, valid); break;
            default: chunk_rows<1>(st, q_row, o_row, pos, r0, j0, valid); break;
          }
        }
      }
      for (int64_t row = 0; row < rows; ++row) {
        const int64_t t = it.first + row / group;
        const int64_t h = it.kv_head * group + row % group;
        float* out = a.out + (s.token_offset + t) * a.out_stride + h * d;
        const float inv = 1.0f / st.l[row];
        const float* o = st.o + row * dp;
        for (int64_t dd = 0; dd < d; ++dd) out[dd] = o[dd] * inv;
      }
    }
  });
}

}  // namespace cpu
}  // namespace tandem
