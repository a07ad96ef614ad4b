#include "fp8_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../cuda/fp8.h"
#include "error.h"
#include "model_config.h"
#include "safetensors.h"
#include "thread_pool.h"

namespace tandem {
namespace {

std::string module_of(const std::string& tensor) {
  const std::string suffix = ".weight";
  if (tensor.size() > suffix.size() && tensor.compare(tensor.size() - suffix.size(), suffix.size(), suffix) == 0) {
    return tensor.substr(0, tensor.size() - suffix.size());
  }
  return tensor;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

[[noreturn]] void bad_shape(const TensorView& t, const std::string& want) {
  throw NativeError(ErrorCode::kConfigInvalid, t.file + ": tensor '" + t.name + "' has shape " + shape_string(t.shape) +
                                                   ", the quantization_config implies " + want);
}

const TensorView& require_tensor(const SafetensorsStore& store, const std::string& name, const std::string& why) {
  const TensorView* t = store.find(name);
  if (t == nullptr) throw NativeError(ErrorCode::kConfigInvalid, "tensor '" + name + "' missing from the safetensors files (" + why + ")");
  if (t->dtype == DType::kF8E4M3 || t->dtype == DType::kF8E5M2) {
    throw NativeError(ErrorCode::kConfigInvalid, t->file + ": tensor '" + name + "' is " + dtype_name(t->dtype) + "; scales must be F32, BF16 or F16");
  }
  return *t;
}

std::vector<float> values(const TensorView& t) {
  std::vector<float> v(t.num_elements());
  convert_to_f32(t, v.data());
  for (float f : v) {
    if (!(f > 0.0f) || !std::isfinite(f)) {
      throw NativeError(ErrorCode::kConfigInvalid, t.file + ": tensor '" + t.name + "' holds a scale that is not a positive finite number");
    }
  }
  return v;
}

bool scalar_shape(const std::vector<int64_t>& s) { return s.empty() || (s.size() == 1 && s[0] == 1); }

/** The scale of a per-tensor quantized module (weight_scale; AutoFP8 per-tensor checkpoints may say weight_scale_inv). */
const TensorView& tensor_scale(const SafetensorsStore& store, const std::string& module, const char* why) {
  const std::string name = module + ".weight_scale";
  if (store.find(name) == nullptr && store.find(module + ".weight_scale_inv") != nullptr) {
    return require_tensor(store, module + ".weight_scale_inv", why);
  }
  return require_tensor(store, name, why);
}

/**
 * One module's weight scales as [rows][k_groups] (block scales repeated over their rows), read
 * per the config's scheme; a missing tensor is not_found, a wrong shape config_invalid.
 */
std::vector<float> module_scales(const SafetensorsStore& store, const QuantConfig& q, const std::string& module, int64_t rows,
                                 int64_t cols) {
  switch (q.weights) {
    case WeightScaling::kBlock: {
      const char* suffix = q.method == QuantMethod::kFp8 ? ".weight_scale_inv" : ".weight_scale";
      const TensorView& t = require_tensor(store, module + suffix, "block scales of an FP8 weight");
      const int64_t rb = ceil_div(rows, q.block_n), kb = ceil_div(cols, q.block_k);
      if (t.shape != std::vector<int64_t>{rb, kb}) bad_shape(t, shape_string({rb, kb}) + " (one per " + std::to_string(q.block_n) + "x" + std::to_string(q.block_k) + " block)");
      const std::vector<float> blocks = values(t);
      std::vector<float> out(static_cast<size_t>(rows * kb));
      for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(out.data() + r * kb, blocks.data() + (r / q.block_n) * kb, static_cast<size_t>(kb) * sizeof(float));
      }
      return out;
    }
    case WeightScaling::kChannel: {
      const TensorView& t = require_tensor(store, module + ".weight_scale", "per-channel scales of an FP8 weight");
      if (t.shape != std::vector<int64_t>{rows, 1} && t.shape != std::vector<int64_t>{rows}) {
        bad_shape(t, shape_string({rows, 1}) + " (one per output channel)");
      }
      return values(t);
    }
    case WeightScaling::kTensor: {
      const TensorView& t = tensor_scale(store, module, "the per-tensor scale of an FP8 weight");
      if (!scalar_shape(t.shape)) bad_shape(t, "[] or [1] (one per tensor)");
      return std::vector<float>(static_cast<size_t>(rows), values(t)[0]);
    }
  }
  return {};
}

float input_scale(const SafetensorsStore& store, const std::string& module) {
  const TensorView& t = require_tensor(store, module + ".input_scale", "the static activation scale of an FP8 layer");
  if (!scalar_shape(t.shape)) bad_shape(t, "[] or [1] (one per tensor)");
  return values(t)[0];
}

void check_no_nan(const TensorView& t) {
  for (size_t i = 0; i < t.num_elements(); ++i) {
    if ((t.data[i] & 0x7fu) == 0x7fu) {
      throw NativeError(ErrorCode::kConfigInvalid, t.file + ": tensor '" + t.name + "' holds an e4m3 NaN (element " + std::to_string(i) + ")");
    }
  }
}

int64_t part_rows(const WeightPart& p) { return p.second.size() == 2 ? p.second[0] : 1; }

}  // namespace

void Fp8Matrix::dequantize_row(int64_t r, float* out) const {
  const int64_t kg = k_groups();
  const uint8_t* row = q.data() + r * cols;
  const float* s = scales.data() + r * kg;
  for (int64_t c = 0; c < cols; ++c) out[c] = gpu::fp8_bits_to_float(row[c]) * s[c / group_k];
}

bool loads_as_fp8(const SafetensorsStore& store, const ModelConfig& config, const std::vector<WeightPart>& parts, bool linear) {
  const QuantConfig& q = config.quant;
  if (q.dequantize) return false;
  size_t fp8 = 0;
  for (const WeightPart& p : parts) {
    const TensorView* t = store.find(p.first);
    if (t != nullptr && t->dtype == DType::kF8E4M3) ++fp8;
  }
  if (fp8 > 0) return fp8 == parts.size();
  if (!linear || q.method != QuantMethod::kOnLoad) return false;
  for (const WeightPart& p : parts) {
    if (q.ignores(module_of(p.first))) return false;
  }
  return true;
}

Fp8Matrix load_fp8_matrix(const SafetensorsStore& store, const ModelConfig& config, const std::vector<WeightPart>& parts,
                          ThreadPool* pool) {
  const QuantConfig& q = config.quant;
  Fp8Matrix m;
  for (const WeightPart& p : parts) m.rows += part_rows(p);
  m.cols = parts.empty() ? 0 : parts[0].second.back();
  if (q.method == QuantMethod::kOnLoad) {
    std::vector<float> w = load_matrix_f32(store, config, parts, pool);
    m = quantize_per_row(w.data(), m.rows, m.cols, pool);
    return m;
  }
  m.group_k = q.weights == WeightScaling::kBlock ? std::min(q.block_k, m.cols) : m.cols;
  m.block_n = q.weights == WeightScaling::kBlock ? q.block_n : 0;
  m.q.resize(static_cast<size_t>(m.rows * m.cols));
  m.scales.resize(static_cast<size_t>(m.rows * m.k_groups()));
  m.act.scheme = q.activations;
  m.act.ub = q.act_scale_ub;
  m.act.group = q.activations == ActQuant::kDynamicGroup ? m.group_k : 0;
  m.act.static_scale = 0.0f;
  int64_t row = 0;
  for (const WeightPart& p : parts) {
    const TensorView& t = store.require(p.first, p.second);
    if (t.dtype != DType::kF8E4M3) {
      throw NativeError(ErrorCode::kInternal, "tensor '" + p.first + "' is not F8_E4M3 (loads_as_fp8 first)");
    }
    const int64_t r = part_rows(p);
    check_no_nan(t);
    std::memcpy(m.q.data() + row * m.cols, t.data, t.num_elements());
    const std::string module = module_of(p.first);
    std::vector<float> s = module_scales(store, q, module, r, m.cols);
    std::memcpy(m.scales.data() + row * m.k_groups(), s.data(), s.size() * sizeof(float));
    // Stacked parts share one activation quantization: the largest static scale (as vLLM fuses them).
    if (q.activations == ActQuant::kStaticTensor) m.act.static_scale = std::max(m.act.static_scale, input_scale(store, module));
    row += r;
  }
  if (q.activations != ActQuant::kStaticTensor) m.act.static_scale = 1.0f;
  return m;
}

std::vector<float> load_matrix_f32(const SafetensorsStore& store, const ModelConfig& config, const std::vector<WeightPart>& parts,
                                   ThreadPool* pool) {
  int64_t rows = 0;
  for (const WeightPart& p : parts) rows += part_rows(p);
  const int64_t cols = parts.empty() ? 0 : parts[0].second.back();
  std::vector<float> out(static_cast<size_t>(rows * cols));
  int64_t row = 0;
  for (const WeightPart& p : parts) {
    const TensorView& t = store.require(p.first, p.second);
    const int64_t r = part_rows(p);
    float* dst = out.data() + row * cols;
    if (pool != nullptr && t.dtype != DType::kF32) {
      // A row at a time over the pool (a large bf16 matrix converts in seconds, not tens of them).
      const size_t elem = t.dtype == DType::kF8E4M3 ? 1 : 2;
      pool->parallel_for(r, std::max<int64_t>(1, 65536 / std::max<int64_t>(cols, 1)), [&](int64_t b, int64_t e, int) {
        TensorView slice = t;
        slice.shape = {e - b, cols};
        slice.data = t.data + static_cast<size_t>(b * cols) * elem;
        convert_to_f32(slice, dst + b * cols);
      });
    } else {
      convert_to_f32(t, dst);
    }
    if (t.dtype == DType::kF8E4M3) {
      // An FP8 part read as f32 (--quantization none, or stacked with an unquantized part): apply its scales.
      QuantConfig q = config.quant;
      const std::vector<float> s = module_scales(store, q, module_of(p.first), r, cols);
      const int64_t group = q.weights == WeightScaling::kBlock ? std::min(q.block_k, cols) : cols;
      const int64_t kg = (cols + group - 1) / group;
      for (int64_t i = 0; i < r; ++i) {
        for (int64_t c = 0; c < cols; ++c) dst[i * cols + c] *= s[static_cast<size_t>(i * kg + c / group)];
      }
    }
    row += r;
  }
  return out;
}

void validate_fp8_weights(const ModelConfig& config, const SafetensorsStore& store) {
  const QuantConfig& q = config.quant;
  for (const TensorView* t : store.tensors()) {
    if (t->dtype == DType::kF8E5M2) {
      throw NativeError(ErrorCode::kConfigInvalid, t->file + ": tensor '" + t->name + "' has dtype F8_E5M2 (FP8 weights must be F8_E4M3)");
    }
    if (t->dtype != DType::kF8E4M3) continue;
    if (q.method == QuantMethod::kNone || q.method == QuantMethod::kOnLoad) {
      throw NativeError(ErrorCode::kConfigInvalid, t->file + ": tensor '" + t->name +
                                                       "' is F8_E4M3 but config.json has no quantization_config saying how it is scaled");
    }
    const std::string module = module_of(t->name);
    if (module == t->name || t->shape.size() != 2 || t->name.find("norm") != std::string::npos) {
      throw NativeError(ErrorCode::kConfigInvalid, t->file + ": tensor '" + t->name + "' is F8_E4M3 (only matrix weights may be FP8)");
    }
    module_scales(store, q, module, t->shape[0], t->shape[1]);
    if (q.activations == ActQuant::kStaticTensor && !q.dequantize) input_scale(store, module);
  }
  if (q.kv_cache_scales) load_kv_scales(store, config);
}

std::vector<float> load_kv_scales(const SafetensorsStore& store, const ModelConfig& config) {
  std::vector<float> out(static_cast<size_t>(2 * config.num_layers), 1.0f);
  for (int64_t l = 0; l < config.num_layers; ++l) {
    const std::string attn = "model.layers." + std::to_string(l) + ".self_attn.";
    for (int kv = 0; kv < 2; ++kv) {
      const char* which = kv == 0 ? "k" : "v";
      const std::string names[] = {attn + which + "_scale", attn + "attn." + which + "_scale",
                                   attn + which + "_proj." + which + "_scale", attn + "kv_scale"};
      const TensorView* t = nullptr;
      for (const std::string& n : names) {
        if ((t = store.find(n)) != nullptr) break;
      }
      if (t == nullptr) {
        if (config.quant.kv_cache_scales) {
          throw NativeError(ErrorCode::kConfigInvalid, "tensor '" + names[0] + "' missing from the safetensors files (quantization_config.kv_cache_scheme declares KV-cache scales)");
        }
        continue;
      }
      if (!scalar_shape(t->shape)) bad_shape(*t, "[] or [1] (one KV-cache scale per layer)");
      out[static_cast<size_t>(2 * l + kv)] = values(*t)[0];
    }
  }
  return out;
}

Fp8Matrix quantize_per_row(const float* w, int64_t rows, int64_t cols, ThreadPool* pool) {
  Fp8Matrix m;
  m.rows = rows;
  m.cols = cols;
  m.group_k = cols;
  m.q.resize(static_cast<size_t>(rows * cols));
  m.scales.resize(static_cast<size_t>(rows));
  m.act.scheme = ActQuant::kDynamicToken;
  auto quantize_rows = [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = w + r * cols;
      float amax = 0.0f;
      for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(row[c]));
      const float s = gpu::fp8_dynamic_scale(amax);
      m.scales[static_cast<size_t>(r)] = s;
      for (int64_t c = 0; c < cols; ++c) m.q[static_cast<size_t>(r * cols + c)] = gpu::fp8_quantize(row[c], s);
    }
  };
  if (pool != nullptr) {
    pool->parallel_for(rows, std::max<int64_t>(1, 65536 / std::max<int64_t>(cols, 1)), quantize_rows);
  } else {
    quantize_rows(0, rows, 0);
  }
  return m;
}

void quantize_activation_row(const float* x, int64_t cols, const ActQuantSpec& spec, uint8_t* q, float* scales) {
  const int64_t group = spec.scheme == ActQuant::kDynamicGroup ? spec.group : cols;
  for (int64_t g0 = 0, gi = 0; g0 < cols; g0 += group, ++gi) {
    const int64_t g1 = std::min(cols, g0 + group);
    float s = spec.static_scale;
    if (spec.scheme != ActQuant::kStaticTensor) {
      float amax = 0.0f;
      for (int64_t c = g0; c < g1; ++c) amax = std::max(amax, std::fabs(x[c]));
      if (spec.ub > 0.0f) amax = std::min(amax, spec.ub);
      s = gpu::fp8_dynamic_scale(amax);
    }
    scales[gi] = s;
    for (int64_t c = g0; c < g1; ++c) q[c] = gpu::fp8_quantize(x[c], s);
  }
}

}  // namespace tandem
