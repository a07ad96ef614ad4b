// GpuBackend: the Backend on a Device (CUDA, or the SIMT harness standing in for one) with
// the kernels of one target (KernelApi).
//   weights  bf16 on the device (q/k/v and gate/up fused), norms, biases and RoPE
//            frequencies f32; the KV pool bf16 in the engine's block layout.
//   a step   plan on the host (step_plan.h) -> one upload of the packed tables -> per layer:
//            RMSNorm, QKV GEMM, q/k norm + RoPE + KV write, paged attention, O GEMM into the
//            f32 residual, RMSNorm, gate/up GEMM, SwiGLU, down GEMM into the residual -> final
//            norm of the sampled rows -> lm_head GEMM (f32 logits stay on the device).
//   decode   a decode-only batch replays a captured graph of the whole forward, keyed by its
//            padded size, block-table width and decode-span bound (a verify step's rows
//            attend as one span, step_plan.h); kernel arguments are fixed at capture, the
//            tables change in place. Up to 16 rows (8 with FP8 weights) it runs the fused decode
//            kernels (gpu_backend_decode.cc, decode_api.h): 5 launches a dense layer, 6 a MoE one.
//   GEMMs    cuBLASLt when it loads and has an algorithm, our own kernels otherwise.
//   sampling on the device (kernels/sampling.cuh): only token ids and the asked logprobs
//            come back to the host.
// Files: gpu_backend.cc (construction, activations, the forward pass, decode graphs),
// gpu_backend_weights.cc (weight upload), kv_pool_sizing.{h,cc} (how many KV blocks),
// gpu_backend_sample.cc (sampling), gpu_backend_kv.cc (KV movement).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../core/backend.h"
#include "../core/fp8_weights.h"
#include "cublaslt.h"
#include "decode_api.h"
#include "device.h"
#include "fp8_kernels.h"
#include "kernel_api.h"
#include "kv_copy.h"
#include "moe_api.h"
#include "sample_inputs.h"
#include "step_plan.h"

namespace tandem {

class ThreadPool;

class GpuBackend final : public Backend {
 public:
  GpuBackend(const ModelConfig& config, const SafetensorsStore& weights, const BackendOptions& options, ThreadPool& pool,
             std::unique_ptr<gpu::Device> device, std::unique_ptr<gpu::KernelApi> kernels);
  ~GpuBackend() override;
  const char* name() const override { return device_->kind(); }
  const KvLayout& kv_layout() const override { return layout_; }
  void forward(const ForwardBatch& batch) override;
  void sample(const std::vector<SampleRow>& rows, SampledRows& out) override;
  void read_logits(float* dst, int32_t rows) override;
  void pool_hidden(const ForwardBatch& batch, Pooling pooling, float* dst) override;
  void* kv_pool_base() override { return kv_; }
  bool kv_pool_on_host() const override { return false; }
  void adopt_kv_pool(void* base) override;
  std::string description() const override;
  // KV movement (gpu_backend_kv.cc): the copy kernel on the device's side stream.
  void kv_read_blocks(const int32_t* ids, int32_t n, void* dst, int l0, int l1) override;
  void kv_write_blocks(const int32_t* ids, int32_t n, const void* src, const KvLayout& src_layout, int64_t src_blocks, int l0,
                       int l1, int64_t src_first) override;
  std::string kv_export_handle() override;
  void* kv_open_peer(const std::string& handle, size_t bytes) override;
  void kv_close_peer(void* base) override;
  void kv_copy_from_peer(void* peer_base, const KvLayout& peer, const int32_t* src_ids, int32_t ns, const int32_t* dst_ids,
                         int32_t nd, int l0, int l1, int64_t src_first) override;
  const int64_t* layer_progress() const override { return progress_; }

