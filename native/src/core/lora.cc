#include "lora.h"

#include "backend.h"
#include "error.h"
#include "safetensors.h"

namespace tandem {

const char* lora_target_module(LoraTarget t) {
  static const char* const kNames[kNumLoraTargets] = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                      "gate_proj", "up_proj", "down_proj"};
  return kNames[static_cast<int>(t)];
}

void lora_target_dims(const ModelConfig& c, LoraTarget t, int64_t& in, int64_t& out) {
  switch (t) {
    case LoraTarget::kQ: in = c.hidden_size; out = c.q_dim(); return;
    case LoraTarget::kK:
    case LoraTarget::kV: in = c.hidden_size; out = c.kv_dim(); return;
    case LoraTarget::kO: in = c.q_dim(); out = c.hidden_size; return;
    case LoraTarget::kGate:
    case LoraTarget::kUp: in = c.hidden_size; out = c.intermediate_size; return;
    case LoraTarget::kDown: in = c.intermediate_size; out = c.hidden_size; return;
  }
}

namespace {

std::string lora_tensor_base(int64_t layer, LoraTarget t) {
  const bool attn = t == LoraTarget::kQ || t == LoraTarget::kK || t == LoraTarget::kV || t == LoraTarget::kO;
  return "base_model.model.model.layers." + std::to_string(layer) + (attn ? ".self_attn." : ".mlp.") + lora_target_module(t);
}

}  // namespace

std::shared_ptr<const LoraAdapter> load_lora_adapter(const LoraSpec& spec, const ModelConfig& config) {
  if (spec.rank <= 0) throw NativeError(ErrorCode::kInvalidArgument, "lora: rank must be > 0");
  if (spec.targets.empty()) throw NativeError(ErrorCode::kInvalidArgument, "lora: no target modules");
  auto store = SafetensorsStore::open_dir(spec.dir);
  const int64_t r = spec.rank;
  // Every factor's presence and shape first: a file that does not fit (or was swapped since
  // the TypeScript side read it) is refused before a byte of f32 is allocated, so a failed
  // load holds no memory. The f32 total is then bounded by the model's shapes and the rank.
  struct Pair {
    const TensorView* a;
    const TensorView* b;
    int64_t out;
  };
  std::vector<Pair> pairs;
  pairs.reserve(static_cast<size_t>(config.num_layers) * spec.targets.size());
  for (int64_t l = 0; l < config.num_layers; ++l) {
    for (LoraTarget t : spec.targets) {
      int64_t in = 0, out = 0;
      lora_target_dims(config, t, in, out);
      const std::string base = lora_tensor_base(l, t);
      pairs.push_back({&store->require(base + ".lora_A.weight", {r, in}), &store->require(base + ".lora_B.weight", {out, r}), out});
    }
  }
  auto adapter = std::make_shared<LoraAdapter>();
  adapter->rank = spec.rank;
  adapter->scale = spec.scale;
  adapter->layers.resize(static_cast<size_t>(config.num_layers));
  std::vector<float> b_rows;
  size_t i = 0;
  for (int64_t l = 0; l < config.num_layers; ++l) {
    for (LoraTarget t : spec.targets) {
      const Pair& p = pairs[i++];
      LoraFactor& f = adapter->layers[static_cast<size_t>(l)][static_cast<int>(t)];
      f.a.resize(p.a->num_elements());
      convert_to_f32(*p.a, f.a.data());
      b_rows.resize(p.b->num_elements());
      convert_to_f32(*p.b, b_rows.data());
      f.bt.resize(b_rows.size());
      for (int64_t j = 0; j < p.out; ++j) {
        for (int64_t k = 0; k < r; ++k) f.bt[static_cast<size_t>(k * p.out + j)] = b_rows[static_cast<size_t>(j * r + k)];
      }
      adapter->num_parameters += f.a.size() + f.bt.size();
    }
  }
  return adapter;
}

void Backend::set_lora(int32_t, std::shared_ptr<const LoraAdapter>) {
  throw NativeError(ErrorCode::kUnavailable, std::string("backend '") + name() + "' has no LoRA kernels");
}

}  // namespace tandem
