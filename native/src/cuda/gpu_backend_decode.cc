// GpuBackend's fused decode step (decode_api.h): a decode-only batch of at most
// kDecodeMaxRows rows (graphs replay it too: the padded size decides) runs, per layer,
//
//   qkv     GEMV + bias + q/k norm + RoPE + K/V write (+ the layer-progress mark)   1 launch
//   attn    split-KV decode attention, merged by the last split block               1
//   o       GEMV + bias += residual, then the post-attention RMSNorm                1
//   gate/up GEMV of both halves + SiLU * up                                         1
//   down    GEMV += residual, then the next layer's input RMSNorm (the final norm)  1
//
// instead of RMSNorm, GEMM (+ split-K reduce), qkv_rope, mark, attention, merge, GEMM (+
// reduce), RMSNorm, GEMM (+ reduce), SwiGLU, GEMM (+ reduce): 5 launches a layer where there
// were up to 14. The step before the layers (embedding, the first RMSNorm) and after them (the
// lm_head GEMM over the normalized rows) are the unfused path's. The same bits come out as
// from the unfused path on our own GEMMs (the kernel checks compare them bit for bit); with
// cuBLASLt the unfused path's decode GEMMs were cuBLASLt's.
//
// Rows: at most kDecodeMaxRows (16), with or without cuBLASLt: the fused GEMVs are the few-rows
// GEMM's tensor-core main loop (gemm_rows.cuh), which streams the weights at every m up to 16
// as at m = 1. (Its CUDA-core predecessor ran at half cuBLASLt's speed at 8 rows on an H200,
// bench/results/gpu-h200/gemm.json, and the fused path then stopped at 4 rows with cuBLASLt;
// a verify step of 4 drafts is 5 rows.) FP8 weights: at most 8
// (kFp8RowsMaxM), with or without cuBLASLt: the per-op decode GEMMs are then the FP8 GEMV, whose
// main loop the fused GEMVs run (an unquantized matrix beside them runs our bf16 GEMV). A MoE
// layer fuses its attention half (QKV, attention, O + residual + post-attention norm) and runs
// the MoE kernels after it (gpu_backend_moe.cc: router and grouping, gate/up, down whose last
// CTAs combine and take the next RMSNorm): 6 launches a layer, plus 2 for a Qwen2-MoE shared
// expert (its gate/up a fused GEMV with SiLU x up, its down our GEMM).
// TANDEM_GPU_DECODE=unfused keeps the per-op kernels (profile-check.sh's "before"),
// TANDEM_GPU_DECODE_MAX_ROWS=n moves the limit (1..16), TANDEM_GPU_SAMPLER=block keeps the
// one-block sampler, and TANDEM_GPU_OVERLAP=0 launches the fused kernels the ordinary way: all
// read once, when the backend is made.
// Overlap (on by default; compute capability 9.0+): each fused GEMV and the attention are
// programmatic dependent launches (kernels/launch.h), so a GEMV's blocks start while the kernel
// before finishes, issue their first weight loads and L2 prefetches (weights depend on nothing
// in the step) and only then wait for that kernel: the gap between two kernels of a layer,
// which at batch 1 is a large share of a small model's step, streams weights.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "../core/error.h"
#include "gpu_backend.h"

