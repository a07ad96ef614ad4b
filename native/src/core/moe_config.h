// Mixture-of-experts: the config fields of the three families the runner computes (Mixtral,
// Qwen2-MoE with its shared expert, Qwen3-MoE), which layers are sparse, and where each expert's
// tensors live in a checkpoint. A model is a layer plan over one Backend: each layer's MLP is
// dense (gate/up/down) or a MoE block (router -> softmax -> top-k -> the chosen experts' SwiGLU
// MLPs, weighted and summed; plus, for Qwen2-MoE, sigmoid(gate . x) x a shared expert).
//
// Routing, as transformers computes it (all three families):
//   p = softmax(x . Wr^T) in f32 over the experts; (w, ids) = torch.topk(p, k) (ties: see
//   moe_route in cpu/moe.h); w /= sum(w) when norm_topk_prob (Mixtral always).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

class Json;
class SafetensorsStore;
struct ModelConfig;
struct TensorView;

/** Most experts a token may choose (num_experts_per_tok); real models use 1 to 8. */
inline constexpr int64_t kMaxTopK = 64;

/** How a checkpoint names its experts' tensors. */
enum class ExpertNaming {
  kQwen,     // mlp.gate.weight, mlp.experts.N.{gate,up,down}_proj.weight
  kMixtral,  // block_sparse_moe.gate.weight, block_sparse_moe.experts.N.{w1,w3,w2}.weight
};

struct MoeConfig {
  int64_t num_experts = 0;          // 0: dense model
  int64_t top_k = 0;                // num_experts_per_tok
  int64_t expert_intermediate = 0;  // each expert's width (moe_intermediate_size; Mixtral: intermediate_size)
  bool norm_topk_prob = false;      // renormalize the top-k probabilities (Mixtral: always)
  int64_t shared_intermediate = 0;  // Qwen2-MoE shared_expert_intermediate_size; 0: no shared expert
  int64_t decoder_sparse_step = 1;  // Qwen: layer l is sparse when (l + 1) % step == 0 ...
  std::vector<int64_t> mlp_only_layers;  // ... and l is not listed here
  ExpertNaming naming = ExpertNaming::kQwen;

  bool enabled() const { return num_experts > 0; }
  bool is_moe_layer(int64_t layer) const;
};

/**
 * Reads the MoE fields of a MoE architecture (is_moe_arch) into c.moe; for any other
 * architecture refuses MoE fields, naming the field. Other MoE families (DeepSeek's MLA and
 * grouped top-k, gpt-oss's sinks and MXFP4) are refused by architecture with their fields named.
 */
void parse_moe_config(const Json& root, ModelConfig& c, const std::string& source);

/** Names the field of an unsupported MoE family's architecture, or returns "" (not one of them). */
std::string unsupported_moe_family(const Json& root, const std::string& architecture);

// ---- expert tensors -----------------------------------------------------------------------

/** Where one MoE layer's expert weights are: the published per-expert tensors, or transformers 5's fused 3-D ones. */
enum class ExpertLayout { kPerExpert, kFused };

/** Row-major [rows][cols] views into the mapped checkpoint (valid while the store lives). */
struct ExpertViews {
  const TensorView* gate = nullptr;  // [expert_intermediate][hidden]
  const TensorView* up = nullptr;    // [expert_intermediate][hidden]
  const TensorView* down = nullptr;  // [hidden][expert_intermediate]
};

/** One MoE layer's tensors, checked for presence and shape (missing: not_found; wrong shape: config_invalid). */
class MoeLayerTensors {
 public:
  MoeLayerTensors(const ModelConfig& c, const SafetensorsStore& w, int64_t layer);
  MoeLayerTensors(const MoeLayerTensors&) = delete;  // the views point into slices_
  MoeLayerTensors& operator=(const MoeLayerTensors&) = delete;
  MoeLayerTensors(MoeLayerTensors&&) = default;
  ExpertLayout layout() const { return layout_; }
  const TensorView& router() const { return *router_; }  // [num_experts][hidden]
  ExpertViews expert(int64_t e) const;
  /** Qwen2-MoE shared expert ([shared][hidden] x2, [hidden][shared]) and its gate ([1][hidden]); null without. */
  ExpertViews shared() const { return shared_; }
  const TensorView* shared_gate() const { return shared_gate_; }

 private:
  ExpertLayout layout_ = ExpertLayout::kPerExpert;
  const TensorView* router_ = nullptr;
  std::vector<ExpertViews> experts_;
  std::vector<TensorView> slices_;  // fused layout: one view per expert and projection
  ExpertViews shared_;
  const TensorView* shared_gate_ = nullptr;
};

/** Parameters of the model and those one token reads (the router, top_k experts and any shared expert per MoE layer). */
struct ParamCounts {
  int64_t total = 0;
  int64_t active = 0;
};
ParamCounts count_params(const ModelConfig& c);

}  // namespace tandem
