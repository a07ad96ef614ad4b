#include "model_config.h"

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
    else refuse(source, "unsupported field 'model_type'=" + t);
  }
  name_out = name;
  if (name == "LlamaForCausalLM") return Arch::kLlama;
  if (name == "MistralForCausalLM") return Arch::kMistral;
  if (name == "Qwen2ForCausalLM") return Arch::kQwen2;
  if (name == "Qwen3ForCausalLM") return Arch::kQwen3;
  refuse(source, "unsupported field 'architectures'=" + name +
                     " (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                     "Qwen3ForCausalLM)");
}

void refuse_moe(const Json& root, const std::string& source) {
  for (const char* key : {"num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size"}) {
    const Json* v = root.find(key);
    if (v != nullptr && v->is_number() && v->as_number() > 0) {
      refuse(source, std::string("mixture-of-experts is not supported (field '") + key + "')");
    }
  }
}

void refuse_sliding_window(const Json& root, Arch arch, const std::string& source) {
  const Json* sw = root.find("sliding_window");
  bool has_window = sw != nullptr && !sw->is_null() && !(sw->is_number() && sw->as_number() <= 0);
  if (arch == Arch::kQwen2 || arch == Arch::kQwen3) {
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

RopeScaling parse_rope_scaling(const Json& root, const std::string& source) {
  RopeScaling out;
  const Json* rs = root.find("rope_scaling");
  if (rs == nullptr || rs->is_null()) return out;
  if (!rs->is_object()) refuse(source, "field 'rope_scaling' must be an object or null");
  const Json* type = rs->find("rope_type");
  if (type == nullptr) type = rs->find("type");
  std::string t = (type != nullptr && type->is_string()) ? type->as_string() : "";
  if (t == "default") return out;
  if (t != "llama3") {
    refuse(source, "unsupported field 'rope_scaling.rope_type'='" + t + "' (supported: default, llama3)");
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
  refuse_moe(root, source);
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
  c.rope_scaling = parse_rope_scaling(root, source);
  c.quant = QuantConfig::from_json(root, source);

  bool attention_bias = optional_bool(root, "attention_bias", false, source);
  switch (c.arch) {
    case Arch::kQwen2:
      c.qkv_bias = true;
      break;
    case Arch::kQwen3:
      c.qk_norm = true;
      c.qkv_bias = attention_bias;
      c.o_bias = attention_bias;
      break;
    case Arch::kLlama:
    case Arch::kMistral:
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

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  const int64_t half = c.head_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    // HF: 1 / base ** (arange(0, dim, 2).float() / dim), all in f32.
    float exponent = static_cast<float>(2 * i) / static_cast<float>(c.head_dim);
    inv[static_cast<size_t>(i)] =
        1.0f / std::pow(static_cast<float>(c.rope_theta), exponent);
  }
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
