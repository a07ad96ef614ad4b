// CpuBackend: matrix weights kept in the checkpoint's precision where the GEMM can read it
// (bf16 stays bf16, f16 is widened to f32; see weight_matrix.h), norms and biases in f32, an f32
// paged KV pool allocated once, and a multi-threaded forward pass over a mixed prefill/decode
// batch. All compute is f32.
#pragma once

#include <memory>
#include <vector>

#include "../core/backend.h"
#include "kernels.h"
#include "lora_sgmv.h"
#include "moe.h"
#include "weight_matrix.h"

namespace tandem {

class CpuBackend final : public Backend {
 public:
  CpuBackend(const ModelConfig& config, const SafetensorsStore& weights, const BackendOptions& options,
             ThreadPool& pool);
  const char* name() const override { return "cpu"; }
  const KvLayout& kv_layout() const override { return layout_; }
  void forward(const ForwardBatch& batch) override;
  void sample(const std::vector<SampleRow>& rows, SampledRows& out) override;
  void read_logits(float* dst, int32_t rows) override;
  void pool_hidden(const ForwardBatch& batch, Pooling pooling, float* dst) override;
  void* kv_pool_base() override { return kv_base_; }
  std::string description() const override;
  void adopt_kv_pool(void* base) override;
  void kv_read_blocks(const int32_t* ids, int32_t n, void* dst, int l0, int l1) override;
  void kv_write_blocks(const int32_t* ids, int32_t n, const void* src, const KvLayout& src_layout, int64_t src_blocks, int l0,
                       int l1, int64_t src_first) override;
  const int64_t* layer_progress() const override { return progress_; }
  // No adapters on a mixture of experts (adapters on experts are out of scope): the model card says
  // so, and the frontend answers a load with 400 instead of calling a worker that would refuse.
  bool supports_lora() const override { return !config_.moe.enabled(); }
  void set_lora(int32_t slot, std::shared_ptr<const LoraAdapter> adapter) override;

 private:
  struct Layer {
    std::vector<float> input_norm, post_norm;
    cpu::WeightMatrix wqkv;  // q, k, v rows stacked: one GEMM per layer
    std::vector<float> bqkv;
    cpu::WeightMatrix wo;
    std::vector<float> bo;
    std::vector<float> q_norm, k_norm;
    cpu::WeightMatrix wgate_up;  // gate rows then up rows: one GEMM per layer
    cpu::WeightMatrix wdown;
    std::unique_ptr<cpu::MoeLayerWeights> moe;  // a sparse layer's router and experts (then no wgate_up/wdown)
  };

  void load_weights(const SafetensorsStore& weights, const BackendOptions& options);
  cpu::WeightMatrix linear(const SafetensorsStore& w, const std::vector<cpu::WeightMatrix::Part>& parts) const;
  void ensure_scratch(int64_t num_tokens);
  void attention(const ForwardBatch& batch, int64_t layer);
  void write_kv(const ForwardBatch& batch, int64_t layer);
  void lora_segments(const ForwardBatch& batch);
  void apply_lora(int64_t layer, LoraTarget target, const float* x, int64_t x_stride, float* out, int64_t out_stride,
                  int64_t col_offset);

  ModelConfig config_;
  KvLayout layout_;
  ThreadPool& pool_;
  std::vector<float> inv_freq_;

  cpu::WeightMatrix embed_;
  cpu::WeightMatrix lm_head_;  // empty when tied to embed_
  std::vector<float> final_norm_;
  std::vector<Layer> layers_;
  std::vector<float> kv_;     // own pool (f32, bf16 or e4m3 elements: layout_.elem_bytes); empty when the caller supplied one
  void* kv_base_ = nullptr;  // the pool in use: kv_.data() or BackendOptions::kv_pool
  std::vector<float> kv_scales_;  // [layer][k, v] e4m3 scales (fp8_weights.h load_kv_scales)
  bool fp8_weight_only_ = false;  // BackendOptions::fp8_compute "w8a16"

  // Per-step scratch, grown on demand and reused so steady-state steps do not allocate.
  std::vector<float> x_, xn_, qkv_, attn_, proj_, gate_up_, act_, rope_cos_, rope_sin_, rows_;
  std::vector<int32_t> token_pos_;
  cpu::PagedAttention attention_kernel_;
  cpu::MoeBlock moe_block_;
  float rope_scale_ = 1.0f;  // YaRN's attention factor on cos/sin
  std::vector<float> logits_;  // [num_logit_rows][vocab] of the last forward
  std::vector<std::unique_ptr<Sampler>> samplers_;  // one per pool worker
  int64_t progress_[2] = {0, 0};  // layer_progress(): forwards begun, layers written (atomic stores)

  std::vector<std::shared_ptr<const LoraAdapter>> loras_;  // by slot; null = empty
  std::vector<cpu::LoraSegment> lora_segments_;            // this forward's adapter runs
  std::vector<float> lora_scratch_;
};

}  // namespace tandem
