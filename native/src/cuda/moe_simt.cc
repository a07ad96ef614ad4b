// The SIMT target of the MoE kernels (kernels/moe_route.cuh, kernels/moe_gemm.cuh).
#include "kernel_lang.h"
#include "kernels/moe_kernels.cuh"

namespace tandem::gpu {

std::unique_ptr<MoeKernelApi> make_simt_moe_kernels() { return std::make_unique<TD_NS::TargetMoeKernels>(); }

}  // namespace tandem::gpu
