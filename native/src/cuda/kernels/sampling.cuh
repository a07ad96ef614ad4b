// The GPU sampler: one block per row, the CPU sampler's semantics (core/sampler.h) without
// sorting the vocabulary. Per row:
//   prepare  rows with penalties, bias or a mask: work = logits with the mask (-inf) applied,
//            then the penalties (one thread per distinct history token), then the bias (one
//            thread, in order, so duplicates add up); masked tokens skip both, as the mask
//            overrides them on the CPU too. Other rows read their logits in place.
//   max      block arg max (ties to the lowest id): the greedy token, and m for e = exp((w-m)/T).
//   bucket   (only with top-k, top-p or min-p) one pass of per-bucket count, mass and key range,
//            15 buckets by sqrt((m - w) / T) plus one for e == 0. Buckets are upper sets of
//            the order (w desc, id asc), so a boundary (the k-th token, the first whose
//            cumulative mass reaches top_p * total) lies in the first bucket whose cumulative
//            count / mass reaches it; that bucket is then
//              - gathered with everything above it when that fits the shared buffer (a
//                complete prefix: it serves the following searches and the draw too),
//              - else gathered alone (the buckets above it summed up),
//              - else split again, 16 ways over its key range (one more pass), until it fits
//                or holds a single value, whose ties are resolved by an id-ordered scan.
//            A gathered set is bitonic-sorted by (w desc, id asc) and scanned in order.
//   draw     kept = (rank <= min(top-k, top-p boundary)) and e >= min_p; target =
//            uniform(seed, position) * mass(kept); the kept tokens are walked in id order to
//            the first whose cumulative mass exceeds it. When the kept set lies in a gathered
//            prefix, it is re-sorted by id in shared memory; else two tiled passes (tile sums,
//            then the one tile holding target) with segmented scans in id order.
//   logprobs log Z of the raw logits (double sum), the sampled token's logprob, and the top n
//            found like the top-k boundary on the raw logits, then gathered and sorted.
// Passes over a row (reads of vocab floats): greedy 1; temperature only 1 + 1 partial;
// top-k / top-p / min-p whose kept set fits the buffer 3; larger kept sets ~5-6 (an extra
// split per 16x narrowing, plus the tiled draw); +1 (read + write) for a prepared row; logprobs
// +1 (log Z), with top n +2 (max of raw if prepared, bucket pass fused with log Z, gather).
// Deterministic: sums in double in fixed orders (per-thread sequential, then fixed-order
// block reductions); atomics only on integers (counts, key min/max, gather slots).
// Exact: e is computed with the CPU's float expression and glibc's expf algorithm
// (sample_expf), so both samplers see the same e; only the order of the double sums differs,
// which can change a decision only when a sum lands within rounding of a boundary.
// A row whose every token is masked samples token 0 (the CPU sampler does the same).
#pragma once

#include <stdexcept>

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

/** The row being sampled or ranked: values, and m and 1/T for e = exp((w - m) / T). */
struct SampleSrc {
  const float* v;
  int n;
  float m;
  float inv_t;
  /** The CPU sampler's expression, so both see the same float. */
  TD_DEVICE float e_of(float w) const { return sample_expf((w - m) * inv_t); }
};

/** Level-0 bucket: sqrt-spaced in (m - w) / T; the last one holds the tokens with e == 0. */
TD_DEVICE int sample_bucket0(const SampleSrc& s, float w, float e) {
  if (!(e > 0.0f)) return kSampleBuckets - 1;
  const float v = sqrtf(fmaxf((s.m - w) * s.inv_t, 0.0f)) * kSampleSqrtScale;
  return v < static_cast<float>(kSampleBuckets - 2) ? static_cast<int>(v) : kSampleBuckets - 2;
}

/** Split of a key range [klo, khi] into 16 (bucket 0 highest). */
TD_DEVICE int sample_bucket_key(uint32_t key, uint32_t klo, uint32_t khi) {
  const uint64_t span = static_cast<uint64_t>(khi - klo) + 1;
  return static_cast<int>(static_cast<uint64_t>(khi - key) * kSampleBuckets / span);
}

/** Block criteria on the cumulative (count, mass) through a token of the order. */
enum SampleCrit : int { kCritCount = 0, kCritMassGe = 1, kCritMassGt = 2 };

struct SampleCriterion {
  int kind;
  long long k;    // kCritCount: count >= k
  double target;  // mass >= target (kCritMassGe) or > target (kCritMassGt)
  TD_DEVICE bool ok(long long cnt, double mass) const {
    return kind == kCritCount ? cnt >= k : kind == kCritMassGe ? mass >= target : mass > target;
  }
};

