// Stands in for cuda_device.cc in a build without nvcc: the backend is reported unavailable
// with the reason, and `--device cuda` fails with it.
#include "../core/error.h"
#include "device.h"
#include "decode_api.h"
#include "kernel_api.h"
#include "fp8_kernels.h"
#include "kv_copy.h"
#include "moe_api.h"

namespace tandem::gpu {

namespace {
const char* kReason = "this build has no CUDA backend (nvcc was not found when the native addon was built; "
                      "install the CUDA toolkit and run `npm run build:native`)";
}

bool cuda_built() { return false; }

CudaStatus cuda_status() {
  CudaStatus s;
  s.reason = kReason;
  return s;
}

std::unique_ptr<Device> make_cuda_device(int ordinal) {
  throw NativeError(ErrorCode::kUnavailable, "device 'cuda:" + std::to_string(ordinal) + "': " + kReason);
}

std::unique_ptr<KvCopyApi> make_cuda_kv_copy() {
  throw NativeError(ErrorCode::kUnavailable, std::string("the CUDA KV copy: ") + kReason);
}

std::unique_ptr<KernelApi> make_cuda_kernels() {
  throw NativeError(ErrorCode::kUnavailable, std::string("the CUDA kernels: ") + kReason);
}

std::unique_ptr<DecodeKernelApi> make_cuda_decode_kernels() {
  throw NativeError(ErrorCode::kUnavailable, std::string("the CUDA decode kernels: ") + kReason);
}

std::unique_ptr<MoeKernelApi> make_cuda_moe_kernels() {
  throw NativeError(ErrorCode::kUnavailable, std::string("the CUDA MoE kernels: ") + kReason);
}

std::unique_ptr<Fp8KernelApi> make_cuda_fp8_kernels() {
  throw NativeError(ErrorCode::kUnavailable, std::string("the CUDA FP8 kernels: ") + kReason);
}

}  // namespace tandem::gpu
