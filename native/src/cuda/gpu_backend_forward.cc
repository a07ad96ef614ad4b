// GpuBackend's per-op forward: a step's kernels one by one, for every step the fused decode step
// (gpu_backend_decode.cc) does not take (prefills, mixed batches, wide decodes). The embedding,
// then per layer: RMSNorm, the QKV GEMM, qkv_rope (bias, q/k norms, RoPE, K/V into the pool),
// the layer-progress mark, paged attention (prefill tiles and split-KV decode with its merge),
// the O GEMM into the residual, RMSNorm, and the MLP (gate/up GEMM, SwiGLU and the down GEMM
// into the residual, or the MoE kernels of gpu_backend_moe.cc); then the final norm and the
// lm_head over the rows that want logits. run_step picks between the two paths.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "../core/error.h"
#include "gpu_backend.h"

namespace tandem {

void GpuBackend::run_step(const gpu::StepPlan& plan) {
  if (fused_decode_applies(plan)) {
    run_decode_fused(plan);  // gpu_backend_decode.cc
  } else {
    run_forward(plan);
  }
}

gpu::QkvRopeArgs GpuBackend::rope_args(const gpu::StepPlan& plan) const {
  const ModelConfig& c = config_;
  const int32_t* img = static_cast<const int32_t*>(image_);
  gpu::QkvRopeArgs rope;
  rope.qkv = act_.qkv;
  rope.qkv_stride = qkv_width_;
  rope.num_tokens = plan.num_tokens;
  rope.eps = static_cast<float>(c.rms_norm_eps);
  rope.positions = img + plan.layout.positions;
  rope.slots = img + plan.layout.slots;
  rope.inv_freq = inv_freq_;
  rope.rope_scale = rope_attention_scale(c);
  rope.num_heads = static_cast<int>(c.num_heads);
  rope.num_kv_heads = static_cast<int>(c.num_kv_heads);
  rope.head_dim = static_cast<int>(c.head_dim);
  rope.pool = kv_;
  rope.geo = geo_;
  rope.kv_fp8 = layout_.elem_bytes == 1;
  rope.kv_scales = kv_scales_;
  return rope;
}

gpu::AttentionArgs GpuBackend::attention_args(const gpu::StepPlan& plan) const {
  const ModelConfig& c = config_;
  const int32_t* img = static_cast<const int32_t*>(image_);
  const gpu::StepLayout& L = plan.layout;
  gpu::AttentionArgs attn;
  attn.q = act_.qkv;
  attn.q_stride = qkv_width_;
  attn.out = act_.attn;
  attn.out_stride = c.q_dim();
  attn.pool = kv_;
  attn.geo = geo_;
  attn.kv_fp8 = layout_.elem_bytes == 1;
  attn.kv_scales = kv_scales_;
  attn.num_heads = static_cast<int>(c.num_heads);
  attn.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  attn.seqs = reinterpret_cast<const gpu::SeqDesc*>(img + L.seqs);
  attn.block_tables = img + L.block_tables;
  attn.prefill_items = reinterpret_cast<const gpu::PrefillItem*>(img + L.prefill_items);
  attn.num_prefill_items = plan.num_prefill_items;
  attn.decode_seqs = img + L.decode_seqs;
  attn.num_decode = plan.num_decode;
  attn.num_splits = plan.num_splits;
  attn.partial = act_.partial;
  attn.decode_spans = img + L.decode_spans;
  attn.max_span = plan.max_span;
  return attn;
}

void GpuBackend::lm_head(int32_t rows) {
  const ModelConfig& c = config_;
  gpu::GemmArgs g = gpu::packed_gemm(rows, c.vocab_size, c.hidden_size, act_.rows_normed, lm_head_, act_.logits, gpu::GemmOut::kF32);
  g.ldc = logit_stride_;
  gemm(g);
}

void GpuBackend::run_forward(const gpu::StepPlan& plan) {
  const ModelConfig& c = config_;
  void* stream = device_->stream();
  const int64_t t = plan.num_tokens, h = c.hidden_size, inter = c.intermediate_size;
  const gpu::StepLayout& L = plan.layout;
  const int32_t* img = static_cast<const int32_t*>(image_);
  const float eps = static_cast<float>(c.rms_norm_eps);

  gpu::EmbedArgs e;
  e.tokens = img + L.tokens;
  e.num_tokens = static_cast<int>(t);
  e.table = embed_;
  e.hidden = static_cast<int>(h);
  e.x = act_.x;
  kernels_->embed(e, stream);

  gpu::RmsNormArgs norm;
  norm.x = act_.x;
  norm.x_stride = h;
  norm.num_rows = static_cast<int>(t);
  norm.hidden = static_cast<int>(h);
  norm.eps = eps;
  norm.out = act_.xn;
  norm.out_stride = h;

  gpu::QkvRopeArgs rope = rope_args(plan);

  gpu::AttentionArgs attn = attention_args(plan);

  gpu::SiluMulArgs silu;
  silu.gate_up = act_.gate_up;
  silu.num_tokens = static_cast<int>(t);
  silu.inter = static_cast<int>(inter);
  silu.out = act_.act;

  for (int64_t l = 0; l < c.num_layers; ++l) {
    const Layer& W = layers_[static_cast<size_t>(l)];
    norm.weight = W.input_norm;
    kernels_->rmsnorm(norm, stream);
    gemm(gpu::packed_gemm(t, qkv_width_, h, act_.xn, W.wqkv, act_.qkv, gpu::GemmOut::kF32), &W.fqkv);
    rope.bias = W.bqkv;
    rope.q_norm = W.q_norm;
    rope.k_norm = W.k_norm;
    rope.layer = static_cast<int>(l);
    kernels_->qkv_rope(rope, stream);
    kv_copy_->mark(&progress_[1], l + 1, stream);  // layer l's K/V is in the pool
    attn.layer = static_cast<int>(l);
    kernels_->attention(attn, stream);
    gpu::GemmArgs o = gpu::packed_gemm(t, h, c.q_dim(), act_.attn, W.wo, act_.x, gpu::GemmOut::kF32);
    o.bias = W.bo;
    o.accumulate = true;  // into the residual
    gemm(o, &W.fo);
    norm.weight = W.post_norm;
    kernels_->rmsnorm(norm, stream);
    if (W.moe_router != nullptr) {
      run_moe(W, t, stream);
      continue;
    }
    gemm(gpu::packed_gemm(t, 2 * inter, h, act_.xn, W.wgate_up, act_.gate_up, gpu::GemmOut::kBf16), &W.fgate_up);
    kernels_->silu_mul(silu, stream);
    gpu::GemmArgs d = gpu::packed_gemm(t, h, inter, act_.act, W.wdown, act_.x, gpu::GemmOut::kF32);
    d.accumulate = true;  // into the residual
    gemm(d, &W.fdown);
  }
  if (plan.num_logit_rows == 0) return;
  gpu::RmsNormArgs fin = norm;
  fin.rows = img + L.logit_rows;
  fin.num_rows = plan.num_logit_rows;
  fin.weight = final_norm_;
  fin.out = act_.rows_normed;
  kernels_->rmsnorm(fin, stream);
  lm_head(plan.num_logit_rows);
}

}  // namespace tandem
