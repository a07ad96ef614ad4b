// How many KV blocks the GPU backend's pool gets. Pure: the device's memory comes in as
// numbers, so the arithmetic is checked without a device (tests/engine_test.cc).
//   --num-gpu-blocks            that many blocks;
//   --kv-cache-memory (bytes)   that budget (the SIMT device: 256 MiB without one);
//   otherwise                   util x total memory, less what is in use after the weights and
//                               activations loaded, less a reserve for graphs, cuBLASLt and the
//                               driver's own growth (util: --gpu-memory-utilization, 0.9).
#pragma once

#include <cstdint>
#include <string>

#include "../core/backend.h"

namespace tandem::gpu {

inline constexpr int64_t kSimtDefaultKvBytes = int64_t{256} << 20;
inline constexpr double kDefaultGpuMemoryUtilization = 0.9;
inline constexpr int64_t kKvReserveBytes = int64_t{256} << 20;

/** The device as sizing sees it, measured after everything but the pool was allocated. */
struct DeviceMemory {
  std::string kind;  // "cuda" | "simt"
  int64_t total_bytes = 0;
  int64_t free_bytes = 0;
};

/** Blocks of `bytes_per_block` for the pool; refuses (naming the flag to change) when none fits. */
int64_t kv_pool_blocks(const BackendOptions& o, int64_t bytes_per_block, const DeviceMemory& m);

}  // namespace tandem::gpu
