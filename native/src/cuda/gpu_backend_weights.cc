// GpuBackend's weights: each checkpoint tensor converted to bf16 on the host (the engine's
// thread pool) and uploaded through two pinned staging buffers, so one chunk converts while
// the previous one uploads; q/k/v and gate/up are fused into one matrix each, norms, biases
// and RoPE frequencies stay f32.
#include <algorithm>
#include <cstring>

#include "../core/error.h"
#include "../core/safetensors.h"
#include "../core/thread_pool.h"
#include "gpu_backend.h"

namespace tandem {
namespace {

constexpr size_t kUploadChunkElements = size_t{16} << 20;  // 32 MiB of bf16 per staged upload

void to_bf16(const TensorView& t, size_t begin, size_t count, gpu::bf16_bits* out) {
  switch (t.dtype) {
    case DType::kBF16:
      std::memcpy(out, t.data + begin * 2, count * 2);
      return;
    // A tensor's bytes need not be aligned to its element (safetensors packs them after a header
    // of any length): read each element by memcpy, as convert_to_f32 does.
    case DType::kF32: {
      const uint8_t* src = t.data + begin * 4;
      for (size_t i = 0; i < count; ++i) {
        float f;
        std::memcpy(&f, src + 4 * i, 4);
        out[i] = gpu::float_to_bf16_bits(f);
      }
      return;
    }
    case DType::kF16: {
      const uint8_t* src = t.data + begin * 2;
      for (size_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = gpu::float_to_bf16_bits(f16_to_f32(h));
      }
      return;
    }
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      // FP8 tensors go through upload_matrix (gpu_backend_fp8.cc), which applies their scales.
      throw NativeError(ErrorCode::kInternal, "tensor '" + t.name + "' is FP8: it needs its scales to convert");
  }
}

}  // namespace

gpu::bf16_bits* GpuBackend::upload_bf16(const SafetensorsStore& w,
                                        const std::vector<std::pair<std::string, std::vector<int64_t>>>& parts,
                                        ThreadPool& pool) {
  std::vector<const TensorView*> views;
  for (const auto& [name, shape] : parts) views.push_back(&w.require(name, shape));
  return upload_bf16_views(views, pool);
}

gpu::bf16_bits* GpuBackend::upload_bf16_views(const std::vector<const TensorView*>& parts, ThreadPool& pool) {
  int64_t rows = 0;
  const int64_t cols = parts.front()->shape.back();
  for (const TensorView* t : parts) rows += static_cast<int64_t>(t->num_elements()) / cols;
  auto* dst = static_cast<gpu::bf16_bits*>(alloc(static_cast<size_t>(rows * cols) * 2));
  // Two pinned staging buffers: the next chunk converts while the previous one uploads.
  const size_t chunk = std::min<size_t>(kUploadChunkElements, static_cast<size_t>(rows * cols));
  gpu::bf16_bits* staging[2] = {static_cast<gpu::bf16_bits*>(device_->alloc_pinned(chunk * 2)),
                                static_cast<gpu::bf16_bits*>(device_->alloc_pinned(chunk * 2))};
  int cur = 0;
  size_t at = 0;
  try {
    for (const TensorView* tp : parts) {
      const TensorView& t = *tp;
      const size_t n = t.num_elements();
      for (size_t begin = 0; begin < n; begin += chunk) {
        const size_t count = std::min(chunk, n - begin);
        gpu::bf16_bits* buf = staging[cur];
        pool.parallel_for(static_cast<int64_t>(count), 1 << 16, [&](int64_t b, int64_t e, int) {
          to_bf16(t, begin + static_cast<size_t>(b), static_cast<size_t>(e - b), buf + b);
        });
        device_->synchronize();  // the buffer converted two chunks ago has finished uploading
        device_->upload(dst + at, buf, count * 2);
        at += count;
        cur ^= 1;
      }
    }
    device_->synchronize();
  } catch (...) {
    device_->free_pinned(staging[0]);
    device_->free_pinned(staging[1]);
    throw;
  }
  device_->free_pinned(staging[0]);
  device_->free_pinned(staging[1]);
  return dst;
}

float* GpuBackend::upload_f32(const SafetensorsStore& w, const std::vector<std::string>& names, const std::vector<int64_t>& shape) {
  std::vector<float> host;
  for (const std::string& name : names) {
    const TensorView& t = w.require(name, shape);
    const size_t at = host.size();
    host.resize(at + t.num_elements());
    convert_to_f32(t, host.data() + at);
  }
  auto* dst = static_cast<float*>(alloc(host.size() * sizeof(float)));
  device_->upload(dst, host.data(), host.size() * sizeof(float));
  device_->synchronize();
  return dst;
}

void GpuBackend::load_weights(const SafetensorsStore& w, ThreadPool& pool) {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size;
  // Embeddings and the LM head stay bf16 (an FP8 checkpoint's, where it quantized them, dequantized).
  embed_ = upload_matrix(w, {{"model.embed_tokens.weight", {c.vocab_size, h}}}, false, pool, nullptr);
  lm_head_ = c.tie_word_embeddings ? embed_ : upload_matrix(w, {{"lm_head.weight", {c.vocab_size, h}}}, false, pool, nullptr);
  final_norm_ = upload_f32(w, {"model.norm.weight"}, {h});
  {
    const TensorView& t = w.require("model.norm.weight", {h});
    final_norm_host_.resize(static_cast<size_t>(h));
    convert_to_f32(t, final_norm_host_.data());
  }
  {
    const std::vector<float> inv = rope_inv_freq(c);
    inv_freq_ = static_cast<float*>(alloc(inv.size() * sizeof(float)));
    device_->upload(inv_freq_, inv.data(), inv.size() * sizeof(float));
    device_->synchronize();
  }
  layers_.resize(static_cast<size_t>(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    Layer& L = layers_[static_cast<size_t>(l)];
    L.input_norm = upload_f32(w, {layer_tensor(l, "input_layernorm.weight")}, {h});
    L.post_norm = upload_f32(w, {layer_tensor(l, "post_attention_layernorm.weight")}, {h});
    L.wqkv = upload_matrix(w,
                           {{layer_tensor(l, "self_attn.q_proj.weight"), {c.q_dim(), h}},
                            {layer_tensor(l, "self_attn.k_proj.weight"), {c.kv_dim(), h}},
                            {layer_tensor(l, "self_attn.v_proj.weight"), {c.kv_dim(), h}}},
                           true, pool, &L.fqkv);
    if (c.qkv_bias) {
      // q, k and v biases have different lengths: concatenate on the host.
      std::vector<float> b;
      const std::pair<const char*, int64_t> parts[] = {
          {"self_attn.q_proj.bias", c.q_dim()}, {"self_attn.k_proj.bias", c.kv_dim()}, {"self_attn.v_proj.bias", c.kv_dim()}};
      for (const auto& [suffix, n] : parts) {
        const TensorView& t = w.require(layer_tensor(l, suffix), {n});
        const size_t at = b.size();
        b.resize(at + t.num_elements());
        convert_to_f32(t, b.data() + at);
      }
      L.bqkv = static_cast<float*>(alloc(b.size() * sizeof(float)));
      device_->upload(L.bqkv, b.data(), b.size() * sizeof(float));
      device_->synchronize();
    }
    L.wo = upload_matrix(w, {{layer_tensor(l, "self_attn.o_proj.weight"), {h, c.q_dim()}}}, true, pool, &L.fo);
    if (c.o_bias) L.bo = upload_f32(w, {layer_tensor(l, "self_attn.o_proj.bias")}, {h});
    if (c.qk_norm) {
      L.q_norm = upload_f32(w, {layer_tensor(l, "self_attn.q_norm.weight")}, {c.head_dim});
      L.k_norm = upload_f32(w, {layer_tensor(l, "self_attn.k_norm.weight")}, {c.head_dim});
    }
    if (c.moe.is_moe_layer(l)) {  // a sparse layer: router and experts (gpu_backend_moe.cc)
      upload_moe_layer(w, l, pool);
      continue;
    }
    L.wgate_up = upload_matrix(w,
                               {{layer_tensor(l, "mlp.gate_proj.weight"), {c.intermediate_size, h}},
                                {layer_tensor(l, "mlp.up_proj.weight"), {c.intermediate_size, h}}},
                               true, pool, &L.fgate_up);
    L.wdown = upload_matrix(w, {{layer_tensor(l, "mlp.down_proj.weight"), {h, c.intermediate_size}}}, true, pool, &L.fdown);
  }
}

}  // namespace tandem
