#include "kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../core/thread_pool.h"

namespace tandem {
namespace cpu {
namespace {

// Lane count follows the target: 16 where AVX-512 exists (zmm), else 8 (ymm, or 2x xmm).
#if defined(__AVX512F__)
constexpr int kLanes = 16;
#else
constexpr int kLanes = 8;
#endif
typedef float v8f __attribute__((vector_size(kLanes * sizeof(float))));

inline v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline v8f zero() { return v8f{} ; }

inline float hsum(v8f v) {
  float s = 0;
  for (int i = 0; i < kLanes; ++i) s += v[i];
  return s;
}

// 4 tokens x 4 weight rows: 16 accumulators, each X and W load used four times.
inline void micro_4x4(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t k,
                      float* out /*[4][4] t-major*/) {
  v8f acc[4][4];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) acc[i][j] = zero();
  int64_t kk = 0;
  for (; kk + kLanes <= k; kk += kLanes) {
    v8f w0 = load8(w + kk), w1 = load8(w + ldw + kk), w2 = load8(w + 2 * ldw + kk),
        w3 = load8(w + 3 * ldw + kk);
    for (int i = 0; i < 4; ++i) {
      v8f xv = load8(x + i * ldx + kk);
      acc[i][0] += xv * w0;
      acc[i][1] += xv * w1;
      acc[i][2] += xv * w2;
      acc[i][3] += xv * w3;
    }
  }
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      float s = hsum(acc[i][j]);
      for (int64_t r = kk; r < k; ++r) s += x[i * ldx + r] * w[j * ldw + r];
      out[i * 4 + j] = s;
    }
  }
}

// 1 token x 4 weight rows, for decode (GEMV) and token tails.
inline void micro_1x4(const float* x, const float* w, int64_t ldw, int64_t k, float* out) {
  v8f a0 = zero(), a1 = a0, a2 = a0, a3 = a0;
  int64_t kk = 0;
  for (; kk + kLanes <= k; kk += kLanes) {
    v8f xv = load8(x + kk);
    a0 += xv * load8(w + kk);
    a1 += xv * load8(w + ldw + kk);
    a2 += xv * load8(w + 2 * ldw + kk);
    a3 += xv * load8(w + 3 * ldw + kk);
  }
  float s[4] = {hsum(a0), hsum(a1), hsum(a2), hsum(a3)};
  for (; kk < k; ++kk) {
    for (int j = 0; j < 4; ++j) s[j] += x[kk] * w[j * ldw + kk];
  }
  std::memcpy(out, s, sizeof(s));
}

}  // namespace

float dot(const float* a, const float* b, int64_t n) {
  v8f a0 = zero(), a1 = a0;
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    a0 += load8(a + i) * load8(b + i);
    a1 += load8(a + i + kLanes) * load8(b + i + kLanes);
  }
  for (; i + kLanes <= n; i += kLanes) a0 += load8(a + i) * load8(b + i);
  float s = hsum(a0 + a1);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void axpy(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void matmul_nt(ThreadPool& pool, const float* x, int64_t t, int64_t k, const float* w, int64_t n,
               const float* bias, float* y) {
  constexpr int64_t kTokenBlock = 64;  // keeps a block of X resident in L2 across weight rows
  const int64_t row_tiles = (n + 3) / 4;
  pool.parallel_for(row_tiles, 4, [&](int64_t tile_begin, int64_t tile_end, int) {
    float tile[16];
    for (int64_t t0 = 0; t0 < t; t0 += kTokenBlock) {
      const int64_t t1 = std::min(t, t0 + kTokenBlock);
      for (int64_t rt = tile_begin; rt < tile_end; ++rt) {
        const int64_t n0 = rt * 4;
        const int64_t rows = std::min<int64_t>(4, n - n0);
        const float* wr = w + n0 * k;
        if (rows < 4) {  // ragged last tile: plain dots
          for (int64_t ti = t0; ti < t1; ++ti) {
            for (int64_t j = 0; j < rows; ++j) {
              float s = dot(x + ti * k, wr + j * k, k);
              y[ti * n + n0 + j] = bias != nullptr ? s + bias[n0 + j] : s;
            }
          }
          continue;
        }
        int64_t ti = t0;
        for (; ti + 4 <= t1; ti += 4) {
          micro_4x4(x + ti * k, k, wr, k, k, tile);
          for (int i = 0; i < 4; ++i) {
            for (int j = 0; j < 4; ++j) {
              float s = tile[i * 4 + j];
              y[(ti + i) * n + n0 + j] = bias != nullptr ? s + bias[n0 + j] : s;
            }
          }
        }
        for (; ti < t1; ++ti) {
          micro_1x4(x + ti * k, wr, k, k, tile);
          for (int j = 0; j < 4; ++j) {
            y[ti * n + n0 + j] = bias != nullptr ? tile[j] + bias[n0 + j] : tile[j];
          }
        }
      }
    }
  });
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

}  // namespace cpu
}  // namespace tandem
