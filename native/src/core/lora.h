// LoRA adapters as data: the low-rank A/B factors of a PEFT adapter, in f32, per layer and
// target module. The adapter's config (rank, alpha, rsLoRA, targets) is parsed and checked on
// the TypeScript side (workers/lora/peft-adapter.ts), which hands the result over as a
// LoraSpec; this file reads and shape-checks the tensors. Backends keep adapters in slots and
// apply them per sequence group inside one forward pass (no weight merging).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model_config.h"

namespace tandem {

/** The linear layers an adapter may target, in a fixed order. */
enum class LoraTarget : int { kQ = 0, kK, kV, kO, kGate, kUp, kDown };
constexpr int kNumLoraTargets = 7;

/** PEFT module name of a target ("q_proj", ...). */
const char* lora_target_module(LoraTarget t);
/** in/out features of a target's base weight for this model. */
void lora_target_dims(const ModelConfig& c, LoraTarget t, int64_t& in_features, int64_t& out_features);

struct LoraSpec {
  std::string dir;
  int32_t rank = 0;
  float scale = 0;          // alpha / rank, or alpha / sqrt(rank) with rsLoRA
  std::vector<LoraTarget> targets;
};

/**
 * One target of one layer, row-major f32: A as in the file, [rank][in]; B transposed at load,
 * [rank][out], so the expand is `rank` contiguous axpys over the output row.
 */
struct LoraFactor {
  std::vector<float> a, bt;
  bool empty() const { return a.empty(); }
};

struct LoraAdapter {
  int32_t rank = 0;
  float scale = 0;
  std::vector<std::array<LoraFactor, kNumLoraTargets>> layers;  // [layer][target]
  size_t num_parameters = 0;
};

/**
 * Reads `adapter_model.safetensors` (any *.safetensors in spec.dir) and checks every factor's
 * presence and shape against the model before converting any of them. Tensor names are PEFT's:
 * `base_model.model.model.layers.{l}.{self_attn|mlp}.{q_proj..down_proj}.lora_{A|B}.weight`.
 * Missing -> not_found, wrong shape or a file that is not a regular one -> config_invalid.
 */
std::shared_ptr<const LoraAdapter> load_lora_adapter(const LoraSpec& spec, const ModelConfig& config);

}  // namespace tandem
