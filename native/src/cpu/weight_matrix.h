// WeightMatrix: one [rows][cols] weight in the CPU backend's storage format.
//  - precision: a bf16 checkpoint stays bf16 in memory (the GEMM widens it to f32 in registers),
//    which halves the bytes a memory-bound decode step reads; f32 checkpoints stay f32, and f16
//    is widened to f32 at load because no CPU path computes in f16. An FP8 weight (an FP8
//    checkpoint, or --quantization fp8) stays e4m3 bytes with f32 scales per row and k group
//    (core/fp8_weights.h), a quarter of f32's bytes; its GEMM quantizes the activations as the
//    weight's ActQuantSpec says (W8A8), or not at all (W8A16, set_weight_only).
//  - layout: packed once at load into panels of kPanelRows rows, each panel column-major:
//    data[((p * cols) + k) * kPanelRows + j] = W[p * kPanelRows + j][k], rows padded with zeros.
//    A GEMM then reads one contiguous stream per panel and multiplies a whole vector of output
//    rows by one broadcast activation: no transposes, no horizontal sums, no per-step packing.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "../core/fp8_weights.h"

namespace tandem {

class SafetensorsStore;
class ThreadPool;
struct ModelConfig;

namespace cpu {

enum class WeightType { kF32, kBF16, kFP8 };

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
  /**
   * The same under a model's quantization config: FP8 parts stay FP8 (with their scales), a linear
   * layer is quantized when the config quantizes at load, FP8 parts load dequantized to f32 when
   * it dequantizes (`--quantization none`) or when stacked with unquantized parts.
   */
  static WeightMatrix load(const SafetensorsStore& store, const ModelConfig& config, const std::vector<Part>& parts,
                           bool linear, ThreadPool* pool = nullptr);

  /** From f32 values already in memory (tests, and the f32 fallback). */
  static WeightMatrix from_f32(std::vector<float> values, int64_t rows, int64_t cols);
  /** From raw bf16 bits (tests). */
  static WeightMatrix from_bf16(std::vector<uint16_t> bits, int64_t rows, int64_t cols);
  /** From an FP8 matrix (packed; the scales are kept per panel). */
  static WeightMatrix from_fp8(const Fp8Matrix& m);

  WeightType type() const { return type_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t num_panels() const { return (rows_ + kPanelRows - 1) / kPanelRows; }
  bool empty() const { return rows_ == 0; }
  size_t bytes() const {
    return f32_.size() * sizeof(float) + bf16_.size() * sizeof(uint16_t) + fp8_.size() + fp8_scales_.size() * sizeof(float);
  }

  /** Packed panels (layout above); exactly one is non-null, matching type(). */
  const float* f32() const { return f32_.empty() ? nullptr : f32_.data(); }
  const uint16_t* bf16() const { return bf16_.empty() ? nullptr : bf16_.data(); }
  const uint8_t* fp8() const { return fp8_.empty() ? nullptr : fp8_.data(); }

  // FP8: w[r][c] = e4m3(fp8 element) * scale(r, c / group_k()).
  int64_t group_k() const { return group_k_; }
  int64_t k_groups() const { return group_k_ > 0 ? (cols_ + group_k_ - 1) / group_k_ : 0; }
  /** Scales packed like the panels: [panel][k group][kPanelRows] (rows past the matrix: 0). */
  const float* fp8_scales() const { return fp8_scales_.data(); }
  const ActQuantSpec& act_quant() const { return act_; }
  /** Computes with unquantized activations (W8A16) whatever the checkpoint's scheme. */
  void set_weight_only() { act_.scheme = ActQuant::kNone; }

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
  std::vector<uint8_t> fp8_;
  std::vector<float> fp8_scales_;
  int64_t group_k_ = 0;
  ActQuantSpec act_;
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
