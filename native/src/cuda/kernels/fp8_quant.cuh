// FP8 conversions around the GEMMs (fp8_kernels.h):
//   quantize:   one block per activation row; per scale group (the whole row for per-token
//               scales) a block max of |x| (clamped to the upper bound), the scale, then every
//               value's e4m3 code, and optionally that value times the scale as bf16 (the input
//               of the fallback bf16 GEMM). The row is read from L1/L2 twice, written once.
//   dequantize: grid-stride over a weight's elements: bf16(e4m3 * scale), or the unscaled e4m3
//               value (exact in bf16) when no scales are given.
// The arithmetic is core/fp8_weights.cc's quantize_activation_row, element for element.
#pragma once

#include "../fp8_kernels.h"
#include "fp8_gemm_rows.cuh"
#include "launch.h"
#include "reduce.cuh"

namespace tandem::gpu::TD_NS {

inline constexpr unsigned kFp8QuantThreads = 128;

TD_GLOBAL void TD_LAUNCH_BOUNDS(kFp8QuantThreads) fp8_quantize_kernel(Fp8QuantArgs a) {
  TD_SHARED(float, scratch, 32);
  const int64_t row = blockIdx.x;
  const td::bf16_bits* x = a.x + row * a.ldx;
  const int group = a.act == Fp8Act::kDynamicGroup ? a.group : a.cols;
  const int groups = (a.cols + group - 1) / group;
  for (int gi = 0; gi < groups; ++gi) {
    const int g0 = gi * group, g1 = td::imin(a.cols, g0 + group);
    float s = a.static_scale;
    if (a.act != Fp8Act::kStatic) {
      float amax = 0.0f;
      for (int c = g0 + static_cast<int>(threadIdx.x); c < g1; c += static_cast<int>(blockDim.x)) amax = fmaxf(amax, fabsf(td::bf16_to_float(x[c])));
      amax = block_max(amax, scratch);
      if (a.ub > 0.0f) amax = fminf(amax, a.ub);
      s = fp8_dynamic_scale(amax);
    }
    if (threadIdx.x == 0 && a.scales != nullptr) {
      const int64_t rs = a.scale_row_stride > 0 ? a.scale_row_stride : groups, gs = a.scale_group_stride > 0 ? a.scale_group_stride : 1;
      a.scales[row * rs + gi * gs] = s;
    }
    for (int c = g0 + static_cast<int>(threadIdx.x); c < g1; c += static_cast<int>(blockDim.x)) {
      const fp8_bits q = fp8_quantize(td::bf16_to_float(x[c]), s);
      if (a.q != nullptr) a.q[row * a.ldq + c] = q;
      if (a.dq != nullptr) a.dq[row * a.lddq + c] = td::float_to_bf16(fp8_bits_to_float(q) * s);
    }
  }
}

TD_GLOBAL void fp8_dequantize_kernel(Fp8DequantArgs a) {
  const int64_t total = static_cast<int64_t>(a.n) * a.k;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / a.k, c = i - r * a.k;
    float v = fp8_bits_to_float(a.w[r * a.ldw + c]);
    if (a.scales != nullptr) v *= a.scales[r * a.groups + (a.groups > 1 ? c / a.group_k : 0)];
    a.out[r * a.ldo + c] = td::float_to_bf16(v);
  }
}

inline void launch_fp8_quantize(const Fp8QuantArgs& a, void* stream) {
  if (a.rows <= 0 || a.cols <= 0) return;
  td::launch(fp8_quantize_kernel, {static_cast<unsigned>(a.rows)}, kFp8QuantThreads, 0, stream, a);
}

inline void launch_fp8_dequantize(const Fp8DequantArgs& a, void* stream) {
  const int64_t total = static_cast<int64_t>(a.n) * a.k;
  if (total <= 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 8192));
  td::launch(fp8_dequantize_kernel, {blocks}, 256, 0, stream, a);
}

class TargetFp8Kernels final : public Fp8KernelApi {
 public:
  const char* target() const override {
#if TD_CUDA
    return "cuda";
#else
    return "simt";
#endif
  }
  bool gemm_rows(const Fp8GemmArgs& a, void* stream) override { return launch_fp8_gemm_rows(a, stream); }
  void quantize(const Fp8QuantArgs& a, void* stream) override { launch_fp8_quantize(a, stream); }
  void dequantize(const Fp8DequantArgs& a, void* stream) override { launch_fp8_dequantize(a, stream); }
};

}  // namespace tandem::gpu::TD_NS