  /** Forwards with logit rows that no sample() drained, found running by the next forward (tests). */
  uint64_t undrained_forwards() const { return undrained_forwards_; }
  /** Forward passes that replayed a captured graph (tests, benchmarks). */
  uint64_t graph_replays() const { return graph_replays_; }
  size_t graphs_captured() const { return graphs_.size(); }
  /** Forward passes that ran the fused decode kernels (eager or replayed). */
  uint64_t fused_decode_steps() const { return fused_decode_steps_; }
  /** Forwards whose verify rows attended as decode spans (tests). */
  uint64_t span_forwards() const { return span_forwards_; }

  /** Refusals for what the kernels cannot run, naming the field (config_invalid). */
  static void check_supported(const ModelConfig& config, const std::string& device);

 private:
  /** An FP8 weight on the device (core/fp8_weights.h): e4m3 rows, scales per row and k group. */
  struct Fp8Weight {
    gpu::fp8_bits* w = nullptr;
    float* scales = nullptr;        // [n][groups]
    float* block_scales = nullptr;  // [ceil(n/128)][groups] when the stacked rows keep 128-row blocks (cuBLASLt's mode)
    int64_t n = 0, k = 0;
    int groups = 1, group_k = 0;
    gpu::Fp8Act act = gpu::Fp8Act::kNone;
    float act_static = 1.0f, act_ub = 0.0f;
    explicit operator bool() const { return w != nullptr; }
  };
  struct Layer {
    float* input_norm = nullptr;
    float* post_norm = nullptr;
    gpu::bf16_bits* wqkv = nullptr;
    float* bqkv = nullptr;
    gpu::bf16_bits* wo = nullptr;
    float* bo = nullptr;
    float* q_norm = nullptr;
    float* k_norm = nullptr;
    gpu::bf16_bits* wgate_up = nullptr;
    gpu::bf16_bits* wdown = nullptr;
    // A sparse layer (gpu_backend_moe.cc): router [E][H], experts' gate/up [E][2I][H] (gate rows
    // then up rows) and down [E][H][I]; Qwen2-MoE's shared expert and its gate. Null when dense.
    gpu::bf16_bits* moe_router = nullptr;
    gpu::bf16_bits* moe_gate_up = nullptr;
    gpu::bf16_bits* moe_down = nullptr;
    gpu::bf16_bits* shared_gate_up = nullptr;
    gpu::bf16_bits* shared_down = nullptr;
    gpu::bf16_bits* shared_gate = nullptr;
    // FP8 twins (gpu_backend_fp8.cc): set instead of the bf16 matrix when the weight is FP8.
    Fp8Weight fqkv, fo, fgate_up, fdown;
    // An FP8 checkpoint's experts, kept e4m3 (set instead of moe_gate_up / moe_down: every
    // expert's rows stacked, n = E x rows), and its shared expert's FP8 twins (the dense FP8 path).
    Fp8Weight moe_gate_up8, moe_down8;
    Fp8Weight fshared_gate_up, fshared_down;
  };
  /** MoE scratch for up to `tokens` tokens at a time (gpu_backend_moe.cc); larger steps run in chunks. */
  struct MoeActivations {
    int64_t tokens = 0, slots = 0;
    int32_t* ids = nullptr;
    float* weights = nullptr;
    float* logits = nullptr;
    int32_t* counts = nullptr;
    int32_t* padded_offsets = nullptr;
    int32_t* sorted = nullptr;
    int32_t* position = nullptr;
    int32_t* active = nullptr;
    int32_t* mma_tile_offsets = nullptr;  // [experts + 1]: the tensor-core grouped GEMM's tiles
    int32_t* group_counter = nullptr;     // the route kernel's CTAs count in on it (zero between launches)
    int32_t* tile_counters = nullptr;     // the few-tokens router's CTAs count in per token tile (zero between launches)
    int32_t* token_counters = nullptr;    // [tokens]: the down launch's CTAs count in on their rows' tokens (zero between launches)
    gpu::bf16_bits* act = nullptr;
    float* y = nullptr;
    gpu::bf16_bits* shared_gate_up = nullptr;
    gpu::bf16_bits* shared_act = nullptr;
    float* shared_out = nullptr;
  };
  /** Device buffers sized for a number of tokens and logit rows; reallocated to grow. */
  struct Activations {
    int64_t tokens = 0, rows = 0, decode = 0;
    float* x = nullptr;
    gpu::bf16_bits* xn = nullptr;
    float* qkv = nullptr;
    gpu::bf16_bits* attn = nullptr;
    gpu::bf16_bits* gate_up = nullptr;
    gpu::bf16_bits* act = nullptr;
    gpu::bf16_bits* rows_normed = nullptr;
    float* logits = nullptr;
    float* partial = nullptr;
    float* gemm_workspace = nullptr;
    int64_t gemm_workspace_floats = 0;
  };

