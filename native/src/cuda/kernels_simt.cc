// The SIMT target: kernels/*.cuh compiled by the host compiler and run by the SIMT harness.
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

std::unique_ptr<KernelApi> make_simt_kernels() { return std::make_unique<TD_NS::TargetKernels>(); }

}  // namespace tandem::gpu
