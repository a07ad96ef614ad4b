#include "kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

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
