// Backend selection and the weight contract shared by every backend.
#include <algorithm>

#include "../cpu/cpu_backend.h"
#include "../cuda/device.h"
#include "../cuda/gpu_backend.h"
#include "../cuda/kernel_api.h"
#include "backend.h"
#include "error.h"
#include "fp8_weights.h"
#include "safetensors.h"

namespace tandem {

std::string layer_tensor(int64_t layer, const char* suffix) {
  return "model.layers." + std::to_string(layer) + "." + suffix;
}

void validate_weights(const ModelConfig& c, const SafetensorsStore& w) {
  validate_fp8_weights(c, w);
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
    if (c.moe.is_moe_layer(l)) {
      (void)MoeLayerTensors(c, w, l);  // the router, every expert (per-expert or fused layout), any shared expert
      continue;
    }
    w.require(layer_tensor(l, "mlp.gate_proj.weight"), {c.intermediate_size, h});
    w.require(layer_tensor(l, "mlp.up_proj.weight"), {c.intermediate_size, h});
    w.require(layer_tensor(l, "mlp.down_proj.weight"), {h, c.intermediate_size});
  }
}

std::vector<std::string> available_backends() {
  std::vector<std::string> out{"cpu"};
  if (gpu::cuda_status().available) out.push_back("cuda");
  return out;
}

std::vector<BackendStatus> backend_status() {
  std::vector<BackendStatus> out;
  const std::string kv = "e4m3 KV cache (--kv-cache-dtype fp8)";
  out.push_back({"cpu", true, "", "host threads", "FP8 weights kept as e4m3 (W8A8 as the checkpoint says, or W8A16); " + kv});
  const gpu::CudaStatus cuda = gpu::cuda_status();
  std::string fp8;
  if (cuda.available) {
    const std::string sm = "sm_" + std::to_string(cuda.cc_major) + std::to_string(cuda.cc_minor);
    fp8 = cuda.cc_major > 8 || (cuda.cc_major == 8 && cuda.cc_minor >= 9)
              ? "FP8 tensor cores (" + sm + "): decode GEMV e4m3 W8A8, prefill on cuBLASLt FP8 where its scale modes pass the load-time probe, else dequantized to bf16; " + kv
              : "no FP8 tensor cores (" + sm + "): FP8 weights compute W8A16 (dequantized); " + kv;
  }
  out.push_back({"cuda", cuda.available, cuda.reason, cuda.device_name, fp8});
  out.push_back({"simt", true, "", "the CUDA backend's kernels on the SIMT harness (host; for tests, slow)",
                 "the CUDA backend's FP8 kernels (GEMV W8A8 / W8A16, dequantizing fallback); " + kv});
  return out;
}

size_t kv_elem_bytes(const std::string& device) { return device == "cpu" ? sizeof(float) : 2; }

size_t kv_elem_bytes(const std::string& device, const std::string& kv_cache_dtype) {
  if (kv_cache_dtype.empty() || kv_cache_dtype == "auto") return kv_elem_bytes(device);
  if (kv_cache_dtype == "bf16") return 2;
  if (kv_cache_dtype == "fp8" || kv_cache_dtype == "fp8_e4m3") return 1;
  throw NativeError(ErrorCode::kInvalidArgument, "kv cache dtype '" + kv_cache_dtype + "' (expected auto, bf16 or fp8)");
}

namespace {

/** "cuda" -> 0, "cuda:3" -> 3; anything else after "cuda" is invalid_argument. */
int cuda_ordinal(const std::string& device) {
  if (device == "cuda") return 0;
  const std::string digits = device.substr(5);
  if (device.size() > 5 && device[4] == ':' && !digits.empty() && digits.size() <= 4 &&
      digits.find_first_not_of("0123456789") == std::string::npos) {
    return std::stoi(digits);
  }
  throw NativeError(ErrorCode::kInvalidArgument, "device '" + device + "' (expected cpu, cuda or cuda:N)");
}

}  // namespace

std::unique_ptr<Backend> create_backend(const ModelConfig& config, const SafetensorsStore& weights,
                                        const BackendOptions& options, ThreadPool& pool) {
  validate_weights(config, weights);
  if (options.block_size <= 0 || options.block_size > 1024) {
    throw NativeError(ErrorCode::kInvalidArgument, "blockSize must be in [1, 1024]");
  }
  if (options.device == "cpu") return std::make_unique<CpuBackend>(config, weights, options, pool);
  if (options.device == "simt") {
    GpuBackend::check_supported(config, options.device);
    return std::make_unique<GpuBackend>(config, weights, options, pool, gpu::make_simt_device(), gpu::make_simt_kernels());
  }
  if (options.device.rfind("cuda", 0) == 0) {
    const int ordinal = cuda_ordinal(options.device);
    GpuBackend::check_supported(config, options.device);
    auto device = gpu::make_cuda_device(ordinal);  // unavailable: says why
    return std::make_unique<GpuBackend>(config, weights, options, pool, std::move(device), gpu::make_cuda_kernels());
  }
  throw NativeError(ErrorCode::kInvalidArgument,
                    "unknown device '" + options.device + "' (expected cpu, cuda or cuda:N)");
}

}  // namespace tandem