/** A boundary token of the order and the cumulative count and mass through it. */
struct SampleBoundary {
  bool found;
  uint32_t key;
  int32_t id;
  long long cnt;
  double mass;
};

/** The gather buffer: sorted entries of the keys in [klo, khi] (ids <= id_cut where key == klo). */
struct SampleBuf {
  bool valid;
  int n;
  uint32_t klo, khi;
  int32_t id_cut;
  long long above_cnt;  // tokens ranked before the buffer
  double above_mass;
  TD_DEVICE bool complete() const { return valid && khi == kKeyMax && above_cnt == 0; }
};

/** Shared memory of one block (all arrays; see sample_kernel for the sizes). */
struct SampleSmem {
  double* mcol;    // [buckets][threads] per-thread mass
  uint16_t* ccol;  // [buckets][threads] per-thread count
  uint64_t* buf;   // [cap]
  double* tiles;   // [tiles]
  double* dscr;    // [32]
  long long* lscr;  // [32]
  int* iscr;       // [32]
  float* fscr;     // [32]
  ArgMax* ascr;    // [32]
  int* cnt;        // [buckets] stats of the last bucket pass
  double* mass;
  uint32_t* kmin;
  uint32_t* kmax;
  int* cnt0;  // [buckets] level-0 stats of the current source
  double* mass0;
  uint32_t* kmin0;
  uint32_t* kmax0;
  int* ivar;     // [4] broadcast slots
  double* dvar;  // [4]
};

// ---- block primitives ------------------------------------------------------------------------

TD_DEVICE int block_min_int(int v, int* scratch) {
  const unsigned lane = td::lane_id(), warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int m = 16; m > 0; m >>= 1) v = td::imin(v, td::shfl_xor(v, m));
  td::sync_threads();
  if (lane == 0) scratch[warp] = v;
  td::sync_threads();
  int r = scratch[0];
  for (unsigned w = 1; w < warps; ++w) r = td::imin(r, scratch[w]);
  return r;
}

TD_DEVICE int block_max_int(int v, int* scratch) { return -block_min_int(-v, scratch); }

/**
 * Exclusive scan over the threads in thread order; `total` gets the sum of all. Warp
 * Hillis-Steele scans, then warp totals in index order: a fixed order on both targets.
 */
template <typename T>
TD_DEVICE T block_exclusive_scan(T v, T* scratch, T& total) {
  const unsigned lane = td::lane_id(), warp = threadIdx.x / 32, warps = blockDim.x / 32;
  T incl = v;
  for (int d = 1; d < 32; d <<= 1) {
    const T o = td::shfl(incl, static_cast<int>(lane) >= d ? static_cast<int>(lane) - d : static_cast<int>(lane));
    if (static_cast<int>(lane) >= d) incl += o;
  }
  T excl = td::shfl(incl, lane == 0 ? 0 : static_cast<int>(lane) - 1);
  if (lane == 0) excl = T(0);
  td::sync_threads();
  if (lane == 31) scratch[warp] = incl;
  td::sync_threads();
  T off = T(0), all = T(0);
  for (unsigned w = 0; w < warps; ++w) {
    if (w == warp) off = all;
    all += scratch[w];
  }
  total = all;
  return off + excl;
}

/** Ascending bitonic sort of buf[0, p), p a power of two. */
TD_DEVICE void sample_bitonic_sort(uint64_t* buf, int p) {
  const int half = p / 2;
  for (int k = 2; k <= p; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = static_cast<int>(threadIdx.x); i < half; i += static_cast<int>(blockDim.x)) {
        const int lo = ((i & ~(j - 1)) << 1) | (i & (j - 1));
        const int hi = lo + j;
        const bool up = (lo & k) == 0;
        const uint64_t a = buf[lo], b = buf[hi];
        if ((a > b) == up) {
          buf[lo] = b;
          buf[hi] = a;
        }
      }
      td::sync_threads();
    }
  }
}

