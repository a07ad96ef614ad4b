// Kernel checks of the GPU backend: every kernel of src/cuda/kernels against the CPU backend's
// kernels (or the CPU sampler), through KernelApi. On the SIMT target in CI; on a GPU with
// TANDEM_TEST_DEVICE=cuda (scripts/device/cuda-check.sh), where the same checks cover what
// the harness cannot (the tensor-core PTX, real concurrency).
//
//   tandem_gpu_kernel_test            prints one summary line per suite, then "N checks, M failures"
#include <cstdio>
#include <exception>

#include "check.h"
#include "gpu/attention_checks.h"
#include "gpu/elementwise_checks.h"
#include "gpu/gemm_checks.h"
#include "gpu/kv_copy_checks.h"
#include "gpu/moe_checks.h"
#include "gpu/sampling_checks.h"

int main() {
  using namespace tandem_test::gpu;
  try {
    Gpu g = Gpu::open();
    std::printf("device: %s (%s)\n", g.device->info().name.c_str(), g.name.c_str());
    test_elementwise(g);
    test_attention(g);
    test_gemm(g);
    test_sampling(g);
    test_kv_copy(g);
    test_moe(g);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL: uncaught exception: %s\n", e.what());
    ++tandem_test::g_failures;
  }
  std::printf("%d checks, %d failures\n", tandem_test::g_checks, tandem_test::g_failures);
  return tandem_test::g_failures == 0 ? 0 : 1;
}