  void* alloc(size_t bytes);
  // gpu_backend_weights.cc
  void load_weights(const SafetensorsStore& weights, ThreadPool& pool);
  gpu::bf16_bits* upload_bf16(const SafetensorsStore& w, const std::vector<std::pair<std::string, std::vector<int64_t>>>& parts,
                              ThreadPool& pool);
  float* upload_f32(const SafetensorsStore& w, const std::vector<std::string>& names, const std::vector<int64_t>& shape);
  /** The pool's blocks (kv_pool_sizing.h) allocated and zeroed. */
  void size_kv_pool(const BackendOptions& options);
  void ensure_activations(int64_t tokens, int64_t rows, int64_t decode);
  void free_activations();
  void free_buffers() noexcept;
  void ensure_image(int64_t elements);
  /** A device buffer and its pinned staging twin, regrown (doubling) to hold `need` bytes. */
  void grow_staged(void*& device_buf, void*& pinned_buf, size_t& capacity, size_t need);
  /** Sampling buffers for `rows` rows, `in_bytes` of packed inputs, `out_bytes` of results (gpu_backend_sample.cc). */
  void ensure_sample_buffers(int64_t rows, size_t in_bytes, size_t out_bytes);
  /** The fused decode path when it applies to the plan, else run_forward. */
  void run_step(const gpu::StepPlan& plan);
  void run_forward(const gpu::StepPlan& plan);
  gpu::QkvRopeArgs rope_args(const gpu::StepPlan& plan) const;
  gpu::AttentionArgs attention_args(const gpu::StepPlan& plan) const;
  /** An FP8 weight's rows times their scales as bf16 into out ([n][k]), on the stream (gpu_backend_fp8.cc). */
  void dequantize_fp8(const Fp8Weight& w, gpu::bf16_bits* out, void* stream);
  /**
   * A fused decode GEMV's arguments (gpu_backend_decode.cc): m rows of `in` ([m][k] bf16) times
   * weights [n][k] (bf16, or the FP8 twin w8 when the layer has one); the epilogue's own fields
   * are the caller's.
   */
  gpu::DecodeGemvArgs decode_gemv_args(gpu::DecodeEpilogue epilogue, int m, int64_t n, int64_t k, const gpu::bf16_bits* in,
                                       const gpu::bf16_bits* w, const Fp8Weight& w8) const;
  /** A fused decode GEMV over an FP8 weight: its e4m3 rows, scales and activation scheme (gpu_backend_decode.cc). */
  void set_fp8_gemv(gpu::DecodeGemvArgs& g, const Fp8Weight& w) const;
  /** logits[0, rows) = lm_head(rows_normed[0, rows)). */
  void lm_head(int32_t rows);
  // Mixture of experts (gpu_backend_moe.cc).
  void upload_moe_layer(const SafetensorsStore& w, int64_t layer, ThreadPool& pool);
  void alloc_moe_activations(int64_t tokens);
  void free_moe_activations();
  /**
   * The MoE MLP of rows [0, t) of act_.xn, added into act_.x; with norm_weight, then
   * norm_out[r] = rmsnorm(act_.x[r]) x norm_weight (the next norm, fused into the combine).
   */
  void run_moe(const Layer& W, int64_t t, void* stream, const float* norm_weight = nullptr, gpu::bf16_bits* norm_out = nullptr);
  /** How a step's grouped GEMMs run: 64- or 128-row tiles (mma_rows), or 8-row tiles (0) and their columns per CTA. */
  struct MoeGemmPlan {
    int mma_rows = 0;
    int gate_up_cols = 0, down_cols = 0;
  };
  /** The plan for a chunk of `tokens` (chosen per shape, kept in moe_tiles_). */
  const MoeGemmPlan& moe_gemm_plan(int64_t tokens);
  /** "MoE: ..." for description(): the grouped GEMMs' tiles chosen so far, per (tokens, columns). */
  std::string moe_description() const;
  /** Parts stacked by rows into one bf16 device matrix (staged through pinned buffers). */
  gpu::bf16_bits* upload_bf16_views(const std::vector<const TensorView*>& parts, ThreadPool& pool);
  /** The product with weight g.w, or with `fp8` when that weight is FP8 (gpu_backend_fp8.cc). */
  void gemm(const gpu::GemmArgs& g, const Fp8Weight* fp8 = nullptr);

