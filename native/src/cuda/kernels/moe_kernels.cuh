// The MoeKernelApi of one target (moe_api.h): routing and grouping (moe_route.cuh), the grouped
// GEMMs and the combine (moe_gemm.cuh).
#pragma once

#include "moe_gemm.cuh"
#include "moe_route.cuh"

namespace tandem::gpu::TD_NS {

class TargetMoeKernels final : public MoeKernelApi {
 public:
  const char* target() const override {
#if TD_CUDA
    return "cuda";
#else
    return "simt";
#endif
  }
  void route(const MoeRouteArgs& a, void* stream) override { launch_moe_route(a, stream); }
  void group(const MoeGroupArgs& a, void* stream) override { launch_moe_group(a, stream); }
  void gate_up(const MoeGemmArgs& a, void* stream) override { launch_moe_gemm(a, false, stream); }
  void down(const MoeGemmArgs& a, void* stream) override { launch_moe_gemm(a, true, stream); }
  void combine(const MoeCombineArgs& a, void* stream) override { launch_moe_combine(a, stream); }
};

}  // namespace tandem::gpu::TD_NS
