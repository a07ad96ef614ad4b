#include "weight_matrix.h"

#include <cstring>

#include "../core/error.h"
#include "../core/model_config.h"
#include "../core/safetensors.h"
#include "../cuda/fp8.h"

namespace tandem {
namespace cpu {

WeightMatrix WeightMatrix::load(const SafetensorsStore& store, const std::vector<Part>& parts) {
  std::vector<const TensorView*> views;
  views.reserve(parts.size());
  int64_t rows = 0;
  int64_t cols = -1;
  bool all_bf16 = true;
  for (const Part& p : parts) {
    const TensorView& t = store.require(p.first, p.second);
    // Biases and norms are 1-D: one row of their length.
    const int64_t r = t.shape.size() == 2 ? t.shape[0] : 1;
    const int64_t c = t.shape.size() == 2 ? t.shape[1] : t.shape.empty() ? 1 : t.shape[0];
    if (cols >= 0 && c != cols) {
      throw NativeError(ErrorCode::kConfigInvalid, "tensor '" + p.first + "' has " + std::to_string(c) +
                                                       " columns; the tensors stacked with it have " +
                                                       std::to_string(cols));
    }
    cols = c;
    rows += r;
    all_bf16 = all_bf16 && t.dtype == DType::kBF16;
    views.push_back(&t);
  }
  // Stacked parts are first laid out row-major (one temporary copy), then packed.
  const int64_t c = cols < 0 ? 0 : cols;
  const size_t total = static_cast<size_t>(rows * c);
  // Mixed dtypes in one stack (never seen in practice) fall back to f32, which is exact for both.
  if (all_bf16) {
    std::vector<uint16_t> row_major(total);
    size_t at = 0;
    for (const TensorView* t : views) {
      std::memcpy(row_major.data() + at, t->data, t->num_elements() * sizeof(uint16_t));
      at += t->num_elements();
    }
    return from_bf16(std::move(row_major), rows, c);
  }
  std::vector<float> row_major(total);
  size_t at = 0;
  for (const TensorView* t : views) {
    convert_to_f32(*t, row_major.data() + at);
    at += t->num_elements();
  }
  return from_f32(std::move(row_major), rows, c);
}

WeightMatrix WeightMatrix::load(const SafetensorsStore& store, const ModelConfig& config, const std::vector<Part>& parts,
                                bool linear, ThreadPool* pool) {
  if (loads_as_fp8(store, config, parts, linear)) return from_fp8(load_fp8_matrix(store, config, parts, pool));
  bool any_fp8 = false;
  for (const Part& p : parts) {
    const TensorView* t = store.find(p.first);
    any_fp8 = any_fp8 || (t != nullptr && t->dtype == DType::kF8E4M3);
  }
  if (!any_fp8) return load(store, parts);
  int64_t rows = 0;
  for (const Part& p : parts) rows += p.second.size() == 2 ? p.second[0] : 1;
  return from_f32(load_matrix_f32(store, config, parts), rows, parts[0].second.back());
}

WeightMatrix WeightMatrix::from_fp8(const Fp8Matrix& m) {
  WeightMatrix w;
  w.type_ = WeightType::kFP8;
  w.rows_ = m.rows;
  w.cols_ = m.cols;
  w.group_k_ = m.group_k;
  w.act_ = m.act;
  w.fp8_ = pack(m.q.data(), m.rows, m.cols);
  const int64_t kg = m.k_groups();
  w.fp8_scales_.assign(static_cast<size_t>(w.num_panels() * kg * kPanelRows), 0.0f);
  for (int64_t r = 0; r < m.rows; ++r) {
    for (int64_t g = 0; g < kg; ++g) {
      w.fp8_scales_[static_cast<size_t>(((r / kPanelRows) * kg + g) * kPanelRows + r % kPanelRows)] =
          m.scales[static_cast<size_t>(r * kg + g)];
    }
  }
  return w;
}

template <typename T>
std::vector<T> WeightMatrix::pack(const T* src, int64_t rows, int64_t cols) {
  const int64_t panels = (rows + kPanelRows - 1) / kPanelRows;
  std::vector<T> out(static_cast<size_t>(panels * cols * kPanelRows), T{});
  for (int64_t r = 0; r < rows; ++r) {
    T* dst = out.data() + (r / kPanelRows) * cols * kPanelRows + r % kPanelRows;
    const T* row = src + r * cols;
    for (int64_t k = 0; k < cols; ++k) dst[k * kPanelRows] = row[k];
  }
  return out;
}

WeightMatrix WeightMatrix::from_f32(std::vector<float> values, int64_t rows, int64_t cols) {
  WeightMatrix m;
  m.type_ = WeightType::kF32;
  m.rows_ = rows;
  m.cols_ = cols;
  m.f32_ = pack(values.data(), rows, cols);
  return m;
}

WeightMatrix WeightMatrix::from_bf16(std::vector<uint16_t> bits, int64_t rows, int64_t cols) {
  WeightMatrix m;
  m.type_ = WeightType::kBF16;
  m.rows_ = rows;
  m.cols_ = cols;
  m.bf16_ = pack(bits.data(), rows, cols);
  return m;
}

void WeightMatrix::row_to_f32(int64_t r, float* out) const {
  const int64_t base = (r / kPanelRows) * cols_ * kPanelRows + r % kPanelRows;
  if (type_ == WeightType::kF32) {
    const float* src = f32_.data() + base;
    for (int64_t k = 0; k < cols_; ++k) out[k] = src[k * kPanelRows];
    return;
  }
  if (type_ == WeightType::kFP8) {
    const uint8_t* src = fp8_.data() + base;
    const int64_t kg = k_groups();
    const float* s = fp8_scales_.data() + (r / kPanelRows) * kg * kPanelRows + r % kPanelRows;
    for (int64_t k = 0; k < cols_; ++k) out[k] = gpu::fp8_bits_to_float(src[k * kPanelRows]) * s[(k / group_k_) * kPanelRows];
    return;
  }
  const uint16_t* src = bf16_.data() + base;
  for (int64_t k = 0; k < cols_; ++k) out[k] = bf16_bits_to_f32(src[k * kPanelRows]);
}

}  // namespace cpu
}  // namespace tandem
