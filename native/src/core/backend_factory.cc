// Backend selection and the weight contract shared by every backend.
#include <algorithm>

#include "../cpu/cpu_backend.h"
#include "backend.h"
#include "error.h"
#include "safetensors.h"

namespace tandem {

std::string layer_tensor(int64_t layer, const char* suffix) {
  return "model.layers." + std::to_string(layer) + "." + suffix;
}

void validate_weights(const ModelConfig& c, const SafetensorsStore& w) {
  const int64_t h = c.hidden_size;
  w.require("model.embed_tokens.weight", {c.vocab_size, h});
  w.require("model.norm.weight", {h});
  if (!c.tie_word_embeddings) w.require("lm_head.weight", {c.vocab_size, h});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    w.require(layer_tensor(l, "input_layernorm.weight"), {h});
    w.require(layer_tensor(l, "post_attention_layernorm.weight"), {h});
    w.require(layer_tensor(l, "self_attn.q_proj.weight"), {c.q_dim(), h});
    w.require(layer_tensor(l, "self_attn.k_proj.weight"), {c.kv_dim(), h});
    w.require(layer_tensor(l, "self_attn.v_proj.weight"), {c.kv_dim(), h});
    w.require(layer_tensor(l, "self_attn.o_proj.weight"), {h, c.q_dim()});
    if (c.qkv_bias) {
      w.require(layer_tensor(l, "self_attn.q_proj.bias"), {c.q_dim()});
      w.require(layer_tensor(l, "self_attn.k_proj.bias"), {c.kv_dim()});
      w.require(layer_tensor(l, "self_attn.v_proj.bias"), {c.kv_dim()});
    }
    if (c.o_bias) w.require(layer_tensor(l, "self_attn.o_proj.bias"), {h});
    if (c.qk_norm) {
      w.require(layer_tensor(l, "self_attn.q_norm.weight"), {c.head_dim});
      w.require(layer_tensor(l, "self_attn.k_norm.weight"), {c.head_dim});
    }
    w.require(layer_tensor(l, "mlp.gate_proj.weight"), {c.intermediate_size, h});
    w.require(layer_tensor(l, "mlp.up_proj.weight"), {c.intermediate_size, h});
    w.require(layer_tensor(l, "mlp.down_proj.weight"), {h, c.intermediate_size});
  }
}

std::vector<std::string> available_backends() {
  std::vector<std::string> out{"cpu"};
#ifdef TANDEM_WITH_CUDA
  out.push_back("cuda");
#endif
  return out;
}

std::unique_ptr<Backend> create_backend(const ModelConfig& config, const SafetensorsStore& weights,
                                        const BackendOptions& options, ThreadPool& pool) {
  validate_weights(config, weights);
  if (options.block_size <= 0 || options.block_size > 1024) {
    throw NativeError(ErrorCode::kInvalidArgument, "blockSize must be in [1, 1024]");
  }
  if (options.device == "cpu") return std::make_unique<CpuBackend>(config, weights, options, pool);
  if (options.device.rfind("cuda", 0) == 0) {
    // Issue 7 adds CudaBackend here, compiled only where nvcc is found (TANDEM_WITH_CUDA).
    throw NativeError(ErrorCode::kInvalidArgument,
                      "device '" + options.device + "': the CUDA backend is not built into this binary");
  }
  throw NativeError(ErrorCode::kInvalidArgument,
                    "unknown device '" + options.device + "' (expected cpu or cuda[:N])");
}

}  // namespace tandem
