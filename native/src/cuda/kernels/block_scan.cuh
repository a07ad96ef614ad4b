// Block-wide primitives beyond reductions (reduce.cuh): integer min/max, an exclusive scan in
// thread order, and a bitonic sort of a power-of-two shared buffer. Fixed orders, so results
// do not depend on scheduling.
#pragma once

#include "../kernel_lang.h"
#include "reduce.cuh"

namespace tandem::gpu::TD_NS {

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

}  // namespace tandem::gpu::TD_NS