TD_DEVICE int sample_pow2(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

// ---- bucket statistics ------------------------------------------------------------------------

/**
 * One pass over the source: per bucket the count, the mass (kMass) and the key range of the
 * tokens with keys in [klo, khi]; level 0 buckets by sample_bucket0, deeper levels split the
 * key range. With kLogZ, also returns the double sum of exp(w - m) over all tokens (log Z).
 */
template <bool kMass, bool kLogZ>
TD_DEVICE double sample_stats(const SampleSmem& sm, const SampleSrc& s, bool level0, uint32_t klo, uint32_t khi, int* cnt,
                              double* mass, uint32_t* kmin, uint32_t* kmax) {
  const int nt = static_cast<int>(blockDim.x), tid = static_cast<int>(threadIdx.x);
  for (int b = 0; b < kSampleBuckets; ++b) {
    sm.ccol[b * nt + tid] = 0;
    if (kMass) sm.mcol[b * nt + tid] = 0.0;
  }
  if (tid < kSampleBuckets) {
    kmin[tid] = kKeyMax;
    kmax[tid] = 0;
  }
  td::sync_threads();
  double z = 0.0;
  for (int i = tid; i < s.n; i += nt) {
    const float w = s.v[i];
    if (kLogZ) z += exp(static_cast<double>(w - s.m));
    const uint32_t key = sample_key(w);
    if (!level0 && (key < klo || key > khi)) continue;
    const float e = (kMass || level0) ? s.e_of(w) : 0.0f;
    const int b = level0 ? sample_bucket0(s, w, e) : sample_bucket_key(key, klo, khi);
    sm.ccol[b * nt + tid] = static_cast<uint16_t>(sm.ccol[b * nt + tid] + 1);
    if (kMass) sm.mcol[b * nt + tid] += static_cast<double>(e);
    smem_min_u32(&kmin[b], key);
    smem_max_u32(&kmax[b], key);
  }
  td::sync_threads();
  const unsigned lane = td::lane_id(), warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (unsigned b = warp; b < static_cast<unsigned>(kSampleBuckets); b += warps) {
    double m = 0.0;
    int c = 0;
    for (int t = static_cast<int>(lane); t < nt; t += 32) {
      if (kMass) m += sm.mcol[b * nt + t];
      c += sm.ccol[b * nt + t];
    }
    c = warp_sum(c);
    if (kMass) m = warp_sum(m);
    if (lane == 0) {
      cnt[b] = c;
      mass[b] = kMass ? m : 0.0;
    }
  }
  if (kLogZ) z = block_sum(z, sm.dscr);  // syncs before reading its scratch
  td::sync_threads();
  return z;
}

// ---- gather and scan --------------------------------------------------------------------------

/**
 * Gathers the tokens with key in [klo, khi] (and id <= id_cut where key == klo) into the
 * buffer, sorted. `n` is their count (from the stats, <= cap).
 */
TD_DEVICE void sample_gather(const SampleSmem& sm, const SampleSrc& s, SampleBuf& bf, int n, uint32_t klo, uint32_t khi,
                             int32_t id_cut, long long above_cnt, double above_mass) {
  const int nt = static_cast<int>(blockDim.x), tid = static_cast<int>(threadIdx.x);
  if (tid == 0) sm.ivar[0] = 0;
  td::sync_threads();
  for (int i = tid; i < s.n; i += nt) {
    const uint32_t key = sample_key(s.v[i]);
    if (key < klo || key > khi || (key == klo && i > id_cut)) continue;
    const int slot = td::atomic_add(&sm.ivar[0], 1);
    if (slot < n) sm.buf[slot] = sample_entry(key, i);
  }
  td::sync_threads();
  const int p = sample_pow2(n);
  for (int j = n + tid; j < p; j += nt) sm.buf[j] = ~0ull;
  td::sync_threads();
  sample_bitonic_sort(sm.buf, p);
  bf.valid = true;
  bf.n = n;
  bf.klo = klo;
  bf.khi = khi;
  bf.id_cut = id_cut;
  bf.above_cnt = above_cnt;
  bf.above_mass = above_mass;
}

/**
 * The first buffer entry at which `crit` holds, counting from the buffer's above totals;
 * not found (rounding at the very end) gives the last entry.
 */
TD_DEVICE SampleBoundary sample_scan_buffer(const SampleSmem& sm, const SampleSrc& s, const SampleBuf& bf,
                                            const SampleCriterion& crit) {
  const int nt = static_cast<int>(blockDim.x), tid = static_cast<int>(threadIdx.x);
  const int per = (bf.n + nt - 1) / nt;
  const int lo = td::imin(bf.n, tid * per), hi = td::imin(bf.n, lo + per);
  double local = 0.0;
  for (int j = lo; j < hi; ++j) local += static_cast<double>(s.e_of(sample_key_value(entry_key(sm.buf[j]))));
  double total;
  const double base = bf.above_mass + block_exclusive_scan(local, sm.dscr, total);
  int found = 0x7fffffff;
  double run = 0.0, at = 0.0;
  for (int j = lo; j < hi; ++j) {
    run += static_cast<double>(s.e_of(sample_key_value(entry_key(sm.buf[j]))));
    if (crit.ok(bf.above_cnt + j + 1, base + run)) {
      found = j;
      at = base + run;
      break;
    }
  }
  const int first = block_min_int(found, sm.iscr);
  SampleBoundary r;
  if (first != 0x7fffffff) {
    if (found == first) sm.dvar[0] = at;
    td::sync_threads();
    r.mass = sm.dvar[0];
    r.cnt = bf.above_cnt + first + 1;
  } else {
    r.mass = bf.above_mass + total;
    r.cnt = bf.above_cnt + bf.n;
  }
  const int j = first != 0x7fffffff ? first : bf.n - 1;
  const uint64_t e = sm.buf[j];
  r.found = true;
  r.key = entry_key(e);
  r.id = entry_id(e);
  td::sync_threads();  // dvar and the buffer may be rewritten next
  return r;
}

/** Per-thread sums over its kSampleTileVec ids of a tile, for a membership test. */
template <typename Member>
TD_DEVICE void sample_tile_sums(const SampleSrc& s, int tile, const Member& member, int& cnt, double& mass) {
  const int first = (tile * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x)) * kSampleTileVec;
  cnt = 0;
  mass = 0.0;
  for (int j = 0; j < kSampleTileVec; ++j) {
    const int i = first + j;
    if (i >= s.n) break;
    const float w = s.v[i];
    float e;
    if (member(i, w, e)) {
      ++cnt;
      mass += static_cast<double>(e);
    }
  }
}

