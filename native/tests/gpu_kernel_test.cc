// Kernel checks of the GPU backend: every kernel of src/cuda/kernels against the CPU backend's
// kernels (or the CPU sampler), through KernelApi. On the SIMT target in CI; on a GPU with
// TANDEM_TEST_DEVICE=cuda (scripts/device/cuda-check.sh), where the same checks cover what
// the harness cannot (the tensor-core PTX, real concurrency).
//
//   tandem_gpu_kernel_test            prints one summary line per suite, then "N checks, M failures"
//   tandem_gpu_kernel_test --fp8      the FP8 kernels only (scripts/device/fp8-check.sh)
//   TANDEM_TEST_SUITES=fused,kv_copy  runs only these suites (harness, elementwise, attention, gemm, fused,
//                                     sampling, sampling_fast, kv_copy, moe, fp8; scripts/device/sanitizer-check.sh)
//   TANDEM_SIMT_ORDER=forward|reverse|shuffle[:SEED]  the order of blocks and threads on the harness
//                                     (default shuffle:1; simt/harness.h)
//   TANDEM_TEST_QUICK=1               fewer cases where a suite offers it (under compute-sanitizer)
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "check.h"
#include "gpu/attention_checks.h"
#include "gpu/decode_checks.h"
#include "gpu/elementwise_checks.h"
#include "gpu/fp8_checks.h"
#include "gpu/gemm_checks.h"
#include "gpu/harness_checks.h"
#include "gpu/kv_copy_checks.h"
#include "gpu/moe_checks.h"
#include "gpu/sampling_checks.h"
#include "gpu/sampling_fast_checks.h"

namespace {

bool wanted(const char* suite) {
  const char* env = std::getenv("TANDEM_TEST_SUITES");
  if (env == nullptr || *env == 0) return true;
  const std::string list = std::string(",") + env + ",";
  return list.find(std::string(",") + suite + ",") != std::string::npos;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tandem_test::gpu;
  // --fp8: the FP8 kernels only (scripts/device/fp8-check.sh): GEMV, quantization, attention and
  // the KV write over an e4m3 pool, KV copies with e4m3 sides.
  const bool fp8_only = argc == 2 && std::string(argv[1]) == "--fp8";
  const char* quick_env = std::getenv("TANDEM_TEST_QUICK");
  const bool quick = quick_env != nullptr && std::string(quick_env) == "1";
  // Line by line, so a crash (a planted 32-bit KV offset faults on a far pool) leaves the suites before it on record.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    Gpu g = Gpu::open();
    if (g.name == "simt") {
      std::printf("device: %s (simt, %s)\n", g.device->info().name.c_str(), tandem::simt::describe(tandem::simt::schedule()).c_str());
    } else {
      std::printf("device: %s (%s)\n", g.device->info().name.c_str(), g.name.c_str());
    }
    if (fp8_only) {
      check_qkv_rope(g, true, false, true, false, true);  // the KV write into an e4m3 pool
      check_qkv_rope(g, false, true, false, false, true);
      test_kv_copy(g);
      test_fp8_kernels(g);
      std::printf("%d checks, %d failures\n", tandem_test::g_checks, tandem_test::g_failures);
      return tandem_test::g_failures == 0 ? 0 : 1;
    }
    if (g.name == "simt" && wanted("harness")) test_harness(*g.device);
    if (wanted("elementwise")) test_elementwise(g);
    if (wanted("attention")) test_attention(g);
    if (wanted("gemm")) test_gemm(g);
    if (wanted("fused")) test_decode_fused(g, quick);
    if (wanted("sampling")) test_sampling(g);
    if (wanted("sampling_fast")) test_sampling_fast(g);
    if (wanted("kv_copy")) test_kv_copy(g);
    if (wanted("moe")) test_moe(g);
    if (wanted("fp8")) test_fp8_kernels(g);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL: uncaught exception: %s\n", e.what());
    ++tandem_test::g_failures;
  }
  std::printf("%d checks, %d failures\n", tandem_test::g_checks, tandem_test::g_failures);
  return tandem_test::g_failures == 0 ? 0 : 1;
}
