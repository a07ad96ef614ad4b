// Sampling checks (filled in with the full sampler).
#pragma once

#include "gpu_test_util.h"

namespace tandem_test::gpu {

inline void test_sampling(Gpu&) {}

}  // namespace tandem_test::gpu
