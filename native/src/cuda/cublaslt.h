// cuBLASLt, loaded at run time with dlopen where present (every machine with the CUDA toolkit
// or PyTorch has it), through our own declarations of the few entry points used; the backend
// falls back to its own GEMM kernels where it is absent or has no algorithm for a shape.
// The row-major product c[m][n] = a[m][k] . w[n][k]^T is issued column-major as
// D(n x m) = op_T(W: k x n) . A(k x m), so no operand is copied or transposed. That is also
// the "TN" layout FP8 tensor cores require (matmul_fp8): cuBLASLt's A is our weights, its B
// our activations, and their scale pointers and modes follow.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "kernel_api.h"

namespace tandem::gpu {

class CublasLt {
 public:
  /**
   * Finds and loads the library ($TANDEM_CUBLASLT, then libcublasLt.so.13/.12 on the loader's
   * path, the toolkit's lib64, Python's nvidia wheels) and creates a handle. nullptr when none
   * loads; `why` then says what was tried.
   */
  static std::unique_ptr<CublasLt> open(std::string* why);
  ~CublasLt();
  CublasLt(const CublasLt&) = delete;
  CublasLt& operator=(const CublasLt&) = delete;

  const std::string& path() const { return path_; }
  /** e.g. 130100 for 13.1.0. */
  size_t version() const { return version_; }

  /**
   * Runs g on `stream` with `workspace`; false (nothing launched) when cuBLASLt has no
   * algorithm for it or the combination is not one it supports (bias with bf16 output).
   */
  bool matmul(const GemmArgs& g, void* workspace, size_t workspace_bytes, void* stream);

  /**
   * FP8 scale modes (cublasLtMatmulMatrixScale_t, CUDA 12.9+): kOuterVec scales the weights per
   * output row and the activations per token (per-channel / per-tensor weights, per-token or
   * static activations); kBlock128 scales the weights per 128x128 block and the activations per
   * token and 128-column group (block-scaled checkpoints).
   */
  enum class Fp8Scale { kOuterVec = 0, kBlock128 = 1 };
  /**
   * c[m][n] = sum_k (a[m][k] sa) (w[n][k] sw), e4m3 a and w (16-byte rows), f32 scales on the
   * device: kOuterVec: a_scales[m], w_scales[n]; kBlock128: w_scales [ceil(n/128)][ceil(k/128)]
   * (k blocks contiguous) and a_scales per token and group laid out as act_layout says.
   */
  struct Fp8Args {
    int m = 0, n = 0, k = 0;
    const void* a = nullptr;
    int64_t lda = 0;
    const float* a_scales = nullptr;
    const void* w = nullptr;
    int64_t ldw = 0;
    const float* w_scales = nullptr;
    void* c = nullptr;
    int64_t ldc = 0;
    GemmOut out = GemmOut::kF32;
    bool accumulate = false;
  };
  /** False (nothing launched) when cuBLASLt has no algorithm for this mode and shape. */
  bool matmul_fp8(const Fp8Args& a, Fp8Scale mode, void* workspace, size_t workspace_bytes, void* stream);
  /** Whether the heuristic offers an algorithm for `mode` on a representative shape (no launch). */
  bool fp8_supported(Fp8Scale mode, size_t workspace_bytes);

  struct Api;
  struct Plan;

 private:
  CublasLt() = default;
  Plan* plan_for(const GemmArgs& g, size_t workspace_bytes);
  Plan* fp8_plan_for(const Fp8Args& a, Fp8Scale mode, size_t workspace_bytes);
  /** The operand layouts and the heuristic's algorithm: p->ok when it offered one. */
  void finish_plan(Plan* p, int in_type, int out_type, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldw, int64_t ldc,
                   size_t workspace_bytes);

  void* lib_ = nullptr;
  std::unique_ptr<Api> api_;
  void* handle_ = nullptr;
  std::string path_;
  size_t version_ = 0;
  using Key = std::tuple<int, int, int, int64_t, int64_t, int64_t, int, bool, bool>;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  using Fp8Key = std::tuple<int, int, int, int64_t, int64_t, int64_t, int, bool, int>;
  std::map<Fp8Key, std::unique_ptr<Plan>> fp8_plans_;
};

}  // namespace tandem::gpu
