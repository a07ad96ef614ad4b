// GEMM coverage for the test binary: cpu::matmul_nt against a double-precision product
// computed from the *unpacked* row-major weights, so a packing bug cannot hide behind a
// reference that reads the same panels. The shapes are chosen to hit every edge of the
// blocked kernel:
//  - rows n that do not divide the panel (kPanelRows: 32 on AVX-512, 16 on AVX2, 8 else),
//    so the last panel writes only `cols` rows and its zero padding must not leak out;
//  - columns k below one SIMD vector, at and past the 256-wide k block (a bias must be added
//    once, in the first k block, and later blocks must accumulate);
//  - every token count 1..37: the one-pass GEMV path (t <= kMr), and the blocked path with
//    full 8- (or 6-) token tiles plus each partial tail tile;
//  - with and without bias, f32 and bf16 weights, on a multi-threaded pool.
// The output buffer starts as NaN with NaN canaries after it: a kernel that accumulates into
// a first block instead of overwriting, or writes past row n, fails.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../src/core/thread_pool.h"
#include "../src/cpu/gemm.h"
#include "../src/cpu/weight_matrix.h"
#include "check.h"

namespace tandem_test {

struct GemmShape {
  int64_t n, k;
};

inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return static_cast<uint16_t>(u >> 16);  // truncation: any bf16 value is a valid weight here
}

// Worst error of y against the double product, relative to sum |x * w| + |bias| (the scale
// of f32 rounding in a k-term sum); returns the first bad element's description or "".
inline std::string gemm_compare(const std::vector<float>& x, int64_t t, const std::vector<float>& w_row_major,
                                const float* bias, int64_t n, int64_t k, const std::vector<float>& y, double* worst) {
  std::string first_bad;
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = bias != nullptr ? bias[j] : 0.0;
      double mag = bias != nullptr ? std::fabs(bias[j]) : 0.0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double p = static_cast<double>(x[static_cast<size_t>(i * k + kk)]) * w_row_major[static_cast<size_t>(j * k + kk)];
        s += p;
        mag += std::fabs(p);
      }
      const float got = y[static_cast<size_t>(i * n + j)];
      const double err = std::isfinite(got) ? std::fabs(got - s) / (mag + 1e-30) : INFINITY;
      if (err > *worst) *worst = err;
      if (err > 1e-5 && first_bad.empty()) {
        first_bad = "t=" + std::to_string(t) + " y[" + std::to_string(i) + "][" + std::to_string(j) +
                    "]=" + std::to_string(got) + " want " + std::to_string(s);
      }
    }
  }
  return first_bad;
}

inline void test_gemm_shapes() {
  using tandem::cpu::WeightMatrix;
  // Three threads on any machine: panels are split between workers, including the tail panel.
  tandem::ThreadPool pool(3);
  const GemmShape shapes[] = {{1, 1}, {7, 5}, {33, 19}, {17, 256}, {45, 257}, {71, 300}, {64, 520}};
  const int64_t kMaxTokens = 37;
  std::mt19937 rng(20240611);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const GemmShape& shape : shapes) {
    const int64_t n = shape.n, k = shape.k;
    std::vector<float> w(static_cast<size_t>(n * k)), bias(static_cast<size_t>(n));
    std::vector<uint16_t> w_bits(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      w_bits[i] = f32_to_bf16_bits(normal(rng));
      w[i] = tandem::cpu::bf16_bits_to_f32(w_bits[i]);  // the same values in both storages
    }
    for (float& b : bias) b = normal(rng);
    std::vector<float> x(static_cast<size_t>(kMaxTokens * k));
    for (float& v : x) v = normal(rng);
    const WeightMatrix mats[] = {WeightMatrix::from_f32(w, n, k), WeightMatrix::from_bf16(w_bits, n, k)};
    for (const WeightMatrix& m : mats) {
      const char* type = m.type() == tandem::cpu::WeightType::kBF16 ? "bf16" : "f32";
      for (const float* b : {static_cast<const float*>(nullptr), static_cast<const float*>(bias.data())}) {
        double worst = 0;
        std::string first_bad;
        bool canary_ok = true;
        for (int64_t t = 1; t <= kMaxTokens; ++t) {
          const size_t out = static_cast<size_t>(t * n);
          std::vector<float> y(out + 16, NAN);
          tandem::cpu::matmul_nt(pool, x.data(), t, m, b, y.data());
          for (size_t i = out; i < y.size(); ++i) canary_ok = canary_ok && std::isnan(y[i]);
          std::string bad = gemm_compare(x, t, w, b, n, k, y, &worst);
          if (first_bad.empty()) first_bad = bad;
          if (t == 1 || t == 9 || t == kMaxTokens) {
            // The plain reference other tests use reads the packed panels; it must agree too.
            std::vector<float> r(out);
            tandem::cpu::matmul_nt_reference(x.data(), t, m, b, r.data());
            double rw = 0;
            std::string rbad = gemm_compare(x, t, w, b, n, k, r, &rw);
            CHECK(rbad.empty(), "matmul_nt_reference %s n=%lld k=%lld: %s", type, static_cast<long long>(n),
                  static_cast<long long>(k), rbad.c_str());
          }
        }
        CHECK(first_bad.empty(), "matmul_nt %s n=%lld k=%lld bias=%d: %s (worst relative error %.3g)", type,
              static_cast<long long>(n), static_cast<long long>(k), b != nullptr, first_bad.c_str(), worst);
        CHECK(canary_ok, "matmul_nt %s n=%lld k=%lld bias=%d wrote past t*n outputs", type, static_cast<long long>(n),
              static_cast<long long>(k), b != nullptr);
      }
    }
  }
  std::printf("gemm: %zu shapes x tokens 1..%lld x bias/no bias x f32/bf16 checked\n",
              sizeof(shapes) / sizeof(shapes[0]), static_cast<long long>(kMaxTokens));
}

}  // namespace tandem_test
