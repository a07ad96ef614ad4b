// cuBLASLt, loaded at run time with dlopen where present (every machine with the CUDA toolkit
// or PyTorch has it), through our own declarations of the few entry points used; the backend
// falls back to its own GEMM kernels where it is absent or has no algorithm for a shape.
// The row-major product c[m][n] = a[m][k] . w[n][k]^T is issued column-major as
// D(n x m) = op_T(W: k x n) . A(k x m), so no operand is copied or transposed.
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

  struct Api;
  struct Plan;

 private:
  CublasLt() = default;
  Plan* plan_for(const GemmArgs& g, size_t workspace_bytes);

  void* lib_ = nullptr;
  std::unique_ptr<Api> api_;
  void* handle_ = nullptr;
  std::string path_;
  size_t version_ = 0;
  using Key = std::tuple<int, int, int, int64_t, int64_t, int64_t, int, bool, bool>;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace tandem::gpu