/**
 * Walks one tile in id order: the first member id whose cumulative (count, mass) meets crit,
 * from the tile's base totals; -1 when none does. Sets the tile's totals.
 */
template <typename Member>
TD_DEVICE int sample_tile_find(const SampleSmem& sm, const SampleSrc& s, int tile, const Member& member,
                               const SampleCriterion& crit, long long base_cnt, double base_mass, long long& tile_cnt,
                               double& tile_mass, long long* cnt_at, double* mass_at) {
  int c;
  double m;
  sample_tile_sums(s, tile, member, c, m);
  long long ctot;
  const long long cex = block_exclusive_scan(static_cast<long long>(c), sm.lscr, ctot);
  double mtot;
  const double mex = block_exclusive_scan(m, sm.dscr, mtot);
  tile_cnt = ctot;
  tile_mass = mtot;
  int found = 0x7fffffff;
  long long fc = 0;
  double fm = 0.0;
  if (c > 0) {
    // The cumulative totals through each of this thread's ids: its base plus its running sum.
    const int first = (tile * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x)) * kSampleTileVec;
    const long long cb = base_cnt + cex;
    const double mb = base_mass + mex;
    long long rc = 0;
    double rm = 0.0;
    for (int j = 0; j < kSampleTileVec; ++j) {
      const int i = first + j;
      if (i >= s.n) break;
      float e;
      if (!member(i, s.v[i], e)) continue;
      ++rc;
      rm += static_cast<double>(e);
      if (crit.ok(cb + rc, mb + rm)) {
        found = i;
        fc = cb + rc;
        fm = mb + rm;
        break;
      }
    }
  }
  const int first = block_min_int(found, sm.iscr);
  if (first == 0x7fffffff) return -1;
  if (found == first) {
    sm.dvar[1] = fm;
    sm.lscr[0] = fc;  // lscr is free again: the scans above have read it
  }
  td::sync_threads();
  if (cnt_at) *cnt_at = sm.lscr[0];
  if (mass_at) *mass_at = sm.dvar[1];
  td::sync_threads();
  return first;
}

// ---- boundary search --------------------------------------------------------------------------

/**
 * The first token of the order (w desc, id asc) at which `crit` holds, from the level-0 stats
 * in sm.cnt0/mass0/kmin0/kmax0 (see the file comment). not found: crit never holds.
 */
