// Warp and block reductions with a fixed combination order (butterfly within a warp, then
// warp results in index order), so a result does not depend on scheduling: the same inputs
// give the same bits on every run and on both targets.
#pragma once

#include "../kernel_lang.h"

namespace tandem::gpu::TD_NS {

template <typename T>
TD_DEVICE T warp_sum(T v) {
  for (int m = 16; m > 0; m >>= 1) v += td::shfl_xor(v, m);
  return v;
}

TD_DEVICE float warp_max(float v) {
  for (int m = 16; m > 0; m >>= 1) v = fmaxf(v, td::shfl_xor(v, m));
  return v;
}

/** Sum over the block; every thread gets the result. `scratch` holds blockDim/32 values. */
template <typename T>
TD_DEVICE T block_sum(T v, T* scratch) {
  const unsigned lane = td::lane_id(), warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  td::sync_threads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  td::sync_threads();
  T total = scratch[0];
  for (unsigned w = 1; w < warps; ++w) total += scratch[w];
  return total;
}

TD_DEVICE float block_max(float v, float* scratch) {
  const unsigned lane = td::lane_id(), warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  td::sync_threads();
  if (lane == 0) scratch[warp] = v;
  td::sync_threads();
  float m = scratch[0];
  for (unsigned w = 1; w < warps; ++w) m = fmaxf(m, scratch[w]);
  return m;
}

/** (value, index) arg max with ties to the lower index; every thread gets the winner. */
struct ArgMax {
  float value;
  int32_t index;
};

TD_DEVICE ArgMax better(ArgMax a, ArgMax b) {
  // NaN never wins; equal values go to the lower index.
  if (b.value > a.value || (b.value == a.value && b.index < a.index) || (a.value != a.value && b.value == b.value)) return b;
  return a;
}

TD_DEVICE ArgMax warp_argmax(ArgMax v) {
  for (int m = 16; m > 0; m >>= 1) {
    ArgMax o{td::shfl_xor(v.value, m), td::shfl_xor(v.index, m)};
    v = better(v, o);
  }
  return v;
}

TD_DEVICE ArgMax block_argmax(ArgMax v, ArgMax* scratch) {
  const unsigned lane = td::lane_id(), warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_argmax(v);
  td::sync_threads();
  if (lane == 0) scratch[warp] = v;
  td::sync_threads();
  ArgMax best = scratch[0];
  for (unsigned w = 1; w < warps; ++w) best = better(best, scratch[w]);
  return best;
}

}  // namespace tandem::gpu::TD_NS
