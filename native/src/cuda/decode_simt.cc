// The SIMT target of the fused decode kernels (decode_api.h), and the sizes the backend
// allocates for them (the plan is the same on both targets).
#include "kernel_lang.h"
#include "decode_api.h"
#include "kernels/decode_attention.cuh"
#include "kernels/decode_rows.cuh"
#include "kernels/sampling_fast.cuh"

namespace tandem::gpu {
namespace TD_NS {
#include "decode_kernels.inc"
}  // namespace TD_NS

std::unique_ptr<DecodeKernelApi> make_simt_decode_kernels() { return std::make_unique<TD_NS::TargetDecodeKernels>(); }

int64_t decode_gemv_workspace_floats(int m, int n, int k) {
  // The plan splits as the unfused GEMM does with the backend's workspace (kGemmWorkspaceFloats).
  GemmArgs g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.workspace = reinterpret_cast<float*>(16);  // only tested for null
  g.workspace_floats = kGemmWorkspaceFloats;
  TD_NS::GemmRowsPlan p;
  if (!TD_NS::gemm_rows_plan(g, 0, p)) return 0;
  return static_cast<int64_t>(p.splits) * m * n;
}

int64_t decode_gemv_counters(int n) { return (n + TD_NS::kDecodeTileRows - 1) / TD_NS::kDecodeTileRows + 2; }

}  // namespace tandem::gpu