  // FP8 (gpu_backend_fp8.cc).
  /** One matrix weight (parts stacked by rows): into *fp8 when it loads as FP8 (then null), else bf16 (FP8 parts dequantized). */
  gpu::bf16_bits* upload_matrix(const SafetensorsStore& w, const std::vector<WeightPart>& parts, bool linear, ThreadPool& pool,
                                Fp8Weight* fp8);
  Fp8Weight upload_fp8(const SafetensorsStore& w, const std::vector<WeightPart>& parts, ThreadPool& pool);
  gpu::bf16_bits* upload_dequantized(const SafetensorsStore& w, const std::vector<WeightPart>& parts, ThreadPool* pool = nullptr);
  /** The parts (FP8 ones with their scales, load_matrix_f32) as bf16 into dst (rows x cols of the stack). */
  void dequantize_into(const SafetensorsStore& w, const std::vector<WeightPart>& parts, gpu::bf16_bits* dst, ThreadPool* pool);
  /** After the weights: the FP8 kernels, W8A16 below sm_89, scratch, the cuBLASLt FP8 probe. */
  void setup_fp8(const BackendOptions& options);
  void ensure_fp8_dequant();
  void ensure_fp8_act(int64_t rows, int64_t k);
  void gemm_fp8(const gpu::GemmArgs& g, const Fp8Weight& w);
  bool gemm_fp8_lt(const gpu::GemmArgs& g, const Fp8Weight& w, gpu::CublasLt::Fp8Scale mode, bool act_kmajor);
  void probe_lt_fp8();
  std::string fp8_description() const;
  // gpu_backend_decode.cc: the fused decode step and the sampler's fast path.
  void init_decode_path();
  bool fused_decode_applies(const gpu::StepPlan& plan) const;
  void run_decode_fused(const gpu::StepPlan& plan);
  gpu::SampleFastArgs sample_fast_args(int rows);
  void run_sampler(const gpu::SampleArgs& a);

  ModelConfig config_;
  ThreadPool& host_pool_;  // the Engine's (it outlives the backend): embedding pooling
  KvLayout layout_;
  std::unique_ptr<gpu::Device> device_;
  std::unique_ptr<gpu::KernelApi> kernels_;
  std::unique_ptr<gpu::CublasLt> cublaslt_;
  std::string cublaslt_note_;  // why it is not used, when it is not
  std::vector<void*> allocations_;  // weights and the pool, freed at destruction

