// WeightMatrix: one [rows][cols] weight in the CPU backend's storage format.
//  - precision: a bf16 checkpoint stays bf16 in memory (the GEMM widens it to f32 in registers),
//    which halves the bytes a memory-bound decode step reads; f32 checkpoints stay f32, and f16
//    is widened to f32 at load because no CPU path computes in f16.
//  - layout: packed once at load into panels of kPanelRows rows, each panel column-major:
//    data[((p * cols) + k) * kPanelRows + j] = W[p * kPanelRows + j][k], rows padded with zeros.
//    A GEMM then reads one contiguous stream per panel and multiplies a whole vector of output
//    rows by one broadcast activation: no transposes, no horizontal sums, no per-step packing.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tandem {

class SafetensorsStore;

namespace cpu {

enum class WeightType { kF32, kBF16 };

// Two SIMD vectors of f32 rows per panel: 32 on AVX-512, 16 on AVX/AVX2, 8 on 128-bit targets
// (SSE, NEON). The packing is private to this process (done at load), so it follows the target.
#if defined(__AVX512F__)
constexpr int kPanelRows = 32;
#elif defined(__AVX__)
constexpr int kPanelRows = 16;
#else
constexpr int kPanelRows = 8;
#endif

class WeightMatrix {
 public:
  /** One tensor, or several stacked by rows (fused q/k/v, gate/up); each part is (name, shape). */
  using Part = std::pair<std::string, std::vector<int64_t>>;
  static WeightMatrix load(const SafetensorsStore& store, const std::vector<Part>& parts);

  /** From f32 values already in memory (tests, and the f32 fallback). */
  static WeightMatrix from_f32(std::vector<float> values, int64_t rows, int64_t cols);
  /** From raw bf16 bits (tests). */
  static WeightMatrix from_bf16(std::vector<uint16_t> bits, int64_t rows, int64_t cols);

  WeightType type() const { return type_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t num_panels() const { return (rows_ + kPanelRows - 1) / kPanelRows; }
  bool empty() const { return rows_ == 0; }
  size_t bytes() const { return f32_.size() * sizeof(float) + bf16_.size() * sizeof(uint16_t); }

  /** Packed panels (layout above); exactly one is non-null, matching type(). */
  const float* f32() const { return f32_.empty() ? nullptr : f32_.data(); }
  const uint16_t* bf16() const { return bf16_.empty() ? nullptr : bf16_.data(); }

  /** Writes row r as f32 (embedding lookup). */
  void row_to_f32(int64_t r, float* out) const;

 private:
  template <typename T>
  static std::vector<T> pack(const T* row_major, int64_t rows, int64_t cols);

  WeightType type_ = WeightType::kF32;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  std::vector<float> f32_;
  std::vector<uint16_t> bf16_;
};

/** bf16 bits -> f32: bf16 is the high half of an f32, so this is exact. */
inline float bf16_bits_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &bits, sizeof(f));
  return f;
}

}  // namespace cpu
}  // namespace tandem
