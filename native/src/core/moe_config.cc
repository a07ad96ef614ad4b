#include "moe_config.h"

#include <cmath>

#include "backend.h"
#include "error.h"
#include "json.h"
#include "model_config.h"
#include "safetensors.h"

namespace tandem {
namespace {

[[noreturn]] void refuse(const std::string& source, const std::string& what) {
  throw NativeError(ErrorCode::kConfigInvalid, source + ": " + what);
}

bool is_moe_arch(Arch a) { return a == Arch::kMixtral || a == Arch::kQwen2Moe || a == Arch::kQwen3Moe; }

int64_t positive_int(const Json& root, const char* key, const std::string& source, int64_t fallback = -1) {
  const Json* v = root.find(key);
  if (v == nullptr || v->is_null()) {
    if (fallback >= 0) return fallback;
    refuse(source, std::string("missing field '") + key + "'");
  }
  if (!v->is_number() || v->as_number() != std::floor(v->as_number()) || v->as_number() <= 0) {
    refuse(source, std::string("field '") + key + "' must be a positive integer");
  }
  return static_cast<int64_t>(v->as_number());
}

bool flag(const Json& root, const char* key, bool fallback, const std::string& source) {
  const Json* v = root.find(key);
  if (v == nullptr || v->is_null()) return fallback;
  if (!v->is_bool()) refuse(source, std::string("field '") + key + "' must be a boolean");
  return v->as_bool();
}

// Fields of MoE routing schemes this runner does not compute (DeepSeek's grouped top-k and
// scoring functions, routed scaling): refused by name wherever they appear.
void refuse_other_routing(const Json& root, const std::string& source) {
  for (const char* key : {"n_group", "topk_group", "n_routed_experts", "routed_scaling_factor", "scoring_func",
                          "topk_method", "moe_layer_freq", "first_k_dense_replace"}) {
    const Json* v = root.find(key);
    if (v != nullptr && !v->is_null()) {
      refuse(source, std::string("mixture-of-experts routing of field '") + key + "' is not supported");
    }
  }
}

}  // namespace

bool MoeConfig::is_moe_layer(int64_t layer) const {
  if (num_experts <= 0) return false;
  for (int64_t l : mlp_only_layers) {
    if (l == layer) return false;
  }
  return (layer + 1) % decoder_sparse_step == 0;
}

std::string unsupported_moe_family(const Json& root, const std::string& arch) {
  (void)root;
  if (arch == "DeepseekV2ForCausalLM" || arch == "DeepseekV3ForCausalLM") {
    return "unsupported field 'architectures'=" + arch +
           ": multi-head latent attention (field 'kv_lora_rank') and grouped top-k routing (fields 'n_group', "
           "'topk_group') are not built";
  }
  if (arch == "GptOssForCausalLM") {
    return "unsupported field 'architectures'=" + arch +
           ": attention sinks (the 'sinks' tensors) and MXFP4 experts (field 'quantization_config') are not built";
  }
  return "";
}

void parse_moe_config(const Json& root, ModelConfig& c, const std::string& source) {
  MoeConfig& m = c.moe;
  m = MoeConfig{};
  if (!is_moe_arch(c.arch)) {
    for (const char* key : {"num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size"}) {
      const Json* v = root.find(key);
      if (v != nullptr && v->is_number() && v->as_number() > 0) {
        refuse(source, "mixture-of-experts is not supported for " + c.architecture + " (field '" + key + "')");
      }
    }
    return;
  }
  refuse_other_routing(root, source);
  if (c.arch == Arch::kMixtral) {
    m.naming = ExpertNaming::kMixtral;
    m.num_experts = positive_int(root, "num_local_experts", source);
    m.expert_intermediate = positive_int(root, "intermediate_size", source);
    m.norm_topk_prob = true;  // MixtralSparseMoeBlock always renormalizes the top-k weights
  } else {
    m.naming = ExpertNaming::kQwen;
    m.num_experts = positive_int(root, "num_experts", source);
    m.expert_intermediate = positive_int(root, "moe_intermediate_size", source);
    m.norm_topk_prob = flag(root, "norm_topk_prob", false, source);
    m.decoder_sparse_step = positive_int(root, "decoder_sparse_step", source, 1);
    if (const Json* only = root.find("mlp_only_layers"); only != nullptr && !only->is_null()) {
      if (!only->is_array()) refuse(source, "field 'mlp_only_layers' must be an array of layer indices");
      for (const Json& v : only->items()) {
        if (!v.is_number() || v.as_number() != std::floor(v.as_number()) || v.as_number() < 0) {
          refuse(source, "field 'mlp_only_layers' must hold non-negative integers");
        }
        m.mlp_only_layers.push_back(static_cast<int64_t>(v.as_number()));
      }
    }
    if (c.arch == Arch::kQwen2Moe) {
      m.shared_intermediate = positive_int(root, "shared_expert_intermediate_size", source);
    } else if (const Json* s = root.find("shared_expert_intermediate_size"); s != nullptr && s->is_number() && s->as_number() > 0) {
      refuse(source, "field 'shared_expert_intermediate_size' is not supported for " + c.architecture);
    }
  }
  m.top_k = positive_int(root, "num_experts_per_tok", source);
  if (m.top_k > kMaxTopK) {
    refuse(source, "field 'num_experts_per_tok' (" + std::to_string(m.top_k) + ") is more than the " +
                       std::to_string(kMaxTopK) + " supported");
  }
  if (m.top_k > m.num_experts) {
    refuse(source, "field 'num_experts_per_tok' (" + std::to_string(m.top_k) + ") exceeds the " +
                       std::to_string(m.num_experts) + " experts");
  }
}

// ---- expert tensors -----------------------------------------------------------------------

MoeLayerTensors::MoeLayerTensors(const ModelConfig& c, const SafetensorsStore& w, int64_t l) {
  const MoeConfig& m = c.moe;
  const int64_t h = c.hidden_size, inter = m.expert_intermediate, e_count = m.num_experts;
  const bool mixtral = m.naming == ExpertNaming::kMixtral;
  const std::string block = layer_tensor(l, mixtral ? "block_sparse_moe." : "mlp.");
  // transformers 5 keeps experts fused in memory (mlp.experts.gate_up_proj [E][2I][H] with gate
  // rows first, mlp.experts.down_proj [E][H][I]); its save_pretrained writes the published
  // per-expert names back, but a fused checkpoint is read as well.
  const std::string fused = layer_tensor(l, "mlp.experts.gate_up_proj");
  const std::string router_name = w.find(fused) != nullptr ? layer_tensor(l, "mlp.gate.weight") : block + "gate.weight";
  router_ = &w.require(router_name, {e_count, h});
  experts_.resize(static_cast<size_t>(e_count));
  if (w.find(fused) != nullptr) {
    layout_ = ExpertLayout::kFused;
    const TensorView& gu = w.require(fused, {e_count, 2 * inter, h});
    const TensorView& down = w.require(layer_tensor(l, "mlp.experts.down_proj"), {e_count, h, inter});
    const size_t elem = gu.dtype == DType::kF32 ? 4 : 2;
    const size_t down_elem = down.dtype == DType::kF32 ? 4 : 2;
    slices_.reserve(static_cast<size_t>(3 * e_count));  // stable addresses for the pointers below
    for (int64_t e = 0; e < e_count; ++e) {
      auto slice = [&](const TensorView& t, size_t bytes_per, int64_t first_elem, int64_t rows, int64_t cols) {
        TensorView v = t;
        v.shape = {rows, cols};
        v.data = t.data + static_cast<size_t>(first_elem) * bytes_per;
        slices_.push_back(v);
        return &slices_.back();
      };
      ExpertViews& x = experts_[static_cast<size_t>(e)];
      x.gate = slice(gu, elem, e * 2 * inter * h, inter, h);
      x.up = slice(gu, elem, e * 2 * inter * h + inter * h, inter, h);
      x.down = slice(down, down_elem, e * h * inter, h, inter);
    }
  } else {
    for (int64_t e = 0; e < e_count; ++e) {
      const std::string p = block + "experts." + std::to_string(e) + ".";
      ExpertViews& x = experts_[static_cast<size_t>(e)];
      x.gate = &w.require(p + (mixtral ? "w1.weight" : "gate_proj.weight"), {inter, h});
      x.up = &w.require(p + (mixtral ? "w3.weight" : "up_proj.weight"), {inter, h});
      x.down = &w.require(p + (mixtral ? "w2.weight" : "down_proj.weight"), {h, inter});
    }
  }
  if (m.shared_intermediate > 0) {
    const int64_t s = m.shared_intermediate;
    shared_.gate = &w.require(layer_tensor(l, "mlp.shared_expert.gate_proj.weight"), {s, h});
    shared_.up = &w.require(layer_tensor(l, "mlp.shared_expert.up_proj.weight"), {s, h});
    shared_.down = &w.require(layer_tensor(l, "mlp.shared_expert.down_proj.weight"), {h, s});
    shared_gate_ = &w.require(layer_tensor(l, "mlp.shared_expert_gate.weight"), {1, h});
  }
}

ExpertViews MoeLayerTensors::expert(int64_t e) const { return experts_[static_cast<size_t>(e)]; }

ParamCounts count_params(const ModelConfig& c) {
  const int64_t h = c.hidden_size;
  const int64_t attn = h * (c.q_dim() + 2 * c.kv_dim()) + c.q_dim() * h + 2 * h;
  const int64_t embed = c.vocab_size * h * (c.tie_word_embeddings ? 1 : 2) + h;
  ParamCounts p{embed, embed};
  for (int64_t l = 0; l < c.num_layers; ++l) {
    p.total += attn;
    p.active += attn;
    if (!c.moe.is_moe_layer(l)) {
      p.total += 3 * h * c.intermediate_size;
      p.active += 3 * h * c.intermediate_size;
      continue;
    }
    const MoeConfig& m = c.moe;
    const int64_t expert = 3 * h * m.expert_intermediate, router = m.num_experts * h;
    const int64_t shared = m.shared_intermediate > 0 ? 3 * h * m.shared_intermediate + h : 0;
    p.total += router + m.num_experts * expert + shared;
    p.active += router + m.top_k * expert + shared;
  }
  return p;
}

}  // namespace tandem