  gpu::bf16_bits* embed_ = nullptr;
  gpu::bf16_bits* lm_head_ = nullptr;  // == embed_ when tied
  float* final_norm_ = nullptr;
  std::vector<float> final_norm_host_;  // embeddings: the final norm runs on the host (pool_final_hidden)
  float* inv_freq_ = nullptr;
  std::vector<Layer> layers_;
  gpu::bf16_bits* kv_ = nullptr;

  int64_t qkv_width_ = 0;
  int64_t logit_stride_ = 0;  // vocab rounded up to 8
  gpu::PoolGeometry geo_;
  gpu::PlanOptions plan_options_;
  bool graphs_enabled_ = true;
  int32_t max_graph_batch_ = 256;
  int32_t max_splits_ = 16;
  void* lt_workspace_ = nullptr;
  size_t lt_workspace_bytes_ = 0;

  Activations act_;
  MoeActivations moe_act_;
  std::unique_ptr<gpu::MoeKernelApi> moe_kernels_;
  std::map<int64_t, MoeGemmPlan> moe_tiles_;  // chunk tokens -> the grouped GEMMs' plan
  int moe_force_mma_rows_ = -1;               // benchmarks: -1 the plan's choice, 0 8-row tiles, or 64/128
  int32_t* moe_hits_ = nullptr;  // [num_layers]: experts the last step's (last chunk of each) sparse layer hit
  bool moe_fp8_dequantized_ = false;  // an FP8 checkpoint's experts (or shared expert) dequantized to bf16 at load (--quantization none)
  bool moe_fp8_experts_ = false;      // an FP8 checkpoint's experts kept e4m3 (Layer::moe_gate_up8 / moe_down8)
  /** Experts stacked by rows into one bf16 matrix; FP8 ones dequantized with their scales (dequantize_into), each in turn. */
  gpu::bf16_bits* upload_expert_views(const SafetensorsStore& w, const std::vector<std::vector<const TensorView*>>& groups,
                                      ThreadPool& pool);
  /** The same experts kept e4m3 with per-(row, k group) scales, stacked; an empty Fp8Weight where they do not load as FP8. */
  Fp8Weight upload_fp8_experts(const SafetensorsStore& w, const std::vector<std::vector<const TensorView*>>& groups, ThreadPool& pool);
  /** The grouped GEMM's weights: the bf16 experts, or the e4m3 ones with their scales (both paths read them). */
  void set_moe_weights(gpu::MoeGemmArgs& g, gpu::bf16_bits* bf16, const Fp8Weight& f8);

 public:
  /** Distinct experts each layer's MoE block ran in the last forward (its last chunk); 0 for dense layers. Benchmarks. */
  std::vector<int32_t> moe_experts_hit();
  /**
   * Benchmarks: run the grouped GEMMs over 8-row tiles (0), over 64- or 128-row
   * tiles (gpu::kMoeMmaRowsSmall / Large), or as the plan chooses (-1, the default). Forgets the
   * plans made so far.
   */
  void force_moe_gemm(int mma_rows);

 private:
  void* image_ = nullptr;  // the packed step tables on the device
  size_t image_capacity_bytes_ = 0;
  void* image_staging_ = nullptr;  // pinned
  int32_t last_logit_rows_ = 0;
  gpu::StepPlan plan_;
  ForwardBatch verify_batch_;  // forward()'s batch with verify sequences expanded (spec/verify.h)

  struct CapturedGraph {
    std::unique_ptr<gpu::Graph> graph;
    uint64_t last_used = 0;
  };
  std::map<std::tuple<int32_t, int32_t, int32_t>, CapturedGraph> graphs_;  // (padded batch, table width, span bound)
  uint64_t graph_replays_ = 0;

  // Sampling: inputs packed on the host, one upload; outputs one download.
  gpu::SampleInputs sample_inputs_;
  void* sample_in_dev_ = nullptr;
  size_t sample_in_capacity_ = 0;
  void* sample_in_staging_ = nullptr;
  float* sample_work_ = nullptr;
  int64_t sample_work_rows_ = 0;
  void* sample_out_dev_ = nullptr;
  void* sample_out_staging_ = nullptr;
  size_t sample_out_capacity_ = 0;

