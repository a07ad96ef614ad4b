// How the sampler finds a boundary of the order (w desc, id asc) without sorting the
// vocabulary (sampling.cuh describes the whole kernel): per-bucket statistics in one pass,
// gathering the boundary bucket into a shared buffer (bitonic-sorted and scanned), splitting
// a bucket that does not fit, tiled sums and finds for draws over large kept sets.
#pragma once

#include "block_scan.cuh"
#include "sampling_math.cuh"

namespace tandem::gpu::TD_NS {

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

}  // namespace tandem::gpu::TD_NS
