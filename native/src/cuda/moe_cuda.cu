// The CUDA target of the MoE kernels (kernels/moe_route.cuh, kernels/moe_gemm.cuh), its own nvcc
// unit so changing them does not recompile the forward's kernels.
#include "kernel_lang.h"
#include "kernels/moe_kernels.cuh"

namespace tandem::gpu {

std::unique_ptr<MoeKernelApi> make_cuda_moe_kernels() { return std::make_unique<TD_NS::TargetMoeKernels>(); }

}  // namespace tandem::gpu