namespace tandem {

void GpuBackend::init_decode_path() {
  const bool simt = std::string(device_->kind()) == "simt";
  const char* decode = std::getenv("TANDEM_GPU_DECODE");
  const char* sampler = std::getenv("TANDEM_GPU_SAMPLER");
  // Mixture-of-experts layers fuse their attention half; their MLP is the MoE kernels
  // (gpu_backend_moe.cc) after the post-attention norm, whose combine takes the next RMSNorm. An e4m3 KV
  // pool is fused too: the QKV epilogue writes it through qkv_rope_head and the attention reads
  // it, as the per-op kernels do.
  decode_fused_ = decode == nullptr || std::string(decode) != "unfused";
  // FP8 weights: their per-op decode GEMMs are the FP8 GEMV (m <= 8, whatever cuBLASLt offers),
  // whose main loop the fused GEMVs run, so the fused step takes what that GEMV takes.
  const int most = fp8_weights_ ? gpu::kFp8RowsMaxM : gpu::kDecodeMaxRows;
  decode_max_rows_ = most;
  if (const char* rows = std::getenv("TANDEM_GPU_DECODE_MAX_ROWS")) decode_max_rows_ = std::max(1, std::min(most, std::atoi(rows)));
  sampler_fast_ = sampler == nullptr || std::string(sampler) != "block";
  decode_ = simt ? gpu::make_simt_decode_kernels() : gpu::make_cuda_decode_kernels();
  const char* overlap_env = std::getenv("TANDEM_GPU_OVERLAP");
  const bool overlap = overlap_env == nullptr || std::string(overlap_env) != "0";
  decode_->set_overlap(overlap);
  if (moe_kernels_) moe_kernels_->set_overlap(overlap);
  // Every FP8 weight must be one the FP8 GEMV takes (16-byte rows, its group sizes): the per-op
  // path dequantizes the others, which the fused step cannot.
  if (decode_fused_ && fp8_weights_) {
    for (const Layer& W : layers_) {
      for (const Fp8Weight* f : {&W.fqkv, &W.fo, &W.fgate_up, &W.fdown}) {
        if (!*f) continue;
        gpu::DecodeGemvArgs probe;
        set_fp8_gemv(probe, *f);
        probe.m = decode_max_rows_;
        probe.n = static_cast<int>(f->n);
        probe.k = static_cast<int>(f->k);
        probe.lda = f->k;
        probe.workspace = act_.gemm_workspace;
        probe.workspace_floats = act_.gemm_workspace_floats;
        if (!decode_->gemv_applies(probe)) decode_fused_ = false;
      }
    }
  }
  const ModelConfig& c = config_;
  // A Qwen2-MoE shared expert's gate/up runs as a fused GEMV too (gpu_backend_moe.cc).
  const int64_t widest = std::max({qkv_width_, c.hidden_size, 2 * c.intermediate_size, 2 * c.moe.shared_intermediate});
  // One array for every fused kernel of a step: each leaves its counters at zero for the next.
  decode_counters_count_ = std::max(gpu::decode_gemv_counters(static_cast<int>(widest)),
                                    gpu::decode_attention_counters(gpu::kDecodeMaxRows, static_cast<int>(c.num_kv_heads)));
  decode_counters_ = static_cast<int*>(alloc(static_cast<size_t>(decode_counters_count_) * sizeof(int)));
  device_->fill(decode_counters_, 0, static_cast<size_t>(decode_counters_count_) * sizeof(int));
  device_->synchronize();
}

bool GpuBackend::fused_decode_applies(const gpu::StepPlan& plan) const {
  if (!decode_fused_ || !plan.decode_only || plan.num_tokens < 1 || plan.num_tokens > decode_max_rows_) return false;
  if (plan.num_logit_rows != plan.num_tokens) return false;
  // The lm_head reads the normalized rows in place: logit row r must be token row r.
  const int32_t* rows = plan.image.data() + plan.layout.logit_rows;
  for (int32_t r = 0; r < plan.num_logit_rows; ++r) {
    if (rows[r] != r) return false;
  }
  return true;
}

void GpuBackend::run_decode_fused(const gpu::StepPlan& plan) {
  const ModelConfig& c = config_;
  void* stream = device_->stream();
  const int m = plan.num_tokens;
  const int h = static_cast<int>(c.hidden_size), inter = static_cast<int>(c.intermediate_size);
  const int32_t* img = static_cast<const int32_t*>(image_);
  const gpu::StepLayout& L = plan.layout;
  const float eps = static_cast<float>(c.rms_norm_eps);

  gpu::EmbedArgs e;
  e.tokens = img + L.tokens;
  e.num_tokens = m;
  e.table = embed_;
  e.hidden = h;
  e.x = act_.x;
  kernels_->embed(e, stream);
  gpu::RmsNormArgs norm;
  norm.x = act_.x;
  norm.x_stride = h;
  norm.num_rows = m;
  norm.weight = layers_.front().input_norm;
  norm.hidden = h;
  norm.eps = eps;
  norm.out = act_.xn;
  norm.out_stride = h;
  kernels_->rmsnorm(norm, stream);

  gpu::QkvRopeArgs rope = rope_args(plan);
  gpu::AttentionArgs attn = attention_args(plan);
  auto gemv = [&](gpu::DecodeEpilogue epilogue, int64_t n, int64_t k, const gpu::bf16_bits* in, const gpu::bf16_bits* w,
                  const Fp8Weight& w8) { return decode_gemv_args(epilogue, m, n, k, in, w, w8); };
  // Residual += in . w^T (+ bias), then xn = rmsnorm(residual) * norm.
  auto residual = [&](int64_t k, const gpu::bf16_bits* in, const gpu::bf16_bits* w, const Fp8Weight& w8, const float* bias,
                      const float* norm_weight, gpu::bf16_bits* xn) {
    gpu::DecodeGemvArgs g = gemv(gpu::DecodeEpilogue::kResidualNorm, h, k, in, w, w8);
    g.bias = bias;
    g.x = act_.x;
    g.ldx = h;
    g.norm_weight = norm_weight;
    g.xn = xn;
    g.ldxn = h;
    decode_->gemv(g, stream);
  };

  for (int64_t l = 0; l < c.num_layers; ++l) {
    const Layer& W = layers_[static_cast<size_t>(l)];
    const bool last = l + 1 == c.num_layers;

    gpu::DecodeGemvArgs qkv = gemv(gpu::DecodeEpilogue::kQkvRope, qkv_width_, h, act_.xn, W.wqkv, W.fqkv);
    qkv.rope = rope;
    qkv.rope.bias = W.bqkv;
    qkv.rope.q_norm = W.q_norm;
    qkv.rope.k_norm = W.k_norm;
    qkv.rope.layer = static_cast<int>(l);
    qkv.progress = &progress_[1];  // layer l's K/V is in the pool
    qkv.progress_value = l + 1;
    decode_->gemv(qkv, stream);

    attn.layer = static_cast<int>(l);
    decode_->attention(attn, decode_counters_, stream);

    residual(c.q_dim(), act_.attn, W.wo, W.fo, W.bo, W.post_norm, act_.xn);
    if (W.moe_router != nullptr) {
      // A sparse layer: its experts (the MoE kernels, as the per-op step runs them) add into the
      // residual, and the combine then takes the next input RMSNorm, or the final one into the
      // lm_head's rows (the bits the RMSNorm kernel gives).
      run_moe(W, m, stream, last ? final_norm_ : layers_[static_cast<size_t>(l + 1)].input_norm, last ? act_.rows_normed : act_.xn);
      continue;
    }

    gpu::DecodeGemvArgs gu = gemv(gpu::DecodeEpilogue::kSiluMul, 2 * inter, h, act_.xn, W.wgate_up, W.fgate_up);
    gu.act = act_.act;
    gu.ldact = inter;
    decode_->gemv(gu, stream);

    // The next layer's input norm, or the final norm into the rows the lm_head reads.
    residual(inter, act_.act, W.wdown, W.fdown, nullptr, last ? final_norm_ : layers_[static_cast<size_t>(l + 1)].input_norm,
             last ? act_.rows_normed : act_.xn);
  }
  lm_head(plan.num_logit_rows);
}

gpu::DecodeGemvArgs GpuBackend::decode_gemv_args(gpu::DecodeEpilogue epilogue, int m, int64_t n, int64_t k, const gpu::bf16_bits* in,
                                                 const gpu::bf16_bits* w, const Fp8Weight& w8) const {
  gpu::DecodeGemvArgs g;
  g.epilogue = epilogue;
  g.m = m;
  g.n = static_cast<int>(n);
  g.k = static_cast<int>(k);
  g.a = in;
  g.lda = k;
  g.w = w;
  g.ldw = k;
  g.workspace = act_.gemm_workspace;
  g.workspace_floats = act_.gemm_workspace_floats;
  g.counters = decode_counters_;
  g.eps = static_cast<float>(config_.rms_norm_eps);
  if (w8) set_fp8_gemv(g, w8);
  return g;
}

void GpuBackend::set_fp8_gemv(gpu::DecodeGemvArgs& g, const Fp8Weight& w) const {
  g.w8 = w.w;
  g.ldw = w.k;
  g.w8_scales = w.scales;
  g.w8_groups = w.groups;
  g.w8_group_k = w.group_k;
  g.w8_act = fp8_w8a16_ ? gpu::Fp8Act::kNone : w.act;  // as gemm_fp8
  g.w8_act_static = w.act_static;
  g.w8_act_ub = w.act_ub;
}

/** Fast-path scratch for `rows` rows (grown, never shrunk; the device is idle when it grows). */
gpu::SampleFastArgs GpuBackend::sample_fast_args(int rows) {
  const int vocab = static_cast<int>(config_.vocab_size);
  const int64_t bytes = decode_->sample_fast_scratch_bytes(rows, vocab);
  const int64_t counters = decode_->sample_fast_counters(rows, vocab);
  if (bytes > sample_fast_bytes_ || counters > sample_fast_counter_count_) {
    device_->synchronize();
    device_->free(sample_fast_scratch_);
    device_->free(sample_fast_counters_);
    sample_fast_scratch_ = nullptr;
    sample_fast_counters_ = nullptr;
    sample_fast_bytes_ = sample_fast_counter_count_ = 0;
    const int64_t b = std::max(bytes, 2 * sample_fast_bytes_), n = std::max(counters, 2 * sample_fast_counter_count_);
    sample_fast_scratch_ = device_->alloc(static_cast<size_t>(b));
    sample_fast_counters_ = static_cast<int*>(device_->alloc(static_cast<size_t>(n) * sizeof(int)));
    device_->fill(sample_fast_counters_, 0, static_cast<size_t>(n) * sizeof(int));
    sample_fast_bytes_ = b;
    sample_fast_counter_count_ = n;
  }
  gpu::SampleFastArgs f;
  f.scratch = sample_fast_scratch_;
  f.counters = sample_fast_counters_;
  return f;
}

void GpuBackend::run_sampler(const gpu::SampleArgs& a) {
  if (sampler_fast_) {
    decode_->sample(a, sample_fast_args(a.num_rows), device_->stream());
  } else {
    kernels_->sample(a, device_->stream());
  }
}

}  // namespace tandem
