// The GPU backend's KV pool sizing (src/cuda/kv_pool_sizing.h), worked by hand. A block of
// 1 MiB on an 80 GiB device with 10 GiB in use at utilization 0.9:
//   0.9 x 80 GiB = 73,728 MiB; minus 10,240 MiB in use; minus the 256 MiB reserve = 63,232 blocks.
#pragma once

#include <cstdint>
#include <string>

#include "../src/core/error.h"
#include "../src/cuda/device.h"
#include "../src/cuda/kv_pool_sizing.h"
#include "check.h"

namespace tandem_test {

inline void test_kv_pool_sizing() {
  using tandem::BackendOptions;
  using tandem::gpu::DeviceMemory;
  using tandem::gpu::kv_pool_blocks;
  constexpr int64_t kMiB = int64_t{1} << 20, kGiB = int64_t{1} << 30;
  DeviceMemory cuda{"cuda", 80 * kGiB, 70 * kGiB};
  BackendOptions o;
  CHECK(kv_pool_blocks(o, kMiB, cuda) == 63232, "utilization 0.9 (default): %lld", static_cast<long long>(kv_pool_blocks(o, kMiB, cuda)));
  o.gpu_memory_utilization = 0.5;  // 40,960 - 10,240 - 256
  CHECK(kv_pool_blocks(o, kMiB, cuda) == 30464, "utilization 0.5: %lld", static_cast<long long>(kv_pool_blocks(o, kMiB, cuda)));
  o.memory_budget_bytes = 100 * kMiB;  // a byte budget wins over utilization
  CHECK(kv_pool_blocks(o, kMiB, cuda) == 100, "budget");
  o.num_blocks = 7;  // and a block count over both
  CHECK(kv_pool_blocks(o, kMiB, cuda) == 7, "num_blocks");
  CHECK(kv_pool_blocks(BackendOptions{}, kMiB, DeviceMemory{"simt", 4 * kGiB, 4 * kGiB}) == 256, "SIMT default: 256 MiB");
  // Sizes in messages: a tiny model's scratch reads in KiB, not "0 MiB".
  CHECK(tandem::gpu::mib(3 * kGiB) == "3072 MiB" && tandem::gpu::mib(300 * 1024) == "300 KiB" && tandem::gpu::mib(96) == "96 bytes",
        "mib: %s, %s, %s", tandem::gpu::mib(3 * kGiB).c_str(), tandem::gpu::mib(300 * 1024).c_str(), tandem::gpu::mib(96).c_str());
  auto code_of = [&](const BackendOptions& opts, const DeviceMemory& m) -> std::string {
    try {
      kv_pool_blocks(opts, kMiB, m);
      return "none";
    } catch (const tandem::NativeError& e) {
      return e.code_name();
    }
  };
  BackendOptions full;
  full.gpu_memory_utilization = 0.1;  // 8,192 MiB allowed, 10,240 in use
  CHECK(code_of(full, cuda) == "resource_exhausted", "no room: %s", code_of(full, cuda).c_str());
  BackendOptions over;
  over.gpu_memory_utilization = 1.5;
  CHECK(code_of(over, cuda) == "invalid_argument", "utilization > 1: %s", code_of(over, cuda).c_str());
  BackendOptions tiny;
  tiny.memory_budget_bytes = kMiB / 2;
  CHECK(code_of(tiny, cuda) == "invalid_argument", "a budget under one block: %s", code_of(tiny, cuda).c_str());
}

}  // namespace tandem_test
