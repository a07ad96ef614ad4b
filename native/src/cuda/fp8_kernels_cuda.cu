// The CUDA target of the FP8 kernels (fp8_kernels.h), its own nvcc unit so changing them does not
// recompile the forward's kernels.
#include "kernel_lang.h"
#include "kernels/fp8_quant.cuh"

namespace tandem::gpu {

std::unique_ptr<Fp8KernelApi> make_cuda_fp8_kernels() { return std::make_unique<TD_NS::TargetFp8Kernels>(); }

}  // namespace tandem::gpu
