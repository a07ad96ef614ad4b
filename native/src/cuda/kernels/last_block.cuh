// The last-arriving-block pattern: blocks of a group each finish their share, publish it, and
// count themselves in on a global counter; the block that arrives last sees every other
// block's results and finishes the group's work (a reduction, an epilogue) in the same launch.
// No block waits for another, so it needs no co-residency and runs on the SIMT harness, which
// runs blocks one after another (there the last block in order is the last to arrive).
// Counters are left at zero by the last block, so a CUDA graph replays with them ready.
#pragma once

#include "../kernel_lang.h"

namespace tandem::gpu::TD_NS {

/** Makes this thread's global writes visible to the whole device before what follows. */
TD_DEVICE void fence_device() {
#if TD_CUDA
  __threadfence();
#endif
}

/** A float another block wrote in this launch: read from L2, past this SM's L1. */
TD_DEVICE float load_cg(const float* p) {
#if TD_CUDA
  return __ldcg(p);
#else
  return *p;
#endif
}

/** Any value another block wrote in this launch (volatile: not served from a stale L1 line). */
template <typename T>
TD_DEVICE T load_volatile(const T* p) {
  return *reinterpret_cast<const volatile T*>(p);
}

struct CgLoad {
  TD_DEVICE float operator()(const float* p) const { return load_cg(p); }
};

/**
 * Every thread of the block calls it after its global writes for the group: true in every
 * thread of the one block that arrived last among `group_size`. That block's counter is reset.
 * `flag` is one int of shared memory.
 */
TD_DEVICE bool last_block_arrive(int* counter, int group_size, int* flag) {
  fence_device();      // each thread's writes reach the device before the block counts in
  td::sync_threads();
  if (threadIdx.x == 0) {
    const int before = td::atomic_add(counter, 1);
    const bool last = before == group_size - 1;
    if (last) *counter = 0;
    *flag = last ? 1 : 0;
  }
  td::sync_threads();
  const bool last = *flag != 0;
  if (last) fence_device();  // acquire: the other blocks' writes are visible from here on
  return last;
}

}  // namespace tandem::gpu::TD_NS