template <bool kMass>
TD_DEVICE SampleBoundary sample_search(const SampleSmem& sm, const SampleSrc& s, const SampleConfig& cfg, SampleBuf& bf,
                                       const SampleCriterion& crit) {
  SampleBoundary r{false, 0u, 0, 0, 0.0};
  long long above_c = 0;
  double above_m = 0.0;
  int b = -1;
  for (int bb = 0; bb < kSampleBuckets; ++bb) {
    if (sm.cnt0[bb] == 0) continue;
    if (crit.ok(above_c + sm.cnt0[bb], above_m + sm.mass0[bb])) {
      b = bb;
      break;
    }
    above_c += sm.cnt0[bb];
    above_m += sm.mass0[bb];
  }
  if (b < 0) return r;
  uint32_t klo = sm.kmin0[b], khi = sm.kmax0[b];
  long long n_int = sm.cnt0[b];
  for (int level = 0; level < 40; ++level) {
    if (bf.valid && bf.id_cut == 0x7fffffff && bf.klo <= klo && khi <= bf.khi) return sample_scan_buffer(sm, s, bf, crit);
    if (above_c + n_int <= cfg.cap) {
      sample_gather(sm, s, bf, static_cast<int>(above_c + n_int), klo, kKeyMax, 0x7fffffff, 0, 0.0);
      return sample_scan_buffer(sm, s, bf, crit);
    }
    if (n_int <= cfg.cap) {
      sample_gather(sm, s, bf, static_cast<int>(n_int), klo, khi, 0x7fffffff, above_c, above_m);
      return sample_scan_buffer(sm, s, bf, crit);
    }
    if (klo == khi) {
      // One value (ties): walk its tokens in id order.
      const float e_tie = s.e_of(sample_key_value(klo));
      const uint32_t kt = klo;
      auto member = [&](int, float w, float& e) {
        e = e_tie;
        return sample_key(w) == kt;
      };
      const int tiles = (s.n + static_cast<int>(blockDim.x) * kSampleTileVec - 1) / (static_cast<int>(blockDim.x) * kSampleTileVec);
      long long bc = above_c;
      double bm = above_m;
      for (int t = 0; t < tiles; ++t) {
        long long tc, ca;
        double tm, ma;
        const int id = sample_tile_find(sm, s, t, member, crit, bc, bm, tc, tm, &ca, &ma);
        if (id >= 0) {
          r = SampleBoundary{true, kt, id, ca, ma};
          return r;
        }
        bc += tc;
        bm += tm;
      }
      // Rounding: the ties' sum fell short; the boundary is the last tie.
      int mx = -1;
      for (int i = static_cast<int>(threadIdx.x); i < s.n; i += static_cast<int>(blockDim.x)) {
        if (sample_key(s.v[i]) == kt) mx = i;
      }
      mx = block_max_int(mx, sm.iscr);
      r = SampleBoundary{true, kt, mx, bc, bm};
      return r;
    }
    sample_stats<kMass, false>(sm, s, false, klo, khi, sm.cnt, sm.mass, sm.kmin, sm.kmax);
    int nb = -1, last = -1;
    long long c = above_c;
    double m = above_m;
    for (int bb = 0; bb < kSampleBuckets; ++bb) {
      if (sm.cnt[bb] == 0) continue;
      last = bb;
      if (crit.ok(c + sm.cnt[bb], m + sm.mass[bb])) {
        nb = bb;
        break;
      }
      c += sm.cnt[bb];
      m += sm.mass[bb];
    }
    if (nb < 0) {
      // Rounding: the split sums fell short of the parent's; take the last sub-bucket.
      nb = last;
      c -= sm.cnt[nb];
      m -= sm.mass[nb];
    }
    above_c = c;
    above_m = m;
    klo = sm.kmin[nb];
    khi = sm.kmax[nb];
    n_int = sm.cnt[nb];
    td::sync_threads();  // every thread has read the stats before they are rewritten
  }
  return r;
}

/** True when the token (key, id) is at or before the boundary in the order. */
TD_DEVICE bool sample_in_prefix(const SampleBoundary& b, uint32_t key, int32_t id) {
  return !b.found || key > b.key || (key == b.key && id <= b.id);
}

/** The boundary that comes first in the order. */
TD_DEVICE SampleBoundary sample_first(const SampleBoundary& a, const SampleBoundary& b) {
  if (!a.found) return b;
  if (!b.found) return a;
  return (a.key > b.key || (a.key == b.key && a.id <= b.id)) ? a : b;
}

// ---- the kernel -------------------------------------------------------------------------------

#if TD_CUDA
#define TD_SAMPLE_BOUNDS __launch_bounds__(kSampleThreads, 2)
#else
#define TD_SAMPLE_BOUNDS
#endif

