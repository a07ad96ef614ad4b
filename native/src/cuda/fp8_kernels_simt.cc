// The SIMT target of the FP8 kernels (fp8_kernels.h).
#include "kernel_lang.h"
#include "kernels/fp8_quant.cuh"

namespace tandem::gpu {

std::unique_ptr<Fp8KernelApi> make_simt_fp8_kernels() { return std::make_unique<TD_NS::TargetFp8Kernels>(); }

}  // namespace tandem::gpu
