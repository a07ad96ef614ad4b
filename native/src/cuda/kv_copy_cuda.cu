// The CUDA target of the KV block copy (kernels/kv_copy.cuh), its own nvcc unit so changing it
// does not recompile the forward's kernels.
#include "kernel_lang.h"
#include "kernels/kv_copy.cuh"

namespace tandem::gpu {

std::unique_ptr<KvCopyApi> make_cuda_kv_copy() { return std::make_unique<TD_NS::TargetKvCopy>(); }

}  // namespace tandem::gpu
