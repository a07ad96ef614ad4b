// The CUDA target of the fused decode kernels (decode_api.h), its own nvcc unit so changing
// them does not recompile the forward's other kernels.
#include "kernel_lang.h"
#include "decode_api.h"
#include "kernels/decode_attention.cuh"
#include "kernels/decode_rows.cuh"
#include "kernels/sampling_fast.cuh"

namespace tandem::gpu {
namespace TD_NS {
#include "decode_kernels.inc"
}  // namespace TD_NS

std::unique_ptr<DecodeKernelApi> make_cuda_decode_kernels() { return std::make_unique<TD_NS::TargetDecodeKernels>(); }

}  // namespace tandem::gpu
