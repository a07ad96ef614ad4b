// The MoeKernelApi of one target (moe_api.h): routing and grouping (moe_route.cuh), the grouped
// GEMMs on CUDA cores and the combine (moe_gemm.cuh), the grouped GEMMs on tensor cores
// (moe_gemm_mma.cuh) when the arguments ask for them (mma_rows > 0).
#pragma once

#include <stdexcept>

#include "moe_gemm.cuh"
#include "moe_gemm_mma.cuh"
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
  void gate_up(const MoeGemmArgs& a, void* stream) override {
    if (a.mma_rows > 0) {
      launch_moe_gemm_mma(a, false, stream);
    } else {
      launch_moe_gemm(a, false, stream);
    }
  }
  void down(const MoeGemmArgs& a, void* stream) override {
    if (a.mma_rows > 0) {
      launch_moe_gemm_mma(a, true, stream);
    } else {
      launch_moe_gemm(a, true, stream);
    }
  }
  void combine(const MoeCombineArgs& a, void* stream) override { launch_moe_combine(a, stream); }
};

}  // namespace tandem::gpu::TD_NS
