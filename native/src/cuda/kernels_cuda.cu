// The CUDA target: kernels/*.cuh compiled by nvcc (sm_80 and sm_90a machine code, compute_80 PTX).
#include "kernel_lang.h"
#include "kernel_api.h"
#include "kernels/attention.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/gemm.cuh"
#include "kernels/sampling.cuh"

namespace tandem::gpu {
namespace TD_NS {
#include "kernels/target_kernels.inc"
}  // namespace TD_NS

std::unique_ptr<KernelApi> make_cuda_kernels() { return std::make_unique<TD_NS::TargetKernels>(); }

}  // namespace tandem::gpu
