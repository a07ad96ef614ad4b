// The MoeKernelApi of one target (moe_api.h): routing and grouping in one launch (moe_route.cuh), the grouped
// GEMMs on CUDA cores and the combine (moe_gemm.cuh), the grouped GEMMs on tensor cores
// (moe_gemm_mma.cuh) when the arguments ask for them (mma_rows > 0). With set_overlap(true)
// every kernel is a programmatic dependent of the one before (td::launch_dependent): each
// waits for it (td::grid_dependency_wait) before reading anything, the router logits after
// sending its router rows to L2.
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
  void set_overlap(bool on) override { overlap_ = on; }
  void route(const MoeRouteArgs& a, const MoeGroupArgs& g, void* stream) override { launch_moe_route(a, g, stream, overlap_); }
  void gate_up(const MoeGemmArgs& a, void* stream) override {
    if (a.mma_rows > 0) {
      launch_moe_gemm_mma(a, false, stream, overlap_);
    } else {
      launch_moe_gemm(a, false, stream, overlap_);
    }
  }
  void down(const MoeGemmArgs& a, void* stream) override {
    if (a.mma_rows > 0) {
      launch_moe_gemm_mma(a, true, stream, overlap_);
    } else {
      launch_moe_gemm(a, true, stream, overlap_);
    }
  }
  void combine(const MoeCombineArgs& a, void* stream) override { launch_moe_combine(a, stream, overlap_); }

 private:
  bool overlap_ = false;
};

}  // namespace tandem::gpu::TD_NS