TD_GLOBAL void TD_SAMPLE_BOUNDS sample_kernel(SampleArgs a, SampleConfig cfg) {
  TD_DYNAMIC_SHARED(unsigned char, dyn);
  TD_SHARED(double, dscr, 32);
  TD_SHARED(long long, lscr, 32);
  TD_SHARED(int, iscr, 32);
  TD_SHARED(float, fscr, 32);
  TD_SHARED(ArgMax, ascr, 32);
  TD_SHARED(int, cnt, kSampleBuckets);
  TD_SHARED(double, mass, kSampleBuckets);
  TD_SHARED(uint32_t, kmin, kSampleBuckets);
  TD_SHARED(uint32_t, kmax, kSampleBuckets);
  TD_SHARED(int, cnt0, kSampleBuckets);
  TD_SHARED(double, mass0, kSampleBuckets);
  TD_SHARED(uint32_t, kmin0, kSampleBuckets);
  TD_SHARED(uint32_t, kmax0, kSampleBuckets);
  TD_SHARED(int, ivar, 4);
  TD_SHARED(double, dvar, 4);

  const int nt = static_cast<int>(blockDim.x), tid = static_cast<int>(threadIdx.x);
  SampleSmem sm;
  sm.mcol = reinterpret_cast<double*>(dyn);
  sm.buf = reinterpret_cast<uint64_t*>(dyn + sizeof(double) * kSampleBuckets * nt);
  sm.tiles = reinterpret_cast<double*>(dyn + sizeof(double) * (kSampleBuckets * nt + cfg.cap));
  sm.ccol = reinterpret_cast<uint16_t*>(dyn + sizeof(double) * (kSampleBuckets * nt + cfg.cap + cfg.tiles));
  sm.dscr = dscr;
  sm.lscr = lscr;
  sm.iscr = iscr;
  sm.fscr = fscr;
  sm.ascr = ascr;
  sm.cnt = cnt;
  sm.mass = mass;
  sm.kmin = kmin;
  sm.kmax = kmax;
  sm.cnt0 = cnt0;
  sm.mass0 = mass0;
  sm.kmin0 = kmin0;
  sm.kmax0 = kmax0;
  sm.ivar = ivar;
  sm.dvar = dvar;

  const int row_index = static_cast<int>(blockIdx.x);
  const SampleRowDesc row = a.rows[row_index];
  const int vocab = a.vocab;
  const float* raw = a.logits + static_cast<int64_t>(row.logit_row) * a.logit_stride;
  const uint32_t* mask = row.mask_offset >= 0 ? a.masks + row.mask_offset : nullptr;
  const bool rep_on = row.repetition != 1.0f;
  const bool pf_on = row.presence != 0.0f || row.frequency != 0.0f;
  const bool penalties = row.penalty_len > 0 && (rep_on || pf_on);
  const bool prepare = penalties || row.bias_len > 0 || mask != nullptr;

  // ---- prepare: mask, penalties, bias into the row's work scratch.
  const float* w = raw;
  if (prepare) {
    float* work = a.work + static_cast<int64_t>(row_index) * vocab;
    for (int i = tid; i < vocab; i += nt) {
      const bool allowed = mask == nullptr || ((mask[i >> 5] >> (i & 31)) & 1u) != 0;
      work[i] = allowed ? raw[i] : -INFINITY;
    }
    td::sync_threads();
    if (penalties) {
      for (int j = tid; j < row.penalty_len; j += nt) {
        const PenaltyEntry pe = a.penalties[row.penalty_offset + j];
        const int tok = pe.token;
        if (tok < 0 || tok >= vocab) continue;
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
          if (tok < 0 || tok >= vocab || !(fabsf(v) <= 3.402823466e38f)) continue;  // finite values only
          if (mask != nullptr && ((mask[tok >> 5] >> (tok & 31)) & 1u) == 0) continue;
          work[tok] += v;
        }
      }
      td::sync_threads();
    }
    w = work;
  }

  // ---- max / greedy.
  ArgMax best{-INFINITY, 0x7fffffff};
  for (int i = tid; i < vocab; i += nt) best = better(best, ArgMax{w[i], i});
  best = block_argmax(best, ascr);
  const float m = best.value;
  int token = best.index < vocab ? best.index : 0;

  SampleBuf bf{false, 0, 0u, 0u, 0x7fffffff, 0, 0.0};
  if (row.temperature > 0.0f) {
    if (m == -INFINITY) {
      token = 0;  // every token masked out
    } else {
      const SampleSrc src{w, vocab, m, 1.0f / row.temperature};
      const bool topk_on = row.top_k > 0 && row.top_k < vocab;
      const bool topp_on = row.top_p < 1.0f;
      const bool minp_on = row.min_p > 0.0f;
      const float min_p = fminf(row.min_p, 1.0f);
      SampleBoundary prefix{false, 0u, 0, 0, 0.0};
      bool have_l0 = false;
      if (topk_on || topp_on || minp_on) {
        sample_stats<true, false>(sm, src, true, 0u, kKeyMax, cnt0, mass0, kmin0, kmax0);
        have_l0 = true;
        double total = 0.0;
        long long positive = 0;
        for (int b = 0; b < kSampleBuckets; ++b) {
          total += mass0[b];
          if (b < kSampleBuckets - 1) positive += cnt0[b];
        }
        // A top-k reaching into the tokens without mass keeps every token with mass.
        if (topk_on && positive > row.top_k) {
          SampleCriterion ck{kCritCount, row.top_k, 0.0};
          prefix = sample_search<true>(sm, src, cfg, bf, ck);
          total = prefix.mass;
        }
        if (topp_on) {
          SampleCriterion cp{kCritMassGe, 0, static_cast<double>(row.top_p) * total};
          const SampleBoundary pb = sample_search<true>(sm, src, cfg, bf, cp);
          prefix = sample_first(prefix, pb);
        }
      }
      // Kept: in the prefix, e >= min_p, and e > 0 (tokens without mass are never drawn).
      auto kept = [&](int i, float wv, float& e) {
        e = src.e_of(wv);
        if (!(e > 0.0f) || (minp_on && !(e >= min_p))) return false;
        return sample_in_prefix(prefix, sample_key(wv), i);
      };
      // Does the kept set fit a complete prefix of level-0 buckets in the buffer?
      int need = -1;
      long long need_cnt = 0;
      if (have_l0) {
        int b_need = kSampleBuckets - 2;
        for (int b = 0; b < kSampleBuckets - 1; ++b) {
          if (cnt0[b] == 0) continue;
          const bool has_prefix_end = prefix.found && kmin0[b] <= prefix.key && prefix.key <= kmax0[b];
          const bool has_minp_end = minp_on && !(src.e_of(sample_key_value(kmin0[b])) >= min_p);
          if (has_prefix_end || has_minp_end) {
            b_need = b;
            break;
          }
        }
        for (int b = 0; b <= b_need; ++b) need_cnt += cnt0[b];
        need = b_need;
        while (need >= 0 && cnt0[need] == 0) --need;
      }
      const double u = sample_uniform(row);
      if (need >= 0 && need_cnt <= cfg.cap) {
        const uint32_t lo = kmin0[need];
        if (!(bf.complete() && bf.klo <= lo)) sample_gather(sm, src, bf, static_cast<int>(need_cnt), lo, kKeyMax, 0x7fffffff, 0, 0.0);
        // Re-sort the kept entries by id (the rest to the end), then scan them in id order.
        const int p = sample_pow2(bf.n);
        int nk = 0;
        for (int j = tid; j < p; j += nt) {
          uint64_t ent = ~0ull;
          if (j < bf.n) {
            const uint64_t e0 = sm.buf[j];
            const uint32_t key = entry_key(e0);
            const int32_t id = entry_id(e0);
            float e;
            if (kept(id, sample_key_value(key), e)) {
              ent = (static_cast<uint64_t>(static_cast<uint32_t>(id)) << 32) | key;
              ++nk;
            }
          }
          sm.buf[j] = ent;
        }
        nk = block_sum(nk, iscr);
        td::sync_threads();
        sample_bitonic_sort(sm.buf, p);
        bf.valid = false;
        const int per = (nk + nt - 1) / nt;
        const int lo_j = td::imin(nk, tid * per), hi_j = td::imin(nk, lo_j + per);
        double local = 0.0;
        for (int j = lo_j; j < hi_j; ++j) local += static_cast<double>(src.e_of(sample_key_value(static_cast<uint32_t>(sm.buf[j]))));
        double total;
        const double base = block_exclusive_scan(local, dscr, total);
        const double target = u * total;
        int found = 0x7fffffff;
        double run = 0.0;
        for (int j = lo_j; j < hi_j; ++j) {
          run += static_cast<double>(src.e_of(sample_key_value(static_cast<uint32_t>(sm.buf[j]))));
          if (target < base + run) {
            found = j;
            break;
          }
        }
        const int first = block_min_int(found, iscr);
        const int j = first != 0x7fffffff ? first : nk - 1;
        token = j >= 0 ? static_cast<int>(sm.buf[j] >> 32) : 0;
        td::sync_threads();
      } else {
        // Tiled draw: tile sums in id order, then the tile holding target.
        const int tiles = cfg.tiles;
        double total = 0.0;
        int last = -1;
        for (int t = 0; t < tiles; ++t) {
          int c;
          double mt;
          sample_tile_sums(src, t, kept, c, mt);
          double tot;
          (void)block_exclusive_scan(mt, dscr, tot);
          if (tid == 0) sm.tiles[t] = tot;
          total += tot;
          if (c > 0) {
            const int first = (t * nt + tid) * kSampleTileVec;
            for (int j = kSampleTileVec - 1; j >= 0; --j) {
              const int i = first + j;
              float e;
              if (i < vocab && kept(i, w[i], e)) {
                last = i;
                break;
              }
            }
          }
        }
        last = block_max_int(last, iscr);
        const double target = u * total;
        SampleCriterion cd{kCritMassGt, 0, target};
        double base = 0.0;
        int chosen = -1;
        for (int t = 0; t < tiles && chosen < 0; ++t) {
          const double tt = sm.tiles[t];
          if (target < base + tt) {
            long long tc;
            double tm;
            chosen = sample_tile_find(sm, src, t, kept, cd, 0, base, tc, tm, nullptr, nullptr);
          }
          base += tt;
        }
        token = chosen >= 0 ? chosen : (last >= 0 ? last : 0);
        td::sync_threads();
      }
    }
  }

  // ---- logprobs of the raw logits.
  const int64_t top_base = static_cast<int64_t>(row_index) * a.top_stride;
  int top_n = 0;
  if (row.num_top >= 0) {
    float m_raw = m;
    if (prepare) {
      float mx = -INFINITY;
      for (int i = tid; i < vocab; i += nt) mx = fmaxf(mx, raw[i]);
      m_raw = block_max(mx, fscr);
    }
    const SampleSrc rs{raw, vocab, m_raw, 1.0f};
    top_n = td::imin(td::imin(row.num_top, vocab), td::imin(a.top_stride, cfg.cap));
    double z;
    if (top_n > 0) {
      z = sample_stats<false, true>(sm, rs, true, 0u, kKeyMax, cnt0, mass0, kmin0, kmax0);
      bf.valid = false;
      SampleCriterion cn{kCritCount, top_n, 0.0};
      const SampleBoundary nb = sample_search<false>(sm, rs, cfg, bf, cn);
      if (!(bf.complete() && bf.klo <= nb.key)) sample_gather(sm, rs, bf, top_n, nb.key, kKeyMax, nb.id, 0, 0.0);
    } else {
      double zl = 0.0;
      for (int i = tid; i < vocab; i += nt) zl += exp(static_cast<double>(raw[i] - m_raw));
      z = block_sum(zl, dscr);
    }
    const float log_z = m_raw + static_cast<float>(log(z));
    if (tid == 0) a.out_logprobs[row_index] = raw[token] - log_z;
    for (int k = tid; k < top_n; k += nt) {
      const uint64_t e = sm.buf[k];
      const int32_t id = entry_id(e);
      a.out_top_ids[top_base + k] = id;
      a.out_top_logprobs[top_base + k] = raw[id] - log_z;
    }
  } else if (tid == 0) {
    a.out_logprobs[row_index] = NAN;
  }
  for (int k = top_n + tid; k < a.top_stride; k += nt) {
    a.out_top_ids[top_base + k] = -1;
    a.out_top_logprobs[top_base + k] = NAN;
  }
  if (tid == 0) a.out_tokens[row_index] = token;
}

