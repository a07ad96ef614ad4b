#include "model_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "error.h"
#include "json.h"

namespace tandem {
namespace {

[[noreturn]] void refuse(const std::string& source, const std::string& what) {
  throw NativeError(ErrorCode::kConfigInvalid, source + ": " + what);
}

int64_t require_int(const Json& root, const char* key, const std::string& source) {
  const Json* v = root.find(key);
  if (v == nullptr || v->is_null()) refuse(source, std::string("missing field '") + key + "'");
  if (!v->is_number() || v->as_number() != std::floor(v->as_number()) || v->as_number() <= 0) {
    refuse(source, std::string("field '") + key + "' must be a positive integer");
  }
  return static_cast<int64_t>(v->as_number());
}

int64_t optional_int(const Json& root, const char* key, int64_t fallback, const std::string& source) {
  const Json* v = root.find(key);
  if (v == nullptr || v->is_null()) return fallback;
  return require_int(root, key, source);
}

double optional_number(const Json& root, const char* key, double fallback, const std::string& source) {
  const Json* v = root.find(key);
  if (v == nullptr || v->is_null()) return fallback;
  if (!v->is_number()) refuse(source, std::string("field '") + key + "' must be a number");
  return v->as_number();
}

bool optional_bool(const Json& root, const char* key, bool fallback, const std::string& source) {
  const Json* v = root.find(key);
  if (v == nullptr || v->is_null()) return fallback;
  if (!v->is_bool()) refuse(source, std::string("field '") + key + "' must be a boolean");
  return v->as_bool();
}

Arch parse_arch(const Json& root, const std::string& source, std::string& name_out) {
  const Json* archs = root.find("architectures");
  std::string name;
  if (archs != nullptr && archs->is_array() && !archs->items().empty() &&
      archs->items()[0].is_string()) {
    name = archs->items()[0].as_string();
  } else {
    const Json* mt = root.find("model_type");
    if (mt == nullptr || !mt->is_string()) refuse(source, "missing field 'architectures'");
    const std::string& t = mt->as_string();
    if (t == "llama") name = "LlamaForCausalLM";
    else if (t == "mistral") name = "MistralForCausalLM";
    else if (t == "qwen2") name = "Qwen2ForCausalLM";
    else if (t == "qwen3") name = "Qwen3ForCausalLM";
    else if (t == "mixtral") name = "MixtralForCausalLM";
    else if (t == "qwen2_moe") name = "Qwen2MoeForCausalLM";
    else if (t == "qwen3_moe") name = "Qwen3MoeForCausalLM";
    else {
      // A family we know and refuse says why, whichever field named it.
      const char* known = t == "gpt_oss" ? "GptOssForCausalLM" : t == "deepseek_v2" ? "DeepseekV2ForCausalLM" : t == "deepseek_v3" ? "DeepseekV3ForCausalLM" : nullptr;
      std::string family = known != nullptr ? unsupported_moe_family(root, known) : "";
      refuse(source, "unsupported field 'model_type'=" + t + (family.empty() ? "" : family.substr(family.find(':'))));
    }
  }
  name_out = name;
  if (name == "LlamaForCausalLM") return Arch::kLlama;
  if (name == "MistralForCausalLM") return Arch::kMistral;
  if (name == "Qwen2ForCausalLM") return Arch::kQwen2;
  if (name == "Qwen3ForCausalLM") return Arch::kQwen3;
  if (name == "MixtralForCausalLM") return Arch::kMixtral;
  if (name == "Qwen2MoeForCausalLM") return Arch::kQwen2Moe;
  if (name == "Qwen3MoeForCausalLM") return Arch::kQwen3Moe;
  if (std::string family = unsupported_moe_family(root, name); !family.empty()) refuse(source, family);
  refuse(source, "unsupported field 'architectures'=" + name +
                     " (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                     "Qwen3ForCausalLM, MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM)");
}

void refuse_sliding_window(const Json& root, Arch arch, const std::string& source) {
  const Json* sw = root.find("sliding_window");
  bool has_window = sw != nullptr && !sw->is_null() && !(sw->is_number() && sw->as_number() <= 0);
  if (arch == Arch::kQwen2 || arch == Arch::kQwen3 || arch == Arch::kQwen2Moe || arch == Arch::kQwen3Moe) {
    // Qwen configs carry a window size but only apply it when use_sliding_window is set.
    if (optional_bool(root, "use_sliding_window", false, source) && has_window) {
      refuse(source, "sliding window attention is not supported (field 'use_sliding_window'=true)");
    }
    return;
  }
  if (has_window) {
    refuse(source, "sliding window attention is not supported (field 'sliding_window' must be null)");
  }
}

// transformers' get_mscale: 0.1 * mscale * ln(scale) + 1 for scale > 1.
double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

RopeScaling parse_yarn(const Json& rs, int64_t max_position_embeddings, const std::string& source) {
  RopeScaling out;
  out.yarn = true;
  out.factor = optional_number(rs, "factor", 1.0, source);
  if (out.factor < 1.0) refuse(source, "field 'rope_scaling.factor' must be at least 1 for yarn");
  // Without it, transformers takes max_position_embeddings. With it, the factor stays the one
  // given (transformers >= 4.56; older releases replaced it by max_position_embeddings /
  // original_max_position_embeddings, which agrees whenever the config is consistent).
  out.original_max_position_embeddings =
      optional_number(rs, "original_max_position_embeddings", static_cast<double>(max_position_embeddings), source);
  // beta_* of 0 or null fall back as transformers' `or` does.
  out.beta_fast = optional_number(rs, "beta_fast", 0.0, source);
  if (out.beta_fast == 0) out.beta_fast = 32.0;
  out.beta_slow = optional_number(rs, "beta_slow", 0.0, source);
  if (out.beta_slow == 0) out.beta_slow = 1.0;
  out.truncate = optional_bool(rs, "truncate", true, source);
  const Json* af = rs.find("attention_factor");
  if (af != nullptr && !af->is_null()) {
    out.attention_factor = optional_number(rs, "attention_factor", 1.0, source);
  } else {
    const double mscale = optional_number(rs, "mscale", 0.0, source);
    const double mscale_all_dim = optional_number(rs, "mscale_all_dim", 0.0, source);
    out.attention_factor = mscale != 0 && mscale_all_dim != 0
                               ? yarn_mscale(out.factor, mscale) / yarn_mscale(out.factor, mscale_all_dim)
                               : yarn_mscale(out.factor, 1.0);
  }
  if (!(out.attention_factor > 0) || out.original_max_position_embeddings <= 0) {
    refuse(source, "field 'rope_scaling' has invalid yarn parameters");
  }
  return out;
}

RopeScaling parse_rope_scaling(const Json& root, int64_t max_position_embeddings, const std::string& source) {
  RopeScaling out;
  const Json* rs = root.find("rope_scaling");
  if (rs == nullptr || rs->is_null()) return out;
  if (!rs->is_object()) refuse(source, "field 'rope_scaling' must be an object or null");
  const Json* type = rs->find("rope_type");
  if (type == nullptr) type = rs->find("type");
  std::string t = (type != nullptr && type->is_string()) ? type->as_string() : "";
  if (t == "default") return out;
  if (t == "yarn") return parse_yarn(*rs, max_position_embeddings, source);
  if (t != "llama3") {
    refuse(source, "unsupported field 'rope_scaling.rope_type'='" + t + "' (supported: default, llama3, yarn)");
  }
  out.llama3 = true;
  out.factor = optional_number(*rs, "factor", 8.0, source);
  out.low_freq_factor = optional_number(*rs, "low_freq_factor", 1.0, source);
  out.high_freq_factor = optional_number(*rs, "high_freq_factor", 4.0, source);
  out.original_max_position_embeddings =
      optional_number(*rs, "original_max_position_embeddings", 8192, source);
  if (out.factor <= 0 || out.high_freq_factor <= out.low_freq_factor) {
    refuse(source, "field 'rope_scaling' has invalid llama3 factors");
  }
  return out;
}

}  // namespace

ModelConfig ModelConfig::from_json(const Json& root, const std::string& source) {
  if (!root.is_object()) refuse(source, "expected a JSON object");
  ModelConfig c;
  c.arch = parse_arch(root, source, c.architecture);
  refuse_sliding_window(root, c.arch, source);

  const Json* act = root.find("hidden_act");
  if (act != nullptr && act->is_string() && act->as_string() != "silu") {
    refuse(source, "unsupported field 'hidden_act'='" + act->as_string() + "' (supported: silu)");
  }
  if (optional_bool(root, "mlp_bias", false, source)) {
    refuse(source, "unsupported field 'mlp_bias'=true");
  }

  c.vocab_size = require_int(root, "vocab_size", source);
  c.hidden_size = require_int(root, "hidden_size", source);
  c.intermediate_size = require_int(root, "intermediate_size", source);
  c.num_layers = require_int(root, "num_hidden_layers", source);
  c.num_heads = require_int(root, "num_attention_heads", source);
  c.num_kv_heads = optional_int(root, "num_key_value_heads", c.num_heads, source);
  if (c.num_heads % c.num_kv_heads != 0) {
    refuse(source, "field 'num_key_value_heads' must divide 'num_attention_heads'");
  }
  int64_t default_head_dim = c.hidden_size / c.num_heads;
  c.head_dim = optional_int(root, "head_dim", default_head_dim, source);
  if (c.head_dim % 2 != 0) refuse(source, "field 'head_dim' must be even for RoPE");
  c.max_position_embeddings = optional_int(root, "max_position_embeddings", 4096, source);
  c.rope_theta = optional_number(root, "rope_theta", 10000.0, source);
  c.rms_norm_eps = optional_number(root, "rms_norm_eps", 1e-6, source);
  c.tie_word_embeddings = optional_bool(root, "tie_word_embeddings", false, source);
  c.rope_scaling = parse_rope_scaling(root, c.max_position_embeddings, source);
  parse_moe_config(root, c, source);
  // An FP8 mixture of experts loads its experts as the dense linear layers (fp8_weights.h); the
  // CUDA backend refuses it (GpuBackend::check_supported).
  c.quant = QuantConfig::from_json(root, source);

  bool attention_bias = optional_bool(root, "attention_bias", false, source);
  switch (c.arch) {
    case Arch::kQwen2:
      c.qkv_bias = true;
      break;
    case Arch::kQwen2Moe:
      c.qkv_bias = optional_bool(root, "qkv_bias", true, source);  // transformers 5 names it; always on before
      break;
    case Arch::kQwen3:
    case Arch::kQwen3Moe:
      c.qk_norm = true;
      c.qkv_bias = attention_bias;
      c.o_bias = attention_bias;
      break;
    case Arch::kLlama:
    case Arch::kMistral:
    case Arch::kMixtral:
      c.qkv_bias = attention_bias;
      c.o_bias = attention_bias;
      break;
  }

  const Json* eos = root.find("eos_token_id");
  if (eos != nullptr && eos->is_number()) {
    c.eos_token_ids.push_back(static_cast<int64_t>(eos->as_number()));
  } else if (eos != nullptr && eos->is_array()) {
    for (const Json& e : eos->items()) {
      if (e.is_number()) c.eos_token_ids.push_back(static_cast<int64_t>(e.as_number()));
    }
  }
  return c;
}

ModelConfig ModelConfig::load(const std::string& model_dir) {
  std::string path = model_dir + "/config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) throw NativeError(ErrorCode::kNotFound, path + ": file not found or unreadable");
  std::stringstream ss;
  ss << in.rdbuf();
  return from_json(Json::parse(ss.str(), path), path);
}

namespace {

// YaRN (transformers' _compute_yarn_parameters, in its f32/f64 mix): frequencies below the
// correction range are interpolated (divided by factor), those above kept, a linear ramp between.
std::vector<float> yarn_inv_freq(const ModelConfig& c, const std::vector<float>& extrapolation) {
  const RopeScaling& s = c.rope_scaling;
  const double dim = static_cast<double>(c.head_dim), base = c.rope_theta, pi = 3.14159265358979323846;
  auto correction_dim = [&](double rotations) {
    return dim * std::log(s.original_max_position_embeddings / (rotations * 2 * pi)) / (2 * std::log(base));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
  std::vector<float> out(extrapolation.size());
  for (size_t i = 0; i < out.size(); ++i) {
    // pos_freqs = base ** (arange(0, dim, 2).float() / dim) in f32; the ramp in f32 too.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(c.head_dim);
    const float pos_freq = std::pow(static_cast<float>(base), exponent);
    const float extra = 1.0f / pos_freq;
    const float inter = 1.0f / (static_cast<float>(s.factor) * pos_freq);
    float ramp = (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low);
    ramp = std::min(1.0f, std::max(0.0f, ramp));
    const float extra_factor = 1.0f - ramp;
    out[i] = inter * (1.0f - extra_factor) + extra * extra_factor;
  }
  return out;
}

}  // namespace

float rope_attention_scale(const ModelConfig& c) {
  return c.rope_scaling.yarn ? static_cast<float>(c.rope_scaling.attention_factor) : 1.0f;
}

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  const int64_t half = c.head_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    // HF: 1 / base ** (arange(0, dim, 2).float() / dim), all in f32.
    float exponent = static_cast<float>(2 * i) / static_cast<float>(c.head_dim);
    inv[static_cast<size_t>(i)] =
        1.0f / std::pow(static_cast<float>(c.rope_theta), exponent);
  }
  if (c.rope_scaling.yarn) return yarn_inv_freq(c, inv);
  if (!c.rope_scaling.llama3) return inv;
  const RopeScaling& s = c.rope_scaling;
  const double pi = 3.14159265358979323846;
  const double low_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
  const double high_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
  for (auto& f : inv) {
    float wavelen = static_cast<float>(2 * pi) / f;
    float scaled = wavelen > low_wavelen ? f / static_cast<float>(s.factor) : f;
    bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    if (medium) {
      float smooth = static_cast<float>((s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                                        (s.high_freq_factor - s.low_freq_factor));
      scaled = (1 - smooth) * scaled / static_cast<float>(s.factor) + smooth * scaled;
    }
    f = scaled;
  }
  return inv;
}

}  // namespace tandem