  // The fused decode path (gpu_backend_decode.cc). TANDEM_GPU_DECODE=unfused and
  // TANDEM_GPU_SAMPLER=block select the per-op kernels and the one-block sampler (before/after
  // measurements); read once, at construction.
  std::unique_ptr<gpu::DecodeKernelApi> decode_;
  bool decode_fused_ = true;
  int decode_max_rows_ = gpu::kDecodeMaxRows;  // padded rows the fused path takes
  bool sampler_fast_ = true;
  uint64_t fused_decode_steps_ = 0;
  uint64_t span_forwards_ = 0;
  int* decode_counters_ = nullptr;  // device, zero between launches (allocations_)
  int64_t decode_counters_count_ = 0;
  void* sample_fast_scratch_ = nullptr;
  int* sample_fast_counters_ = nullptr;
  int64_t sample_fast_bytes_ = 0;
  int64_t sample_fast_counter_count_ = 0;

  // KV movement (gpu_backend_kv.cc).
  /** The pinned staging (two halves for host <-> pool copies) and the device id buffer, once at construction. */
  void allocate_kv_staging();
  /** Pinned staging of at least `bytes`; grows (retiring the old buffer, never freeing it) only past the preallocation. */
  void* kv_staging(size_t bytes);
  /** Device memory for `count` block ids (the kernel reads its tables from device memory, not over PCIe); grows like kv_staging. */
  int32_t* kv_ids(size_t count);
  std::unique_ptr<gpu::KvCopyApi> kv_copy_;
  void* kv_staging_ = nullptr;  // pinned
  size_t kv_staging_bytes_ = 0;
  int32_t* kv_ids_ = nullptr;  // device
  size_t kv_ids_count_ = 0;
  std::vector<void*> kv_retired_pinned_;  // outgrown staging, freed with the backend
  std::vector<void*> kv_retired_device_;  // outgrown id buffers, freed with the backend
  bool kv_exported_ = false;
  // FP8 (gpu_backend_fp8.cc).
  std::unique_ptr<gpu::Fp8KernelApi> fp8_kernels_;
  bool fp8_weights_ = false;  // some weight is FP8
  bool fp8_w8a16_ = false;    // activations stay bf16 (fp8_compute w8a16, or no FP8 tensor cores)
  std::string fp8_note_;      // why W8A16 was forced, for the log line and description()
  int64_t fp8_max_elems_ = 0, fp8_max_k_ = 0;
  bool lt_fp8_[2] = {false, false};  // cuBLASLt FP8 per Fp8Scale, verified by probe_lt_fp8
  bool lt_act_kmajor_ = false;       // block mode: activation scales token-contiguous per group
  int64_t fp8_act_elems_ = 0;
  gpu::fp8_bits* fp8_act_ = nullptr;        // [tokens][k] quantized activations
  float* fp8_act_scales_ = nullptr;
  gpu::bf16_bits* fp8_act_dq_ = nullptr;    // [tokens][k] activations through e4m3, as bf16 (fallback)
  gpu::bf16_bits* fp8_dequant_ = nullptr;   // the fallback's bf16 weight, allocated on first use
  float* kv_scales_ = nullptr;              // [layer][k, v] e4m3 KV scales (device)
  // layer_progress(): pinned, [0] forwards begun (host), [1] layers written (a kernel after each
  // layer's K/V write), so a poller sees the device's progress without a CUDA call.
  int64_t* progress_ = nullptr;
  void assert_progress_settled();
  // A forward with logit rows is queued and not yet drained by sample() (or a synchronize).
  bool forward_pending_ = false;
  uint64_t undrained_forwards_ = 0;
};

}  // namespace tandem
