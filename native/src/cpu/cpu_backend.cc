#include "cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "../core/embedding.h"
#include "../core/error.h"
#include "../core/fp8_weights.h"
#include "../core/kv_copy_host.h"
#include "../core/safetensors.h"
#include "../core/thread_pool.h"
#include "gemm.h"
#include "kernels.h"

namespace tandem {
namespace {

std::vector<float> to_f32(const SafetensorsStore& w, const std::string& name,
                          const std::vector<int64_t>& shape) {
  const TensorView& t = w.require(name, shape);
  std::vector<float> out(t.num_elements());
  convert_to_f32(t, out.data());
  return out;
}


int64_t pick_num_blocks(const BackendOptions& o, const KvLayout& layout) {
  if (o.num_blocks > 0) return o.num_blocks;
  if (o.memory_budget_bytes <= 0) {
    throw NativeError(ErrorCode::kInvalidArgument, "set numBlocks or memoryBudgetBytes for the KV pool");
  }
  int64_t n = o.memory_budget_bytes / static_cast<int64_t>(layout.bytes_per_block());
  if (n < 1) {
    throw NativeError(ErrorCode::kResourceExhausted,
                      "memoryBudgetBytes " + std::to_string(o.memory_budget_bytes) +
                          " holds no KV block (one block is " + std::to_string(layout.bytes_per_block()) +
                          " bytes)");
  }
  return n;
}

}  // namespace

CpuBackend::CpuBackend(const ModelConfig& config, const SafetensorsStore& weights,
                       const BackendOptions& options, ThreadPool& pool)
    : config_(config), pool_(pool), inv_freq_(rope_inv_freq(config)), rope_scale_(rope_attention_scale(config)) {
  layout_.block_size = options.block_size;
  layout_.num_layers = config.num_layers;
  layout_.num_kv_heads = config.num_kv_heads;
  layout_.head_dim = config.head_dim;
  layout_.elem_bytes = kv_elem_bytes("cpu", options.kv_cache_dtype);
  layout_.num_blocks = pick_num_blocks(options, layout_);
  kv_scales_ = load_kv_scales(weights, config);
  load_weights(weights, options);
  for (int i = 0; i < pool_.size(); ++i) samplers_.push_back(std::make_unique<Sampler>(config_.vocab_size));
  if (options.kv_pool != nullptr) {
    kv_base_ = options.kv_pool;
    return;
  }
  try {
    kv_.assign((layout_.bytes_per_block() * static_cast<size_t>(layout_.num_blocks) + sizeof(float) - 1) / sizeof(float), 0.0f);
  } catch (const std::bad_alloc&) {
    throw NativeError(ErrorCode::kResourceExhausted,
                      "cannot allocate a KV pool of " + std::to_string(layout_.num_blocks) + " blocks");
  }
  kv_base_ = kv_.data();
}

void CpuBackend::adopt_kv_pool(void* base) {
  kv_base_ = base;
  std::vector<float>().swap(kv_);
}

// The pool is host memory: pool <-> host buffer copies are the host copy itself.
void CpuBackend::kv_read_blocks(const int32_t* ids, int32_t n, void* dst, int l0, int l1) {
  gpu::KvCopyArgs a;
  a.src = kv_view(layout_, kv_base_, ids);
  a.dst = kv_view(layout_, dst, nullptr);
  a.num_tokens = static_cast<int64_t>(n) * layout_.block_size;
  a.layer_begin = l0;
  a.layer_end = l1;
  a.scales = kv_scales_.data();
  kv_copy_host(a);
}

void CpuBackend::kv_write_blocks(const int32_t* ids, int32_t n, const void* src, const KvLayout& src_layout, int64_t src_blocks,
                                 int l0, int l1, int64_t src_first) {
  gpu::KvCopyArgs a;
  a.src = kv_view(src_layout, src, nullptr);
  a.dst = kv_view(layout_, kv_base_, ids);
  a.num_tokens = kv_copy_tokens(src_blocks, src_layout.block_size, n, layout_.block_size, src_first);
  a.src_first = src_first;
  a.layer_begin = l0;
  a.layer_end = l1;
  a.scales = kv_scales_.data();
  kv_copy_host(a);
}

std::string CpuBackend::description() const {
  std::string s = "cpu";
  if (config_.quant.quantized()) {
    s += config_.quant.dequantize ? "; weights: " + config_.quant.describe()
                                  : "; FP8 weights kept as e4m3 (" + config_.quant.describe() +
                                        (fp8_weight_only_ ? "; computed W8A16" : "") + ")";
  }
  if (layout_.elem_bytes != sizeof(float)) s += std::string("; KV cache ") + kv_dtype_name(layout_.elem_bytes);
  return s;
}

void CpuBackend::set_lora(int32_t slot, std::shared_ptr<const LoraAdapter> adapter) {
  if (slot < 0) throw NativeError(ErrorCode::kInvalidArgument, "lora slot must be >= 0");
  if (adapter != nullptr && config_.moe.enabled()) {
    throw NativeError(ErrorCode::kInvalidArgument, "LoRA adapters on a mixture-of-experts model (" + config_.architecture +
                                                   ") are not supported: adapters on experts are out of scope");
  }
  if (static_cast<size_t>(slot) >= loras_.size()) loras_.resize(static_cast<size_t>(slot) + 1);
  loras_[static_cast<size_t>(slot)] = std::move(adapter);
}

// Consecutive sequences of one adapter form one segment; the scheduler orders the batch by
// adapter, so a step has about one segment per distinct adapter.
void CpuBackend::lora_segments(const ForwardBatch& batch) {
  lora_segments_.clear();
  for (const ForwardSeq& s : batch.seqs) {
    if (s.lora_slot < 0) continue;
    const LoraAdapter* a = loras_[static_cast<size_t>(s.lora_slot)].get();
    if (!lora_segments_.empty() && lora_segments_.back().adapter == a && lora_segments_.back().end == s.token_offset) {
      lora_segments_.back().end += s.num_tokens;
    } else {
      lora_segments_.push_back({s.token_offset, s.token_offset + s.num_tokens, a});
    }
  }
}

void CpuBackend::apply_lora(int64_t layer, LoraTarget target, const float* x, int64_t x_stride, float* out,
                            int64_t out_stride, int64_t col_offset) {
  if (lora_segments_.empty()) return;
  int64_t in = 0, out_features = 0;
  lora_target_dims(config_, target, in, out_features);
  cpu::sgmv_shrink_expand(pool_, lora_segments_, layer, target, x, x_stride, in, out, out_stride, col_offset,
                          out_features, lora_scratch_);
}

cpu::WeightMatrix CpuBackend::linear(const SafetensorsStore& w, const std::vector<cpu::WeightMatrix::Part>& parts) const {
  cpu::WeightMatrix m = cpu::WeightMatrix::load(w, config_, parts, true, &pool_);
  if (fp8_weight_only_) m.set_weight_only();
  return m;
}

void CpuBackend::load_weights(const SafetensorsStore& w, const BackendOptions& options) {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size;
  fp8_weight_only_ = options.fp8_compute == "w8a16";
  // Embeddings and the LM head stay in the checkpoint's precision unless it quantized them.
  embed_ = cpu::WeightMatrix::load(w, c, {{"model.embed_tokens.weight", {c.vocab_size, h}}}, false);
  if (!c.tie_word_embeddings) {
    lm_head_ = cpu::WeightMatrix::load(w, c, {{"lm_head.weight", {c.vocab_size, h}}}, false);
    if (fp8_weight_only_) lm_head_.set_weight_only();
  }
  if (fp8_weight_only_) embed_.set_weight_only();  // tied: the LM head's GEMM
  final_norm_ = to_f32(w, "model.norm.weight", {h});
  layers_.resize(static_cast<size_t>(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    Layer& L = layers_[static_cast<size_t>(l)];
    L.input_norm = to_f32(w, layer_tensor(l, "input_layernorm.weight"), {h});
    L.post_norm = to_f32(w, layer_tensor(l, "post_attention_layernorm.weight"), {h});
    L.wqkv = linear(w, {{layer_tensor(l, "self_attn.q_proj.weight"), {c.q_dim(), h}},
                        {layer_tensor(l, "self_attn.k_proj.weight"), {c.kv_dim(), h}},
                        {layer_tensor(l, "self_attn.v_proj.weight"), {c.kv_dim(), h}}});
    if (c.qkv_bias) {
      const std::pair<const char*, int64_t> parts[] = {
          {"self_attn.q_proj.bias", c.q_dim()}, {"self_attn.k_proj.bias", c.kv_dim()}, {"self_attn.v_proj.bias", c.kv_dim()}};
      for (const auto& [suffix, n] : parts) {
        std::vector<float> part = to_f32(w, layer_tensor(l, suffix), {n});
        L.bqkv.insert(L.bqkv.end(), part.begin(), part.end());
      }
    }
    L.wo = linear(w, {{layer_tensor(l, "self_attn.o_proj.weight"), {h, c.q_dim()}}});
    if (c.o_bias) L.bo = to_f32(w, layer_tensor(l, "self_attn.o_proj.bias"), {h});
    if (c.qk_norm) {
      L.q_norm = to_f32(w, layer_tensor(l, "self_attn.q_norm.weight"), {c.head_dim});
      L.k_norm = to_f32(w, layer_tensor(l, "self_attn.k_norm.weight"), {c.head_dim});
    }
    if (c.moe.is_moe_layer(l)) {
      L.moe = std::make_unique<cpu::MoeLayerWeights>(cpu::MoeLayerWeights::load(c, w, l, &pool_, fp8_weight_only_));
      continue;
    }
    L.wgate_up = linear(w, {{layer_tensor(l, "mlp.gate_proj.weight"), {c.intermediate_size, h}},
                            {layer_tensor(l, "mlp.up_proj.weight"), {c.intermediate_size, h}}});
    L.wdown = linear(w, {{layer_tensor(l, "mlp.down_proj.weight"), {h, c.intermediate_size}}});
  }
}

void CpuBackend::ensure_scratch(int64_t t) {
  const ModelConfig& c = config_;
  auto grow = [](std::vector<float>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  };
  grow(x_, t * c.hidden_size);
  grow(xn_, t * c.hidden_size);
  grow(qkv_, t * (c.q_dim() + 2 * c.kv_dim()));
  grow(attn_, t * c.q_dim());
  grow(proj_, t * c.hidden_size);
  grow(gate_up_, t * 2 * c.intermediate_size);
  grow(act_, t * c.intermediate_size);
  grow(rope_cos_, t * c.head_dim / 2);
  grow(rope_sin_, t * c.head_dim / 2);
  if (static_cast<int64_t>(token_pos_.size()) < t) token_pos_.resize(static_cast<size_t>(t));
}

void CpuBackend::write_kv(const ForwardBatch& batch, int64_t layer) {
  const ModelConfig& c = config_;
  const int64_t qkv_w = c.q_dim() + 2 * c.kv_dim();
  const int eb = static_cast<int>(layout_.elem_bytes);
  auto* pool = static_cast<unsigned char*>(kv_base_);
  for (const ForwardSeq& s : batch.seqs) {
    for (int32_t i = 0; i < s.num_tokens; ++i) {
      const int64_t tok = s.token_offset + i;
      const int64_t pos = s.start_pos + i;
      const int64_t block = s.block_table[pos / layout_.block_size];
      const int64_t slot = pos % layout_.block_size;
      const float* row = qkv_.data() + tok * qkv_w;
      for (int kv = 0; kv < 2; ++kv) {
        const float* src = row + c.q_dim() + kv * c.kv_dim();
        unsigned char* dst = pool + layout_.offset(block, layer, kv, slot) * eb;
        if (eb == 4) {
          std::memcpy(dst, src, static_cast<size_t>(c.kv_dim()) * sizeof(float));
          continue;
        }
        // bf16 rounds to nearest even; e4m3 stores value / scale (saturating), as the GPU's write.
        const float scale = kv_scales_[static_cast<size_t>(2 * layer + kv)];
        for (int64_t j = 0; j < c.kv_dim(); ++j) kv_host_store(dst + j * eb, eb, src[j], scale);
      }
    }
  }
}

void CpuBackend::attention(const ForwardBatch& batch, int64_t layer) {
  const ModelConfig& c = config_;
  cpu::AttentionLayer a;
  a.q = qkv_.data();
  a.q_stride = c.q_dim() + 2 * c.kv_dim();
  a.out = attn_.data();
  a.out_stride = c.q_dim();
  if (layout_.elem_bytes == sizeof(float)) {
    a.kv_pool = static_cast<const float*>(kv_base_);
  } else {
    a.kv_pool_raw = kv_base_;
    a.kv_elem_bytes = static_cast<int>(layout_.elem_bytes);
    a.k_scale = kv_scales_[static_cast<size_t>(2 * layer)];
    a.v_scale = kv_scales_[static_cast<size_t>(2 * layer + 1)];
  }
  a.layer = layer;
  a.num_heads = c.num_heads;
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  attention_kernel_.run(pool_, batch, layout_, a);
}

void CpuBackend::forward(const ForwardBatch& batch) {
  const ModelConfig& c = config_;
  const int64_t t = batch.num_tokens;
  const int64_t hd = c.hidden_size;
  const int64_t half = c.head_dim / 2;
  const int64_t qkv_w = c.q_dim() + 2 * c.kv_dim();
  const int64_t inter = c.intermediate_size;
  const float eps = static_cast<float>(c.rms_norm_eps);

  ensure_scratch(t);
  __atomic_store_n(&progress_[1], 0, __ATOMIC_RELEASE);
  __atomic_store_n(&progress_[0], progress_[0] + 1, __ATOMIC_RELEASE);
  lora_segments(batch);

  for (const ForwardSeq& s : batch.seqs) {
    for (int32_t i = 0; i < s.num_tokens; ++i) token_pos_[static_cast<size_t>(s.token_offset + i)] = s.start_pos + i;
  }
  // Embedding and RoPE angles: angle = f32(pos) * inv_freq in f32, as transformers does.
  for (int64_t i = 0; i < t; ++i) {
    embed_.row_to_f32(batch.tokens[i], x_.data() + i * hd);
    const float pos = static_cast<float>(token_pos_[static_cast<size_t>(i)]);
    for (int64_t j = 0; j < half; ++j) {
      float angle = pos * inv_freq_[static_cast<size_t>(j)];
      rope_cos_[static_cast<size_t>(i * half + j)] = std::cos(angle) * rope_scale_;
      rope_sin_[static_cast<size_t>(i * half + j)] = std::sin(angle) * rope_scale_;
    }
  }

  const int64_t row_grain = std::max<int64_t>(1, 16384 / hd);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const Layer& L = layers_[static_cast<size_t>(l)];
    pool_.parallel_for(t, row_grain, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) cpu::rmsnorm(x_.data() + i * hd, L.input_norm.data(), hd, eps, xn_.data() + i * hd);
    });
    cpu::matmul_nt(pool_, xn_.data(), t, L.wqkv, L.bqkv.empty() ? nullptr : L.bqkv.data(), qkv_.data());
    apply_lora(l, LoraTarget::kQ, xn_.data(), hd, qkv_.data(), qkv_w, 0);
    apply_lora(l, LoraTarget::kK, xn_.data(), hd, qkv_.data(), qkv_w, c.q_dim());
    apply_lora(l, LoraTarget::kV, xn_.data(), hd, qkv_.data(), qkv_w, c.q_dim() + c.kv_dim());
    pool_.parallel_for(t, row_grain, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        float* row = qkv_.data() + i * qkv_w;
        const float* cs = rope_cos_.data() + i * half;
        const float* sn = rope_sin_.data() + i * half;
        for (int64_t h = 0; h < c.num_heads; ++h) {
          float* q = row + h * c.head_dim;
          if (c.qk_norm) cpu::rmsnorm(q, L.q_norm.data(), c.head_dim, eps, q);
          cpu::rope_rotate(q, cs, sn, c.head_dim);
        }
        for (int64_t h = 0; h < c.num_kv_heads; ++h) {
          float* k = row + c.q_dim() + h * c.head_dim;
          if (c.qk_norm) cpu::rmsnorm(k, L.k_norm.data(), c.head_dim, eps, k);
          cpu::rope_rotate(k, cs, sn, c.head_dim);
        }
      }
    });
    write_kv(batch, l);
    __atomic_store_n(&progress_[1], l + 1, __ATOMIC_RELEASE);  // layer l's K/V is in the pool
    attention(batch, l);
    cpu::matmul_nt(pool_, attn_.data(), t, L.wo, L.bo.empty() ? nullptr : L.bo.data(), proj_.data());
    apply_lora(l, LoraTarget::kO, attn_.data(), c.q_dim(), proj_.data(), hd, 0);
    pool_.parallel_for(t, row_grain, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        float* xr = x_.data() + i * hd;
        const float* pr = proj_.data() + i * hd;
        for (int64_t j = 0; j < hd; ++j) xr[j] += pr[j];
        cpu::rmsnorm(xr, L.post_norm.data(), hd, eps, xn_.data() + i * hd);
      }
    });
    if (L.moe != nullptr) {
      moe_block_.run(pool_, c, *L.moe, xn_.data(), t, proj_.data());
      for (int64_t i = 0; i < t * hd; ++i) x_[static_cast<size_t>(i)] += proj_[static_cast<size_t>(i)];
      continue;
    }
    cpu::matmul_nt(pool_, xn_.data(), t, L.wgate_up, nullptr, gate_up_.data());
    apply_lora(l, LoraTarget::kGate, xn_.data(), hd, gate_up_.data(), 2 * inter, 0);
    apply_lora(l, LoraTarget::kUp, xn_.data(), hd, gate_up_.data(), 2 * inter, inter);
    pool_.parallel_for(t, std::max<int64_t>(1, 16384 / inter), [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        const float* gu = gate_up_.data() + i * 2 * inter;
        cpu::silu_mul(gu, gu + inter, act_.data() + i * inter, inter);
      }
    });
    cpu::matmul_nt(pool_, act_.data(), t, L.wdown, nullptr, proj_.data());
    apply_lora(l, LoraTarget::kDown, act_.data(), inter, proj_.data(), hd, 0);
    for (int64_t i = 0; i < t * hd; ++i) x_[static_cast<size_t>(i)] += proj_[static_cast<size_t>(i)];
  }

  if (batch.num_logit_rows == 0) return;
  const int64_t r = batch.num_logit_rows;
  const size_t vocab = static_cast<size_t>(c.vocab_size);
  if (logits_.size() < static_cast<size_t>(r) * vocab) logits_.resize(static_cast<size_t>(r) * vocab);
  float* logits = logits_.data();
  if (static_cast<int64_t>(rows_.size()) < r * hd) rows_.resize(static_cast<size_t>(r * hd));
  int64_t row = 0;
  for (const ForwardSeq& s : batch.seqs) {
    if (!s.want_logits) continue;
    // Its last num_logits tokens: one row, or a verify step's row after each draft.
    for (int64_t tok = s.token_offset + s.num_tokens - s.num_logits; tok < s.token_offset + s.num_tokens; ++tok) {
      cpu::rmsnorm(x_.data() + tok * hd, final_norm_.data(), hd, eps, rows_.data() + row * hd);
      ++row;
    }
  }
  cpu::matmul_nt(pool_, rows_.data(), r, lm_head_.empty() ? embed_ : lm_head_, nullptr, logits);
}

