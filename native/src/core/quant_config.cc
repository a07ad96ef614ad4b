#include "quant_config.h"

#include <cmath>
#include <regex>

#include "error.h"
#include "json.h"

namespace tandem {
namespace {

[[noreturn]] void refuse(const std::string& source, const std::string& what) {
  throw NativeError(ErrorCode::kConfigInvalid, source + ": " + what);
}

std::string quoted(const Json& v) {
  if (v.is_string()) return "'" + v.as_string() + "'";
  if (v.is_number()) {
    const double d = v.as_number();
    return d == std::floor(d) && std::fabs(d) < 1e15 ? std::to_string(static_cast<int64_t>(d)) : std::to_string(d);
  }
  if (v.is_bool()) return v.as_bool() ? "true" : "false";
  if (v.is_null()) return "null";
  return v.is_array() ? "[...]" : "{...}";
}

[[noreturn]] void unsupported(const std::string& source, const std::string& field, const Json& v, const std::string& supported) {
  refuse(source, "unsupported field '" + field + "'=" + quoted(v) + " (supported: " + supported + ")");
}

const Json* member(const Json& obj, const char* key) {
  const Json* v = obj.find(key);
  return v == nullptr || v->is_null() ? nullptr : v;
}

std::string string_field(const Json& obj, const char* key, const std::string& field, const std::string& source,
                         const std::string& fallback) {
  const Json* v = member(obj, key);
  if (v == nullptr) return fallback;
  if (!v->is_string()) refuse(source, "field '" + field + "' must be a string");
  return v->as_string();
}

void read_names(const Json& obj, const char* key, const std::string& prefix, const std::string& source,
                std::vector<std::string>& out) {
  const Json* v = member(obj, key);
  if (v == nullptr) return;
  if (!v->is_array()) refuse(source, "field '" + prefix + key + "' must be a list of module names");
  for (const Json& n : v->items()) {
    if (!n.is_string()) refuse(source, "field '" + prefix + key + "' must be a list of module names");
    out.push_back(n.as_string());
  }
}

/** [rows, cols] of a 2-element list of positive integers, else refused naming the field. */
void block_shape(const Json& v, const std::string& field, const std::string& source, int64_t& n, int64_t& k) {
  if (!v.is_array() || v.items().size() != 2) refuse(source, "field '" + field + "' must be [rows, cols]");
  int64_t out[2];
  for (int i = 0; i < 2; ++i) {
    const Json& d = v.items()[static_cast<size_t>(i)];
    if (!d.is_number() || d.as_number() < 1 || d.as_number() != std::floor(d.as_number()) || d.as_number() > 65536) {
      refuse(source, "field '" + field + "' must be [rows, cols] of positive integers");
    }
    out[i] = static_cast<int64_t>(d.as_number());
  }
  n = out[0];
  k = out[1];
}

void parse_fp8(const Json& q, const std::string& source, QuantConfig& c) {
  const std::string p = "quantization_config.";
  if (const Json* fmt = member(q, "fmt"); fmt != nullptr && !(fmt->is_string() && fmt->as_string() == "e4m3")) {
    unsupported(source, p + "fmt", *fmt, "e4m3");
  }
  const std::string scheme = string_field(q, "activation_scheme", p + "activation_scheme", source, "dynamic");
  if (scheme != "dynamic" && scheme != "static") unsupported(source, p + "activation_scheme", *q.find("activation_scheme"), "dynamic, static");
  if (const Json* bs = member(q, "weight_block_size"); bs != nullptr) {
    block_shape(*bs, p + "weight_block_size", source, c.block_n, c.block_k);
    c.weights = WeightScaling::kBlock;
    if (scheme != "dynamic") {
      refuse(source, "unsupported field '" + p + "activation_scheme'='static' with 'weight_block_size' (block-scaled weights take dynamic activations)");
    }
    c.activations = ActQuant::kDynamicGroup;
  } else {
    c.weights = WeightScaling::kTensor;
    c.activations = scheme == "static" ? ActQuant::kStaticTensor : ActQuant::kDynamicToken;
  }
  read_names(q, "ignored_layers", p, source, c.ignore);
  read_names(q, "modules_to_not_convert", p, source, c.ignore);
}

void check_float8(const Json& args, const std::string& field, const std::string& source) {
  const Json* bits = member(args, "num_bits");
  if (bits == nullptr || !bits->is_number() || bits->as_number() != 8) {
    unsupported(source, field + ".num_bits", bits != nullptr ? *bits : Json(), "8");
  }
  const Json* type = member(args, "type");
  if (type == nullptr || !type->is_string() || type->as_string() != "float") {
    unsupported(source, field + ".type", type != nullptr ? *type : Json(), "float");
  }
}

bool dynamic_flag(const Json& args, const std::string& field, const std::string& source) {
  const Json* d = member(args, "dynamic");
  if (d == nullptr) return false;
  if (!d->is_bool()) unsupported(source, field + ".dynamic", *d, "true, false");
  return d->as_bool();
}

void parse_compressed_tensors(const Json& q, const std::string& source, QuantConfig& c) {
  const std::string p = "quantization_config.";
  const Json* groups = member(q, "config_groups");
  if (groups == nullptr || !groups->is_object() || groups->members().empty()) refuse(source, "missing field '" + p + "config_groups'");
  if (groups->members().size() != 1) {
    refuse(source, "unsupported field '" + p + "config_groups' with " + std::to_string(groups->members().size()) +
                       " groups (supported: one group for every Linear layer)");
  }
  const auto& [gname, group] = groups->members()[0];
  const std::string g = p + "config_groups." + gname;
  // The format is global, or per group in newer checkpoints.
  const Json* fmt = member(group, "format");
  if (fmt == nullptr) fmt = member(q, "format");
  if (fmt == nullptr) refuse(source, "missing field '" + p + "format'");
  if (!fmt->is_string() || fmt->as_string() != "float-quantized") {
    unsupported(source, member(group, "format") != nullptr ? g + ".format" : p + "format", *fmt, "float-quantized");
  }
  const Json* targets = member(group, "targets");
  bool linear = false;
  if (targets != nullptr && targets->is_array()) {
    for (const Json& t : targets->items()) linear = linear || (t.is_string() && t.as_string() == "Linear");
  }
  if (!linear) refuse(source, "unsupported field '" + g + ".targets' (supported: [\"Linear\"])");

  const Json* w = member(group, "weights");
  if (w == nullptr || !w->is_object()) refuse(source, "missing field '" + g + ".weights'");
  check_float8(*w, g + ".weights", source);
  if (dynamic_flag(*w, g + ".weights", source)) refuse(source, "unsupported field '" + g + ".weights.dynamic'=true");
  const std::string ws = string_field(*w, "strategy", g + ".weights.strategy", source, "");
  if (ws == "channel") {
    c.weights = WeightScaling::kChannel;
  } else if (ws == "tensor") {
    c.weights = WeightScaling::kTensor;
  } else if (ws == "block") {
    const Json* bs = member(*w, "block_structure");
    if (bs == nullptr) refuse(source, "missing field '" + g + ".weights.block_structure'");
    block_shape(*bs, g + ".weights.block_structure", source, c.block_n, c.block_k);
    c.weights = WeightScaling::kBlock;
  } else {
    unsupported(source, g + ".weights.strategy", member(*w, "strategy") != nullptr ? *w->find("strategy") : Json(),
                "channel, tensor, block");
  }

  const Json* a = member(group, "input_activations");
  if (a == nullptr) {
    c.activations = ActQuant::kNone;  // weight-only FP8 (W8A16)
  } else {
    if (!a->is_object()) refuse(source, "field '" + g + ".input_activations' must be an object or null");
    check_float8(*a, g + ".input_activations", source);
    const bool dyn = dynamic_flag(*a, g + ".input_activations", source);
    const std::string as = string_field(*a, "strategy", g + ".input_activations.strategy", source, "");
    if (dyn && as == "token") {
      c.activations = ActQuant::kDynamicToken;
    } else if (!dyn && as == "tensor") {
      c.activations = ActQuant::kStaticTensor;
    } else if (dyn && as == "group" && c.weights == WeightScaling::kBlock) {
      const Json* gs = member(*a, "group_size");
      if (gs == nullptr || !gs->is_number() || gs->as_number() != static_cast<double>(c.block_k)) {
        refuse(source, "unsupported field '" + g + ".input_activations.group_size' (must equal the weights' block columns, " +
                           std::to_string(c.block_k) + ")");
      }
      c.activations = ActQuant::kDynamicGroup;
    } else {
      refuse(source, "unsupported field '" + g + ".input_activations.strategy'='" + as + "' with dynamic " +
                         (dyn ? "true" : "false") + " (supported: token with dynamic true, tensor with dynamic false" +
                         (c.weights == WeightScaling::kBlock ? ", group with dynamic true" : "") + ")");
    }
  }
  if (member(group, "output_activations") != nullptr) refuse(source, "unsupported field '" + g + ".output_activations'");
  read_names(q, "ignore", p, source, c.ignore);

  if (const Json* kv = member(q, "kv_cache_scheme"); kv != nullptr) {
    if (!kv->is_object()) refuse(source, "field '" + p + "kv_cache_scheme' must be an object or null");
    check_float8(*kv, p + "kv_cache_scheme", source);
    const std::string ks = string_field(*kv, "strategy", p + "kv_cache_scheme.strategy", source, "tensor");
    if (ks != "tensor" || dynamic_flag(*kv, p + "kv_cache_scheme", source)) {
      refuse(source, "unsupported field '" + p + "kv_cache_scheme' (supported: static per-tensor k_scale / v_scale)");
    }
    c.kv_cache_scales = true;
  }
}

void parse_fbgemm(const Json& q, const std::string& source, QuantConfig& c) {
  const std::string p = "quantization_config.";
  c.weights = WeightScaling::kChannel;
  c.activations = ActQuant::kDynamicToken;
  c.act_scale_ub = 1200.0f;  // transformers' FbgemmFp8Config default
  if (const Json* ub = member(q, "activation_scale_ub"); ub != nullptr) {
    if (!ub->is_number() || !(ub->as_number() > 0)) refuse(source, "field '" + p + "activation_scale_ub' must be a positive number");
    c.act_scale_ub = static_cast<float>(ub->as_number());
  }
  read_names(q, "modules_to_not_convert", p, source, c.ignore);
}

}  // namespace

QuantConfig QuantConfig::from_json(const Json& root, const std::string& source) {
  QuantConfig c;
  const Json* q = member(root, "quantization_config");
  if (q == nullptr) return c;
  if (!q->is_object()) refuse(source, "field 'quantization_config' must be an object or null");
  const Json* m = member(*q, "quant_method");
  if (m == nullptr) refuse(source, "missing field 'quantization_config.quant_method'");
  const std::string kSupported = "fp8, compressed-tensors, fbgemm_fp8";
  if (!m->is_string()) unsupported(source, "quantization_config.quant_method", *m, kSupported);
  const std::string& name = m->as_string();
  if (name == "fp8") {
    c.method = QuantMethod::kFp8;
    parse_fp8(*q, source, c);
  } else if (name == "compressed-tensors") {
    c.method = QuantMethod::kCompressedTensors;
    parse_compressed_tensors(*q, source, c);
  } else if (name == "fbgemm_fp8") {
    c.method = QuantMethod::kFbgemmFp8;
    parse_fbgemm(*q, source, c);
  } else {
    unsupported(source, "quantization_config.quant_method", *m, kSupported);
  }
  return c;
}

QuantConfig QuantConfig::on_load_fp8() {
  QuantConfig c;
  c.method = QuantMethod::kOnLoad;
  c.weights = WeightScaling::kChannel;
  c.activations = ActQuant::kDynamicToken;
  return c;
}

bool QuantConfig::ignores(const std::string& module) const {
  for (const std::string& pattern : ignore) {
    if (pattern.rfind("re:", 0) == 0) {
      // compressed-tensors matches "re:" patterns with Python's re.match: anchored at the start only.
      try {
        if (std::regex_search(module, std::regex(pattern.substr(3)), std::regex_constants::match_continuous)) return true;
      } catch (const std::regex_error&) {
        throw NativeError(ErrorCode::kConfigInvalid, "quantization_config ignore pattern '" + pattern + "' is not a valid regex");
      }
    } else if (module == pattern || (module.size() > pattern.size() && module.compare(0, pattern.size() + 1, pattern + ".") == 0)) {
      return true;  // the module itself, or a module inside an ignored one ("model.layers.0.mlp")
    }
  }
  return false;
}

std::string QuantConfig::describe() const {
  if (method == QuantMethod::kNone) return "none";
  if (dequantize) return "none (the FP8 checkpoint dequantized at load)";
  std::string s = method == QuantMethod::kFp8                ? "fp8"
                  : method == QuantMethod::kCompressedTensors ? "compressed-tensors fp8"
                  : method == QuantMethod::kFbgemmFp8         ? "fbgemm_fp8"
                                                              : "fp8 (quantized at load)";
  s += weights == WeightScaling::kBlock     ? " weights per " + std::to_string(block_n) + "x" + std::to_string(block_k) + " block"
       : weights == WeightScaling::kChannel ? " weights per channel"
                                            : " weights per tensor";
  switch (activations) {
    case ActQuant::kNone: s += ", activations bf16 (weight-only)"; break;
    case ActQuant::kDynamicToken: s += ", activations dynamic per token"; break;
    case ActQuant::kDynamicGroup: s += ", activations dynamic per token and " + std::to_string(block_k) + "-column group"; break;
    case ActQuant::kStaticTensor: s += ", activations static per tensor"; break;
  }
  if (act_scale_ub > 0) s += " (amax <= " + std::to_string(static_cast<int>(act_scale_ub)) + ")";
  return s;
}

void apply_quantization_option(QuantConfig& config, const std::string& option) {
  if (option.empty()) return;
  if (option == "fp8") {
    if (!config.quantized()) config = QuantConfig::on_load_fp8();
    return;
  }
  if (option == "none") {
    config.dequantize = true;
    return;
  }
  throw NativeError(ErrorCode::kInvalidArgument, "quantization '" + option + "' (expected fp8 or none)");
}

}  // namespace tandem