#undef TD_SAMPLE_BOUNDS

/** Dynamic shared memory of one sampling block, in bytes. */
inline size_t sample_shared_bytes(unsigned threads, int cap, int tiles) {
  return sizeof(double) * (static_cast<size_t>(kSampleBuckets) * threads + static_cast<size_t>(cap) + static_cast<size_t>(tiles)) +
         sizeof(uint16_t) * static_cast<size_t>(kSampleBuckets) * threads;
}

inline void launch_sample(const SampleArgs& a, void* stream) {
  if (a.num_rows <= 0) return;
  const unsigned threads = kSampleThreads;
  // Per-thread bucket counts are 16-bit: at most 65535 tokens per thread (33M with 512 threads).
  if (a.vocab <= 0 || static_cast<long long>(a.vocab) > 65535LL * threads) throw std::invalid_argument("sample: vocab out of range");
  SampleConfig cfg;
  cfg.cap = kSampleCap;
  cfg.tiles = static_cast<int>(td::ceil_div(a.vocab, static_cast<long long>(threads) * kSampleTileVec));
  td::launch(sample_kernel, {static_cast<unsigned>(a.num_rows)}, threads, sample_shared_bytes(threads, cfg.cap, cfg.tiles), stream, a, cfg);
}

}  // namespace tandem::gpu::TD_NS
