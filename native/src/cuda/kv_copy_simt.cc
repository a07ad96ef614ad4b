// The SIMT target of the KV block copy (kernels/kv_copy.cuh).
#include "kernel_lang.h"
#include "kernels/kv_copy.cuh"

namespace tandem::gpu {

std::unique_ptr<KvCopyApi> make_simt_kv_copy() { return std::make_unique<TD_NS::TargetKvCopy>(); }

}  // namespace tandem::gpu
