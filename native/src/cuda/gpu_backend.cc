#include "gpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "../core/embedding.h"
#include "../core/error.h"
#include "../core/safetensors.h"
#include "../core/thread_pool.h"
#include "../spec/verify.h"
#include "kv_pool_sizing.h"

namespace tandem {
namespace {

constexpr size_t kCublasLtWorkspaceBytes = size_t{32} << 20;  // cuBLASLt's recommendation for Hopper
// Decode graphs kept at once: batch buckets x block-table widths seen recently. The least
// recently replayed one goes when a new one would exceed this.
constexpr size_t kMaxGraphs = 48;

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

/** Decode-graph batch sizes: every size up to 8, then steps that keep padding under ~25%. */
int32_t graph_batch_bucket(int32_t n) {
  static const int32_t kBuckets[] = {1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256};
  for (int32_t b : kBuckets) {
    if (n <= b) return b;
  }
  return n;
}

int32_t next_pow2(int32_t n) {
  int32_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

}  // namespace

void GpuBackend::check_supported(const ModelConfig& c, const std::string& device) {
  auto refuse = [&](const std::string& what) {
    throw NativeError(ErrorCode::kConfigInvalid, "device '" + device + "': " + what);
  };
  if (c.head_dim % 8 != 0 || c.head_dim > gpu::kMaxHeadDim) {
    refuse("head_dim " + std::to_string(c.head_dim) + " is not supported (a multiple of 8, at most " +
           std::to_string(gpu::kMaxHeadDim) + ")");
  }
  if (c.hidden_size % 8 != 0) refuse("hidden_size " + std::to_string(c.hidden_size) + " is not a multiple of 8");
  if (c.intermediate_size % 8 != 0) {
    refuse("intermediate_size " + std::to_string(c.intermediate_size) + " is not a multiple of 8");
  }
  if (c.moe.enabled()) {
    if (c.moe.num_experts > gpu::kMoeMaxExperts) {
      refuse(std::to_string(c.moe.num_experts) + " experts is more than the " + std::to_string(gpu::kMoeMaxExperts) +
             " the MoE kernels hold (num_experts)");
    }
    if (c.hidden_size > gpu::kMoeMaxHidden || c.moe.expert_intermediate > gpu::kMoeMaxHidden) {
      refuse("MoE layers need hidden_size and the expert width at most " + std::to_string(gpu::kMoeMaxHidden));
    }
    if (c.moe.expert_intermediate % 8 != 0 || c.moe.shared_intermediate % 8 != 0) {
      refuse("the expert width (moe_intermediate_size) and shared_expert_intermediate_size must be multiples of 8");
    }
  }
  const int64_t group = c.num_heads / c.num_kv_heads;
  if (gpu::attention_tile_tokens(static_cast<int>(group), static_cast<int>(c.head_dim)) < 1) {
    refuse(std::to_string(group) + " query heads per KV head (num_attention_heads / num_key_value_heads) is more than the " +
           std::to_string(gpu::attention_max_rows(static_cast<int>(c.head_dim))) + " the attention kernel holds");
  }
}

GpuBackend::GpuBackend(const ModelConfig& config, const SafetensorsStore& weights, const BackendOptions& options,
                       ThreadPool& pool, std::unique_ptr<gpu::Device> device, std::unique_ptr<gpu::KernelApi> kernels)
    : config_(config), host_pool_(pool), device_(std::move(device)), kernels_(std::move(kernels)) {
  check_supported(config, options.device);
  const ModelConfig& c = config_;
  layout_.block_size = options.block_size;
  layout_.num_layers = c.num_layers;
  layout_.num_kv_heads = c.num_kv_heads;
  layout_.head_dim = c.head_dim;
  layout_.elem_bytes = kv_elem_bytes(options.device, options.kv_cache_dtype);
  qkv_width_ = c.q_dim() + 2 * c.kv_dim();
  logit_stride_ = round_up(c.vocab_size, 8);
  geo_.block_stride = layout_.block_stride();
  geo_.layer_stride = layout_.layer_stride();
  geo_.kv_stride = layout_.kv_stride();
  geo_.token_stride = layout_.token_stride();
  geo_.block_size = static_cast<int32_t>(layout_.block_size);
  geo_.num_kv_heads = static_cast<int32_t>(c.num_kv_heads);
  geo_.head_dim = static_cast<int32_t>(c.head_dim);
  plan_options_.block_size = static_cast<int32_t>(layout_.block_size);
  plan_options_.tile_tokens =
      gpu::attention_tile_tokens(static_cast<int>(c.num_heads / c.num_kv_heads), static_cast<int>(c.head_dim));
  plan_options_.num_kv_heads = static_cast<int32_t>(c.num_kv_heads);
  // A verify step's rows attend as one span (step_plan.h); TANDEM_GPU_VERIFY_SPANS=0 gives each
  // row its own blocks again (the before of a verify-step measurement), read once here.
  const char* spans = std::getenv("TANDEM_GPU_VERIFY_SPANS");
  plan_options_.span_tokens = spans != nullptr && std::string(spans) == "0" ? 1 : plan_options_.tile_tokens;
  plan_options_.sm_count = device_->info().sm_count;
  plan_options_.max_splits = max_splits_;
  graphs_enabled_ = options.cuda_graphs;
  max_graph_batch_ = static_cast<int32_t>(std::min<int64_t>(options.max_seqs * (1 + std::max<int64_t>(0, options.max_drafts)), 256));

  const bool simt = std::string(device_->kind()) == "simt";
  if (options.gemm != "auto" && options.gemm != "own" && options.gemm != "cublaslt") {
    throw NativeError(ErrorCode::kInvalidArgument, "gemm '" + options.gemm + "' (expected auto, cublaslt or own)");
  }
  if (options.gemm == "own") {
    cublaslt_note_ = "own kernels (as asked)";
  } else if (simt) {
    if (options.gemm == "cublaslt") throw NativeError(ErrorCode::kInvalidArgument, "gemm 'cublaslt' needs a CUDA device, not the SIMT harness");
    cublaslt_note_ = "own kernels (SIMT)";
  } else {
    cublaslt_ = gpu::CublasLt::open(&cublaslt_note_);
    if (!cublaslt_ && options.gemm == "cublaslt") throw NativeError(ErrorCode::kUnavailable, cublaslt_note_);
    if (!cublaslt_) cublaslt_note_ = "own kernels; " + cublaslt_note_;
  }

  try {
    load_weights(weights, pool);
    {
      const std::vector<float> kv_scales = load_kv_scales(weights, c);
      kv_scales_ = static_cast<float*>(alloc(kv_scales.size() * sizeof(float)));
      device_->upload(kv_scales_, kv_scales.data(), kv_scales.size() * sizeof(float));
      device_->synchronize();
    }
    if (cublaslt_) {
      lt_workspace_ = alloc(kCublasLtWorkspaceBytes);
      lt_workspace_bytes_ = kCublasLtWorkspaceBytes;
    }
    setup_fp8(options);  // after cuBLASLt's workspace: its FP8 probe runs products
    // Everything a step allocates, before the pool takes what is left: activations, the step
    // tables (a full batch with 2048-entry block tables), sampling scratch for every row.
    const int64_t tokens = std::max<int64_t>(1, options.max_batch_tokens), seqs = std::max<int64_t>(1, options.max_seqs);
    // Speculative decoding: a verify step samples 1 + max_drafts rows per sequence, each its own decode row.
    const int64_t rows = std::max(seqs, std::min(tokens, seqs * (1 + std::max<int64_t>(0, options.max_drafts))));
    ensure_activations(tokens, rows, rows);
    ensure_image(4 * tokens + 12 * rows + rows * 2048);
    const size_t mask_bytes = static_cast<size_t>((c.vocab_size + 31) / 32) * 4;
    ensure_sample_buffers(rows, static_cast<size_t>(rows) * (sizeof(gpu::SampleRowDesc) + mask_bytes + 4096),
                          static_cast<size_t>(rows) * (8 + 2 * 4 * 20));
    size_kv_pool(options);
    allocate_kv_staging();
    if (c.moe.enabled()) moe_kernels_ = simt ? gpu::make_simt_moe_kernels() : gpu::make_cuda_moe_kernels();
    init_decode_path();
    kv_copy_ = simt ? gpu::make_simt_kv_copy() : gpu::make_cuda_kv_copy();
    progress_ = static_cast<int64_t*>(device_->alloc_pinned(2 * sizeof(int64_t)));
    progress_[0] = progress_[1] = 0;
  } catch (...) {
    free_buffers();
    throw;
  }
}

GpuBackend::~GpuBackend() {
  try {
    device_->synchronize();
  } catch (...) {
    // Tearing down after a failed kernel: free what we can.
  }
  graphs_.clear();
  free_buffers();
}

// Everything the constructor may have allocated (a failed construction frees what it got).
void GpuBackend::free_buffers() noexcept {
  free_activations();
  for (void* p : allocations_) device_->free(p);
  allocations_.clear();
  device_->free(image_);
  device_->free_pinned(image_staging_);
  device_->free(sample_in_dev_);
  device_->free_pinned(sample_in_staging_);
  device_->free(sample_work_);
  device_->free(sample_out_dev_);
  device_->free_pinned(sample_out_staging_);
  device_->free_pinned(kv_staging_);
  device_->free(kv_ids_);
  for (void* p : kv_retired_pinned_) device_->free_pinned(p);
  for (void* p : kv_retired_device_) device_->free(p);
  device_->free_pinned(progress_);
  for (void* p : {static_cast<void*>(fp8_act_), static_cast<void*>(fp8_act_scales_), static_cast<void*>(fp8_act_dq_)}) device_->free(p);
  fp8_act_ = nullptr;
  fp8_act_scales_ = nullptr;
  fp8_act_dq_ = nullptr;
  fp8_act_elems_ = 0;
  device_->free(sample_fast_scratch_);
  device_->free(sample_fast_counters_);
  sample_fast_scratch_ = nullptr;
  sample_fast_counters_ = nullptr;
  image_ = image_staging_ = sample_in_dev_ = sample_in_staging_ = sample_out_dev_ = sample_out_staging_ = kv_staging_ = nullptr;
  sample_work_ = nullptr;
  kv_ids_ = nullptr;
  progress_ = nullptr;
  kv_retired_pinned_.clear();
  kv_retired_device_.clear();
}

void* GpuBackend::alloc(size_t bytes) {
  void* p = device_->alloc(bytes);
  allocations_.push_back(p);
  return p;
}

void GpuBackend::size_kv_pool(const BackendOptions& o) {
  const int64_t per_block = static_cast<int64_t>(layout_.bytes_per_block());
  gpu::DeviceMemory m;
  m.kind = device_->kind();
  m.total_bytes = static_cast<int64_t>(device_->info().total_bytes);
  m.free_bytes = static_cast<int64_t>(device_->free_bytes());
  const int64_t blocks = gpu::kv_pool_blocks(o, per_block, m);
  layout_.num_blocks = blocks;
  kv_ = static_cast<gpu::bf16_bits*>(alloc(static_cast<size_t>(blocks * per_block)));
  // Zeros, so graph padding that reads block 0 before anything was written stays finite.
  device_->fill(kv_, 0, static_cast<size_t>(blocks * per_block));
  device_->synchronize();
}

void GpuBackend::free_activations() {
  void* bufs[] = {act_.x, act_.xn, act_.qkv, act_.attn, act_.gate_up, act_.act, act_.rows_normed, act_.logits, act_.partial,
                  act_.gemm_workspace};
  for (void* p : bufs) device_->free(p);
  act_ = Activations{};
  free_moe_activations();
}

void GpuBackend::ensure_activations(int64_t tokens, int64_t rows, int64_t decode) {
  if (tokens <= act_.tokens && rows <= act_.rows && decode <= act_.decode) return;
  const ModelConfig& c = config_;
  const int64_t t = std::max(tokens, act_.tokens), r = std::max(rows, act_.rows), d = std::max(decode, act_.decode);
  device_->synchronize();
  graphs_.clear();  // captured pointers are about to change
  free_activations();
  act_.tokens = t;
  act_.rows = r;
  act_.decode = d;
  auto f32 = [&](int64_t n) { return static_cast<float*>(device_->alloc(static_cast<size_t>(n) * sizeof(float))); };
  auto bf16 = [&](int64_t n) { return static_cast<gpu::bf16_bits*>(device_->alloc(static_cast<size_t>(n) * 2)); };
  act_.x = f32(t * c.hidden_size);
  act_.xn = bf16(t * c.hidden_size);
  act_.qkv = f32(t * qkv_width_);
  act_.attn = bf16(t * c.q_dim());
  act_.gate_up = bf16(t * 2 * c.intermediate_size);
  act_.act = bf16(t * c.intermediate_size);
  act_.rows_normed = bf16(r * c.hidden_size);
  act_.logits = f32(r * logit_stride_);
  act_.partial = f32(d * max_splits_ * c.num_heads * gpu::attention_partial_floats(static_cast<int>(c.head_dim)));
  act_.gemm_workspace_floats = gpu::kGemmWorkspaceFloats;
  act_.gemm_workspace = f32(gpu::kGemmWorkspaceFloats);
  if (c.moe.enabled()) alloc_moe_activations(t);
}

void GpuBackend::ensure_image(int64_t elements) {
  const size_t need = static_cast<size_t>(elements) * 4;
  if (need <= image_capacity_bytes_) return;
  graphs_.clear();  // they read the tables at the old address
  grow_staged(image_, image_staging_, image_capacity_bytes_, need);
}

void GpuBackend::grow_staged(void*& device_buf, void*& pinned_buf, size_t& capacity, size_t need) {
  if (need <= capacity) return;
  const size_t cap = std::max(need, capacity * 2);
  device_->synchronize();  // nothing in flight may still read the old buffers
  device_->free(device_buf);
  device_->free_pinned(pinned_buf);
  device_buf = pinned_buf = nullptr;
  capacity = 0;
  device_buf = device_->alloc(cap);
  pinned_buf = device_->alloc_pinned(cap);
  capacity = cap;
}

void GpuBackend::adopt_kv_pool(void*) {
  throw NativeError(ErrorCode::kInvalidArgument, std::string("backend '") + name() + "' keeps its KV pool in device memory");
}

std::string GpuBackend::description() const {
  const gpu::DeviceInfo& i = device_->info();
  std::string s = std::string(device_->kind()) + ":" + std::to_string(i.ordinal) + " " + i.name;
  if (std::string(device_->kind()) == "cuda") {
    s += " (sm_" + std::to_string(i.cc_major) + std::to_string(i.cc_minor) + ", " + std::to_string(i.sm_count) + " SMs, " +
         gpu::mib(static_cast<int64_t>(i.total_bytes)) + ")";
  }
  s += "; GEMM: ";
  s += cublaslt_ ? "cuBLASLt " + std::to_string(cublaslt_->version()) + " (" + cublaslt_->path() + ")" : cublaslt_note_;
  s += graphs_enabled_ ? "; decode graphs up to batch " + std::to_string(max_graph_batch_) : "; no graphs (eager)";
  s += decode_fused_ ? "; fused decode up to " + std::to_string(decode_max_rows_) + " rows" : "; per-op decode";
  if (config_.moe.enabled()) s += "; " + moe_description();
  s += fp8_description();
  return s;
}

void GpuBackend::gemm(const gpu::GemmArgs& g, const Fp8Weight* fp8) {
  if (fp8 != nullptr && *fp8) {
    gemm_fp8(g, *fp8);
    return;
  }
  if (cublaslt_ && cublaslt_->matmul(g, lt_workspace_, lt_workspace_bytes_, device_->stream())) return;
  gpu::GemmArgs own = g;
  own.workspace = act_.gemm_workspace;
  own.workspace_floats = act_.gemm_workspace_floats;
  kernels_->gemm(own, device_->stream());
}

void GpuBackend::forward(const ForwardBatch& requested) {
  // Verify steps (speculative decoding): each draft row becomes a single-token sequence, so a
  // batch of decodes and verifies runs the decode path and replays its graphs (spec/verify.h).
  const ForwardBatch& batch = spec::expand_verify(requested, verify_batch_);
  const ModelConfig& c = config_;
  gpu::PlanOptions o = plan_options_;
  bool use_graph = false;
  int32_t padded = 0, width = 0;
  const int32_t n = static_cast<int32_t>(batch.seqs.size());
  if (graphs_enabled_ && n > 0 && n <= max_graph_batch_) {
    bool decode_only = true;
    int32_t max_blocks = 1;
    for (const ForwardSeq& s : batch.seqs) {
      decode_only &= s.num_tokens == 1 && s.want_logits;
      max_blocks = std::max(max_blocks, (s.start_pos + 1 + o.block_size - 1) / o.block_size);
    }
    if (decode_only) {
      use_graph = true;
      padded = std::min(graph_batch_bucket(n), max_graph_batch_);
      width = std::max(8, next_pow2(max_blocks));
      o.pad_to = padded;
      o.table_width = width;
    }
  }
  gpu::plan_step(batch, o, plan_);
  if (plan_.max_span > 1) ++span_forwards_;
  int32_t span_bound = 1;
  if (use_graph) {
    // The graph's launch holds spans up to a power of two (its shared memory is captured), and
    // its splits fill the device with that many rows to a block.
    span_bound = gpu::span_bucket(plan_.max_span, o.span_tokens);
    plan_.max_span = span_bound;
    plan_.num_splits = gpu::choose_decode_splits((padded + span_bound - 1) / span_bound, o.num_kv_heads, width * o.block_size,
                                                 o.sm_count, o.max_splits);
  }
  ensure_activations(plan_.num_tokens, plan_.num_logit_rows, plan_.num_decode);
  ensure_image(plan_.layout.total);
  // The reset below needs every mark of earlier forwards landed: a late one would announce a
  // layer of the old forward as this one's. A forward is drained by its sample(), or by the
  // synchronize at the end of a forward without logit rows; a step that failed between its
  // forward and its sample (bad supplied masks) left one running, so drain it here.
  if (forward_pending_) {
    device_->synchronize();
    forward_pending_ = false;
    ++undrained_forwards_;
  }
  assert_progress_settled();
  __atomic_store_n(&progress_[1], 0, __ATOMIC_RELEASE);
  __atomic_store_n(&progress_[0], progress_[0] + 1, __ATOMIC_RELEASE);
  if (fused_decode_applies(plan_)) ++fused_decode_steps_;
  std::memcpy(image_staging_, plan_.image.data(), static_cast<size_t>(plan_.layout.total) * 4);
  device_->upload(image_, image_staging_, static_cast<size_t>(plan_.layout.total) * 4);
  if (use_graph) {
    const auto key = std::make_tuple(padded, width, span_bound);
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
      if (graphs_.size() >= kMaxGraphs) {
        auto oldest = graphs_.begin();
        for (auto g = graphs_.begin(); g != graphs_.end(); ++g) {
          if (g->second.last_used < oldest->second.last_used) oldest = g;
        }
        graphs_.erase(oldest);
      }
      it = graphs_.emplace(key, CapturedGraph{device_->capture([&] { run_step(plan_); }), 0}).first;
    }
    it->second.graph->launch();
    it->second.last_used = ++graph_replays_;
  } else {
    run_step(plan_);
  }
  last_logit_rows_ = batch.num_logit_rows;
  (void)c;
  // Without rows to sample nothing else waits for this step: finish it here, so the staging
  // buffers are free and a kernel failure is reported by the step that caused it.
  if (batch.num_logit_rows == 0) {
    device_->synchronize();
  } else {
    forward_pending_ = true;
  }
}

// The precondition of the progress reset, checked from the pinned counter: every earlier
// forward's marks have landed, so it reads 0 (no forward yet) or the layer count (the last
// forward completed). Another value is either a forward that failed on the host partway (its
// launches stop; nothing is in flight) or a mark still queued behind the reset: the count then
// moves across a synchronize, and that is a draining bug, reported as one.
void GpuBackend::assert_progress_settled() {
  auto settled = [&](int64_t written) {
    return __atomic_load_n(&progress_[0], __ATOMIC_ACQUIRE) == 0 ? written == 0 : written == config_.num_layers;
  };
  const int64_t written = __atomic_load_n(&progress_[1], __ATOMIC_ACQUIRE);
  if (settled(written)) return;
  device_->synchronize();
  const int64_t after = __atomic_load_n(&progress_[1], __ATOMIC_ACQUIRE);
  if (after == written) return;
  throw NativeError(ErrorCode::kInternal, "layer progress: a mark of the previous forward (" + std::to_string(written) + " -> " +
                                              std::to_string(after) + " of " + std::to_string(config_.num_layers) +
                                              " layers) was still queued when the next forward began");
}

// Embeddings: the residual stream (act_.x, f32, rows in batch token order) comes to the host
// in one download per pass (embedding passes are prefill-sized, so this is small beside the
// forward), and pools there through the CPU backend's code (core/embedding.h): equal hidden
// states give equal vectors on both backends.
void GpuBackend::pool_hidden(const ForwardBatch& batch, Pooling pooling, float* dst) {
  const int64_t h = config_.hidden_size;
  std::vector<float> x(static_cast<size_t>(batch.num_tokens) * static_cast<size_t>(h));
  device_->download(x.data(), act_.x, x.size() * sizeof(float));
  device_->synchronize();
  pool_final_hidden(x.data(), batch, pooling, final_norm_host_.data(), h, static_cast<float>(config_.rms_norm_eps), dst, host_pool_);
}

}  // namespace tandem