void CpuBackend::sample(const std::vector<SampleRow>& rows, SampledRows& out) {
  const size_t n = rows.size();
  const size_t vocab = static_cast<size_t>(config_.vocab_size);
  int32_t top_stride = 0;
  for (const SampleRow& r : rows) top_stride = std::max(top_stride, r.num_top_logprobs);
  out.tokens.assign(n, 0);
  out.logprobs.assign(n, NAN);
  out.top_stride = top_stride;
  out.top_ids.assign(n * static_cast<size_t>(top_stride), -1);
  out.top_logprobs.assign(n * static_cast<size_t>(top_stride), NAN);
  pool_.parallel_for(static_cast<int64_t>(n), 1, [&](int64_t b, int64_t e, int worker) {
    Sampler& sampler = *samplers_[static_cast<size_t>(worker)];
    for (int64_t i = b; i < e; ++i) {
      const SampleRow& row = rows[static_cast<size_t>(i)];
      SampleRequest req;
      req.logits = logits_.data() + static_cast<size_t>(row.logit_row) * vocab;
      req.params = row.params;
      req.position = row.position;
      req.history = row.history;
      req.history_len = row.history_len;
      req.num_prompt = row.num_prompt;
      req.num_top_logprobs = row.num_top_logprobs;
      req.bias_ids = row.bias_ids;
      req.bias_values = row.bias_values;
      req.bias_len = row.bias_len;
      req.allowed = row.allowed;
      SampleResult res = sampler.sample(req);
      const size_t r = static_cast<size_t>(i);
      out.tokens[r] = res.token;
      if (row.num_top_logprobs >= 0) out.logprobs[r] = res.logprob;
      for (size_t k = 0; k < res.top.size(); ++k) {
        out.top_ids[r * static_cast<size_t>(top_stride) + k] = res.top[k].first;
        out.top_logprobs[r * static_cast<size_t>(top_stride) + k] = res.top[k].second;
      }
    }
  });
}

void CpuBackend::pool_hidden(const ForwardBatch& batch, Pooling pooling, float* dst) {
  // x_ still holds the last forward's residual stream (pre final norm) for every token.
  pool_final_hidden(x_.data(), batch, pooling, final_norm_.data(), config_.hidden_size, static_cast<float>(config_.rms_norm_eps),
                    dst, pool_);
}

void CpuBackend::read_logits(float* dst, int32_t rows) {
  std::memcpy(dst, logits_.data(), static_cast<size_t>(rows) * static_cast<size_t>(config_.vocab_size) * sizeof(float));
}

}  // namespace tandem
