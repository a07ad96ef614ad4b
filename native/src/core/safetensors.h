// Safetensors reader: every *.safetensors file of a model directory is mmapped read-only and
// its header indexed, so a backend converts tensors straight from the page cache with no
// intermediate copy. Only regular files are opened (without blocking); the header length is
// bounded, and offsets and sizes are checked against the file before any read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tandem {

// F8_E4M3 is an FP8 weight (its scales are separate tensors; fp8_weights.h); F8_E5M2 is parsed
// only so that a checkpoint using it is refused by name.
enum class DType { kF32, kF16, kBF16, kF8E4M3, kF8E5M2 };

/** The safetensors name of a dtype ("F32", "BF16", "F8_E4M3", ...). */
const char* dtype_name(DType t);

/** Header lengths beyond this are refused (as workers/models/safetensors.ts does). */
constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull * 1024 * 1024;

struct TensorView {
  std::string name;
  std::string file;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the mapping; valid while the store lives
  size_t num_elements() const;
};

class MappedFile;

class SafetensorsStore {
 public:
  /** Maps every *.safetensors in model_dir. none found -> NativeError(not_found). */
  static std::unique_ptr<SafetensorsStore> open_dir(const std::string& model_dir);
  /**
   * Tensors already in memory (benchmarks of shapes too large to write to disk); each view's
   * data must outlive the store. Several views may alias the same bytes.
   */
  static std::unique_ptr<SafetensorsStore> from_views(std::vector<TensorView> views);
  ~SafetensorsStore();

  const TensorView* find(const std::string& name) const;
  /** The tensor with this exact shape; missing -> not_found, shape mismatch -> config_invalid. */
  const TensorView& require(const std::string& name, const std::vector<int64_t>& shape) const;
  size_t size() const { return tensors_.size(); }
  /** Every tensor of every file, by name. */
  std::vector<const TensorView*> tensors() const;

 private:
  SafetensorsStore() = default;
  void add_file(const std::string& path);

  std::string dir_;
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::map<std::string, TensorView> tensors_;
};

/** Converts every element to f32 (F8_E4M3: the e4m3 value, unscaled); F8_E5M2 is config_invalid. */
void convert_to_f32(const TensorView& t, float* out);

/** One IEEE half (raw bits) as f32, exactly (subnormals, infinities and NaN included). */
float f16_to_f32(uint16_t h);

std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace tandem
