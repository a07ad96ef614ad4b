#include "kv_pool_sizing.h"

#include "device.h"

#include "../core/error.h"

namespace tandem::gpu {

int64_t kv_pool_blocks(const BackendOptions& o, int64_t per_block, const DeviceMemory& m) {
  int64_t blocks = 0;
  if (o.num_blocks > 0) {
    blocks = o.num_blocks;
  } else if (o.memory_budget_bytes > 0 || m.kind == "simt") {
    blocks = (o.memory_budget_bytes > 0 ? o.memory_budget_bytes : kSimtDefaultKvBytes) / per_block;
  } else {
    const double util = o.gpu_memory_utilization > 0 ? o.gpu_memory_utilization : kDefaultGpuMemoryUtilization;
    if (util > 1.0) throw NativeError(ErrorCode::kInvalidArgument, "gpuMemoryUtilization must be in (0, 1]");
    const int64_t used = m.total_bytes - m.free_bytes;  // weights, activations, other processes
    const int64_t budget = static_cast<int64_t>(util * static_cast<double>(m.total_bytes)) - used - kKvReserveBytes;
    blocks = budget / per_block;
    if (blocks < 1) {
      throw NativeError(ErrorCode::kResourceExhausted,
                        "device '" + m.kind + "': " + mib(used) + " of " + mib(m.total_bytes) +
                            " is in use after loading the weights and activations; a GPU memory utilization of " +
                            std::to_string(util) + " leaves no room for a KV block of " + std::to_string(per_block) +
                            " bytes (raise --gpu-memory-utilization, or lower --max-num-batched-tokens)");
    }
  }
  if (blocks < 1) {
    throw NativeError(ErrorCode::kInvalidArgument, "the KV pool holds no block (one block is " + std::to_string(per_block) + " bytes)");
  }
  return blocks;
}

}  // namespace tandem::gpu
