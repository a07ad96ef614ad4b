// The FP8 kernels of the GPU backend, as plain argument structs (like kernel_api.h) behind their
// own API, compiled for both targets in their own units (fp8_kernels_cuda.cu, _simt.cc), so an
// FP8 change rebuilds seconds of nvcc, not the forward's kernels:
//
//   gemm_rows   decode GEMV (m <= kFp8RowsMaxM): e4m3 weights [n][k] streamed once with their
//               scales per row and k group, bf16 activations staged in shared memory and, for
//               W8A8, quantized there first (dynamic per token or per group, or static), so no
//               separate quantization kernel runs at decode;
//   quantize    bf16 activation rows -> e4m3 + scales in one pass per row (the input of
//               cuBLASLt's FP8 matmul), optionally also the dequantized values as bf16 (the
//               input of the fallback bf16 GEMM);
//   dequantize  e4m3 weights -> bf16 (times their scales): the fallback where cuBLASLt has no
//               FP8 algorithm for a scale mode, and W8A16 below sm_89.
//
// Numerics are the CPU backend's (cpu/gemm.cc, core/fp8_weights.h): the same e4m3 rounding
// (fp8.h), the same scale definitions, f32 accumulation.
#pragma once

#include <cstdint>
#include <memory>

#include "fp8.h"
#include "kernel_api.h"

namespace tandem::gpu {

/** Largest m the FP8 GEMV takes (decode batches 1-8); more rows go to cuBLASLt FP8 or the fallback. */
inline constexpr int kFp8RowsMaxM = 8;

/** How a GEMM quantizes its activations; mirrors core ActQuant. */
enum class Fp8Act : int32_t { kNone = 0, kDynamicToken = 1, kDynamicGroup = 2, kStatic = 3 };

struct Fp8GemmArgs {
  // The output side as the bf16 GEMM has it: m, n, k, bias, c, ldc, out, accumulate, and the
  // split-K workspace. Its a and w are unused.
  GemmArgs out;
  const bf16_bits* a = nullptr;  // [m][lda] activations (bf16)
  int64_t lda = 0;
  Fp8Act act = Fp8Act::kNone;
  float act_static_scale = 1.0f;  // kStatic
  float act_ub = 0.0f;            // > 0: dynamic amax clamped to this first
  const fp8_bits* w = nullptr;    // [n][ldw] e4m3, 16-byte rows (k % 16 == 0)
  int64_t ldw = 0;
  const float* w_scales = nullptr;  // [n][w_groups]
  int w_groups = 1;
  int group_k = 0;  // columns per weight scale (k when w_groups is 1); a multiple of 16 otherwise
};

struct Fp8QuantArgs {
  const bf16_bits* x = nullptr;  // [rows][ldx]
  int64_t ldx = 0;
  int rows = 0, cols = 0;
  Fp8Act act = Fp8Act::kDynamicToken;  // kNone is not a quantization
  int group = 0;                       // kDynamicGroup: columns per scale
  float static_scale = 1.0f, ub = 0.0f;
  fp8_bits* q = nullptr;  // [rows][ldq] e4m3 (may be null when only dq is wanted)
  int64_t ldq = 0;
  float* scales = nullptr;  // scale of (row, group) at row * scale_row_stride + group * scale_group_stride
  int64_t scale_row_stride = 0;    // 0: the row's group count (groups contiguous per row)
  int64_t scale_group_stride = 0;  // 0: 1
  bf16_bits* dq = nullptr;  // optional [rows][lddq]: e4m3 value * scale, as bf16
  int64_t lddq = 0;
};

struct Fp8DequantArgs {
  const fp8_bits* w = nullptr;  // [n][ldw]
  int64_t ldw = 0;
  int n = 0, k = 0;
  const float* scales = nullptr;  // [n][groups]; null: unscaled e4m3 values (exact in bf16)
  int groups = 1, group_k = 0;
  bf16_bits* out = nullptr;  // [n][ldo]
  int64_t ldo = 0;
};

class Fp8KernelApi {
 public:
  virtual ~Fp8KernelApi() = default;
  virtual const char* target() const = 0;
  /** False (nothing launched) when m is past kFp8RowsMaxM, k is not a multiple of 16, or the groups do not fit (fp8_rows_plan). */
  virtual bool gemm_rows(const Fp8GemmArgs& a, void* stream) = 0;
  virtual void quantize(const Fp8QuantArgs& a, void* stream) = 0;
  virtual void dequantize(const Fp8DequantArgs& a, void* stream) = 0;
};

std::unique_ptr<Fp8KernelApi> make_simt_fp8_kernels();
/** Only in builds with the CUDA target (cuda_built()). */
std::unique_ptr<Fp8KernelApi> make_cuda_fp8_kernels();

}  // namespace tandem::gpu
