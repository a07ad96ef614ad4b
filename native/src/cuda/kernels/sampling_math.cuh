// The sampler's arithmetic that must match the CPU sampler bit for bit: the seeded uniform
// draw (splitmix64 of seed and position, as core/sampler.cc), orderable 32-bit keys of the
// processed logits, the 64-bit (key, id) entries the gather buffer sorts, integer shared-memory
// atomics, and glibc's expf (the CPU sampler's std::exp(float)) ported to both targets.
#pragma once

#include "../kernel_api.h"
#include "launch.h"
#include "reduce.cuh"

namespace tandem::gpu::TD_NS {


inline constexpr int kSampleBuckets = 16;
#if TD_CUDA
inline constexpr unsigned kSampleThreads = 512;  // two blocks (rows) per SM in ~100 KB of shared memory each
inline constexpr int kSampleCap = 2048;          // gather buffer entries (a power of two)
#else
inline constexpr unsigned kSampleThreads = 128;
inline constexpr int kSampleCap = 256;  // small, so the checks reach the split and tiled paths
#endif
inline constexpr int kSampleTileVec = 8;  // consecutive ids per thread in a tile
// Bucket scale: sqrt((m - w) / T) * kSampleSqrtScale < 15 for every e > 0 ((m - w) / T < 104).
inline constexpr float kSampleSqrtScale = 1.45f;
inline constexpr uint32_t kKeyMax = 0xffffffffu;

struct SampleConfig {
  int cap;    // gather buffer entries, a power of two >= kSampleMaxTopLogprobs
  int tiles;  // ceil(vocab / (blockDim * kSampleTileVec))
};

// ---- small helpers ---------------------------------------------------------------------------

TD_DEVICE uint64_t sample_splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/** Sampler::uniform(seed, position), bit for bit. */
TD_DEVICE double sample_uniform(const SampleRowDesc& r) {
  const uint64_t seed = (static_cast<uint64_t>(r.seed_hi) << 32) | r.seed_lo;
  const uint64_t pos = (static_cast<uint64_t>(r.position_hi) << 32) | r.position_lo;
  const uint64_t x = sample_splitmix64(sample_splitmix64(seed) ^ pos);
  return static_cast<double>(x >> 11) * (1.0 / 9007199254740992.0);
}

/** Order-preserving u32 key of a float (-0 as +0, so that they tie as the CPU compares them). */
TD_DEVICE uint32_t sample_key(float f) {
  const uint32_t u = td::float_to_bits(f == 0.0f ? 0.0f : f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

TD_DEVICE float sample_key_value(uint32_t k) { return td::bits_to_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k); }

/** Sort entry: ascending order = (w desc, id asc). */
TD_DEVICE uint64_t sample_entry(uint32_t key, int32_t id) {
  return (static_cast<uint64_t>(~key) << 32) | static_cast<uint32_t>(id);
}
TD_DEVICE uint32_t entry_key(uint64_t e) { return ~static_cast<uint32_t>(e >> 32); }
TD_DEVICE int32_t entry_id(uint64_t e) { return static_cast<int32_t>(static_cast<uint32_t>(e)); }

TD_DEVICE void smem_min_u32(uint32_t* p, uint32_t v) {
#if TD_CUDA
  if (v < *reinterpret_cast<volatile uint32_t*>(p)) atomicMin(p, v);
#else
  if (v < *p) *p = v;  // fibers switch only at barriers
#endif
}

TD_DEVICE void smem_max_u32(uint32_t* p, uint32_t v) {
#if TD_CUDA
  if (v > *reinterpret_cast<volatile uint32_t*>(p)) atomicMax(p, v);
#else
  if (v > *p) *p = v;
#endif
}

// expf as glibc (>= 2.28) computes it on x86-64 CPUs with FMA, bit for bit: the CPU sampler's
// std::exp(float) is that function, and e = exp((w - m) / T) decides top-p, min-p and the
// draw, where CUDA's own expf (2 ulp) would differ from it in the last bit for many inputs.
// The algorithm of glibc's sysdeps/ieee754/flt-32/e_expf.c (Arm optimized-routines):
// x / ln2 = k/32 + r/32, exp(x) = 2^(k/32) * p(r) with a cubic p, in double, rounded once to
// float; glibc's FMA build (what its ifunc picks on such CPUs) fuses the three polynomial steps
// and the reduction r = x * 32/ln2 - k. Checked equal to glibc 2.36's expf on every float in
// [-108, 0] (1.12e9 inputs); whether k's rounding is fused makes no difference there.
// Tables: 2^(i/32) with i << 47 taken off the exponent (so that adding k << 47 scales by 2^(k/32)).
#if TD_CUDA
// Global memory, not __constant__: lanes index it differently, which the constant cache serializes.
static __device__ const uint64_t kSampleExp2Tab[32] = {
#else
inline constexpr uint64_t kSampleExp2Tab[32] = {
#endif
    0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull,
    0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull,
    0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull,
    0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull,
    0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull,
    0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull,
    0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull,
    0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull,
};

TD_DEVICE double sample_u64_to_double(uint64_t u) {
#if TD_CUDA
  return __longlong_as_double(static_cast<long long>(u));
#else
  double d;
  std::memcpy(&d, &u, sizeof d);
  return d;
#endif
}

TD_DEVICE uint64_t sample_double_to_u64(double d) {
#if TD_CUDA
  return static_cast<uint64_t>(__double_as_longlong(d));
#else
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
#endif
}

TD_DEVICE float sample_expf(float x) {
  const uint32_t ux = td::float_to_bits(x);
  const uint32_t abstop = (ux >> 20) & 0x7ffu;
  if (abstop >= 0x42bu) {  // |x| >= 88 or NaN
    if (ux == 0xff800000u) return 0.0f;
    if (abstop >= 0x7f8u) return x + x;
    if (x > 0x1.62e42ep6f) return INFINITY;    // > log(2^128)
    if (x < -0x1.9fe368p6f) return 0.0f;  // < log(2^-150)
  }
  const double inv_ln2_n = 0x1.71547652b82fep+0 * 32, shift = 0x1.8p+52;
  const double c0 = 0x1.c6af84b912394p-5 / 32 / 32 / 32, c1 = 0x1.ebfce50fac4f3p-3 / 32 / 32, c2 = 0x1.62e42ff0c52d6p-1 / 32;
  const double xd = static_cast<double>(x);
  double kd = inv_ln2_n * xd + shift;
  const uint64_t ki = sample_double_to_u64(kd);
  kd -= shift;
  const double r = fma(inv_ln2_n, xd, -kd);
  const double s = sample_u64_to_double(kSampleExp2Tab[ki % 32] + (ki << 47));
  const double z = fma(c0, r, c1);
  const double r2 = r * r;
  double y = fma(c2, r, 1.0);
  y = fma(z, r2, y);
  return static_cast<float>(y * s);
}

// ---- the row's prepare -----------------------------------------------------------------------

/** Penalties, bias or a mask: the row is sampled from its prepared copy in the work array. */
TD_DEVICE bool sample_row_prepared(const SampleRowDesc& row) {
  const bool rep_on = row.repetition != 1.0f;
  const bool pf_on = row.presence != 0.0f || row.frequency != 0.0f;
  return (row.penalty_len > 0 && (rep_on || pf_on)) || row.bias_len > 0 || row.mask_offset >= 0;
}

/**
 * The prepared values of ids [lo, hi) of a row, into work (indexed by id), by the whole block,
 * in the CPU sampler's order: the mask (-inf), then the penalties (one thread per distinct
 * history token), then the bias (one thread, in order, so duplicates add up); masked tokens skip
 * both, as the mask overrides them on the CPU too. The one-block kernel prepares [0, vocab),
 * the fast path one chunk per block.
 */
TD_DEVICE void sample_prepare(const SampleArgs& a, const SampleRowDesc& row, const float* raw, float* work, int lo, int hi) {
  const int nt = static_cast<int>(blockDim.x), tid = static_cast<int>(threadIdx.x);
  const uint32_t* mask = row.mask_offset >= 0 ? a.masks + row.mask_offset : nullptr;
  const bool rep_on = row.repetition != 1.0f;
  const bool pf_on = row.presence != 0.0f || row.frequency != 0.0f;
  for (int i = lo + tid; i < hi; i += nt) {
    const bool allowed = mask == nullptr || ((mask[i >> 5] >> (i & 31)) & 1u) != 0;
    work[i] = allowed ? raw[i] : -INFINITY;
  }
  td::sync_threads();
  if (row.penalty_len > 0 && (rep_on || pf_on)) {
    for (int j = tid; j < row.penalty_len; j += nt) {
      const PenaltyEntry pe = a.penalties[row.penalty_offset + j];
      const int tok = pe.token;
      if (tok < lo || tok >= hi) continue;
      if (mask != nullptr && ((mask[tok >> 5] >> (tok & 31)) & 1u) == 0) continue;
      float l = work[tok];
      if (rep_on) l = l > 0 ? l / row.repetition : l * row.repetition;
      if (pf_on && pe.generated > 0) l -= row.frequency * static_cast<float>(pe.generated) + row.presence;
      work[tok] = l;
    }
    td::sync_threads();
  }
  if (row.bias_len > 0) {
    if (tid == 0) {
      for (int j = 0; j < row.bias_len; ++j) {
        const int tok = a.bias_ids[row.bias_offset + j];
        const float v = a.bias_values[row.bias_offset + j];
        if (tok < lo || tok >= hi || !(fabsf(v) <= 3.402823466e38f)) continue;  // finite values only
        if (mask != nullptr && ((mask[tok >> 5] >> (tok & 31)) & 1u) == 0) continue;
        work[tok] += v;
      }
    }
    td::sync_threads();
  }
}

// ---- the row's outputs ------------------------------------------------------------------------

/**
 * Writes a sampled row, by the whole block: the token, its raw logprob (with_logprobs; else
 * NaN), the top_n ids of entries[0, top_n) (the raw order's best, sorted) with theirs, and the
 * rest of the row's top_stride as padding (-1, NaN).
 */
TD_DEVICE void sample_write_row(const SampleArgs& a, int row_index, int32_t token, bool with_logprobs, float log_z, const float* raw,
                                const uint64_t* entries, int top_n) {
  const int nt = static_cast<int>(blockDim.x), tid = static_cast<int>(threadIdx.x);
  const int64_t top_base = static_cast<int64_t>(row_index) * a.top_stride;
  if (tid == 0) a.out_logprobs[row_index] = with_logprobs ? raw[token] - log_z : NAN;
  for (int k = tid; k < top_n; k += nt) {
    const int32_t id = static_cast<int32_t>(static_cast<uint32_t>(entries[k]));
    a.out_top_ids[top_base + k] = id;
    a.out_top_logprobs[top_base + k] = raw[id] - log_z;
  }
  for (int k = top_n + tid; k < a.top_stride; k += nt) {
    a.out_top_ids[top_base + k] = -1;
    a.out_top_logprobs[top_base + k] = NAN;
  }
  if (tid == 0) a.out_tokens[row_index] = token;
}

}  // namespace tandem::gpu::TD_NS
