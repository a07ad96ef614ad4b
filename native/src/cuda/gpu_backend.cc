#include "gpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../core/error.h"
#include "../core/safetensors.h"
#include "../core/thread_pool.h"
#include "../spec/verify.h"

namespace tandem {
namespace {

constexpr size_t kCublasLtWorkspaceBytes = size_t{32} << 20;  // cuBLASLt's recommendation for Hopper
constexpr size_t kUploadChunkElements = size_t{16} << 20;     // 32 MiB of bf16 per staged upload
constexpr int64_t kSimtDefaultKvBytes = int64_t{256} << 20;   // the SIMT device's pool without a size
constexpr double kDefaultGpuMemoryUtilization = 0.9;
constexpr int64_t kReserveBytes = int64_t{256} << 20;  // graphs, cuBLASLt, the driver's own growth
// Decode graphs kept at once: batch buckets x block-table widths seen recently. The least
// recently replayed one goes when a new one would exceed this.
constexpr size_t kMaxGraphs = 48;

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

void to_bf16(const TensorView& t, size_t begin, size_t count, gpu::bf16_bits* out) {
  switch (t.dtype) {
    case DType::kBF16:
      std::memcpy(out, t.data + begin * 2, count * 2);
      return;
    case DType::kF32: {
      const auto* src = reinterpret_cast<const float*>(t.data) + begin;
      for (size_t i = 0; i < count; ++i) out[i] = gpu::float_to_bf16_bits(src[i]);
      return;
    }
    case DType::kF16: {
      const auto* src = reinterpret_cast<const uint16_t*>(t.data) + begin;
      for (size_t i = 0; i < count; ++i) out[i] = gpu::float_to_bf16_bits(f16_to_f32(src[i]));
      return;
    }
  }
}

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

std::string mib(int64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

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
  const int64_t group = c.num_heads / c.num_kv_heads;
  if (gpu::attention_tile_tokens(static_cast<int>(group), static_cast<int>(c.head_dim)) < 1) {
    refuse(std::to_string(group) + " query heads per KV head (num_attention_heads / num_key_value_heads) is more than the " +
           std::to_string(gpu::attention_max_rows(static_cast<int>(c.head_dim))) + " the attention kernel holds");
  }
}

GpuBackend::GpuBackend(const ModelConfig& config, const SafetensorsStore& weights, const BackendOptions& options,
                       ThreadPool& pool, std::unique_ptr<gpu::Device> device, std::unique_ptr<gpu::KernelApi> kernels)
    : config_(config), device_(std::move(device)), kernels_(std::move(kernels)) {
  check_supported(config, options.device);
  const ModelConfig& c = config_;
  layout_.block_size = options.block_size;
  layout_.num_layers = c.num_layers;
  layout_.num_kv_heads = c.num_kv_heads;
  layout_.head_dim = c.head_dim;
  layout_.elem_bytes = 2;
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
    if (cublaslt_) {
      lt_workspace_ = alloc(kCublasLtWorkspaceBytes);
      lt_workspace_bytes_ = kCublasLtWorkspaceBytes;
    }
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
    kv_copy_ = simt ? gpu::make_simt_kv_copy() : gpu::make_cuda_kv_copy();
    progress_ = static_cast<int64_t*>(device_->alloc_pinned(2 * sizeof(int64_t)));
    progress_[0] = progress_[1] = 0;
  } catch (...) {
    free_activations();
    for (void* p : allocations_) device_->free(p);
    allocations_.clear();
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
  free_activations();
  for (void* p : allocations_) device_->free(p);
  device_->free(image_);
  device_->free_pinned(image_staging_);
  device_->free(sample_in_dev_);
  device_->free_pinned(sample_in_staging_);
  device_->free(sample_work_);
  device_->free(sample_out_dev_);
  device_->free_pinned(sample_out_staging_);
  device_->free_pinned(kv_staging_);
  device_->free(kv_ids_);
  device_->free_pinned(progress_);
}

void* GpuBackend::alloc(size_t bytes) {
  void* p = device_->alloc(bytes);
  allocations_.push_back(p);
  return p;
}

gpu::bf16_bits* GpuBackend::upload_bf16(const SafetensorsStore& w,
                                        const std::vector<std::pair<std::string, std::vector<int64_t>>>& parts,
                                        ThreadPool& pool) {
  int64_t rows = 0;
  const int64_t cols = parts.front().second[1];
  for (const auto& [name, shape] : parts) rows += shape[0];
  auto* dst = static_cast<gpu::bf16_bits*>(alloc(static_cast<size_t>(rows * cols) * 2));
  // Two pinned staging buffers: the next chunk converts while the previous one uploads.
  const size_t chunk = std::min<size_t>(kUploadChunkElements, static_cast<size_t>(rows * cols));
  gpu::bf16_bits* staging[2] = {static_cast<gpu::bf16_bits*>(device_->alloc_pinned(chunk * 2)),
                                static_cast<gpu::bf16_bits*>(device_->alloc_pinned(chunk * 2))};
  int cur = 0;
  size_t at = 0;
  try {
    for (const auto& [name, shape] : parts) {
      const TensorView& t = w.require(name, shape);
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
  embed_ = upload_bf16(w, {{"model.embed_tokens.weight", {c.vocab_size, h}}}, pool);
  lm_head_ = c.tie_word_embeddings ? embed_ : upload_bf16(w, {{"lm_head.weight", {c.vocab_size, h}}}, pool);
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
    L.wqkv = upload_bf16(w,
                         {{layer_tensor(l, "self_attn.q_proj.weight"), {c.q_dim(), h}},
                          {layer_tensor(l, "self_attn.k_proj.weight"), {c.kv_dim(), h}},
                          {layer_tensor(l, "self_attn.v_proj.weight"), {c.kv_dim(), h}}},
                         pool);
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
    L.wo = upload_bf16(w, {{layer_tensor(l, "self_attn.o_proj.weight"), {h, c.q_dim()}}}, pool);
    if (c.o_bias) L.bo = upload_f32(w, {layer_tensor(l, "self_attn.o_proj.bias")}, {h});
    if (c.qk_norm) {
      L.q_norm = upload_f32(w, {layer_tensor(l, "self_attn.q_norm.weight")}, {c.head_dim});
      L.k_norm = upload_f32(w, {layer_tensor(l, "self_attn.k_norm.weight")}, {c.head_dim});
    }
    L.wgate_up = upload_bf16(w,
                             {{layer_tensor(l, "mlp.gate_proj.weight"), {c.intermediate_size, h}},
                              {layer_tensor(l, "mlp.up_proj.weight"), {c.intermediate_size, h}}},
                             pool);
    L.wdown = upload_bf16(w, {{layer_tensor(l, "mlp.down_proj.weight"), {h, c.intermediate_size}}}, pool);
  }
}

void GpuBackend::size_kv_pool(const BackendOptions& o) {
  const int64_t per_block = static_cast<int64_t>(layout_.bytes_per_block());
  int64_t blocks = 0;
  const bool simt = std::string(device_->kind()) == "simt";
  if (o.num_blocks > 0) {
    blocks = o.num_blocks;
  } else if (o.memory_budget_bytes > 0 || simt) {
    blocks = (o.memory_budget_bytes > 0 ? o.memory_budget_bytes : kSimtDefaultKvBytes) / per_block;
  } else {
    const double util = o.gpu_memory_utilization > 0 ? o.gpu_memory_utilization : kDefaultGpuMemoryUtilization;
    if (util > 1.0) throw NativeError(ErrorCode::kInvalidArgument, "gpuMemoryUtilization must be in (0, 1]");
    const int64_t total = static_cast<int64_t>(device_->info().total_bytes);
    const int64_t used = total - static_cast<int64_t>(device_->free_bytes());  // weights, activations, other processes
    const int64_t budget = static_cast<int64_t>(util * static_cast<double>(total)) - used - kReserveBytes;
    blocks = budget / per_block;
    if (blocks < 1) {
      throw NativeError(ErrorCode::kResourceExhausted,
                        "device '" + std::string(device_->kind()) + "': " + mib(used) + " of " + mib(total) +
                            " is in use after loading the weights and activations; a GPU memory utilization of " +
                            std::to_string(util) + " leaves no room for a KV block of " + std::to_string(per_block) +
                            " bytes (raise --gpu-memory-utilization, or lower --max-num-batched-tokens)");
    }
  }
  if (blocks < 1) {
    throw NativeError(ErrorCode::kInvalidArgument, "the KV pool holds no block (one block is " + std::to_string(per_block) + " bytes)");
  }
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

void GpuBackend::ensure_sample_buffers(int64_t rows, size_t in_bytes, size_t out_bytes) {
  // Grown rarely (a longer penalty history, more top logprobs than ever before); each buffer is
  // replaced only after the device is idle, so nothing in flight reads the old one.
  grow_staged(sample_in_dev_, sample_in_staging_, sample_in_capacity_, in_bytes);
  if (rows > sample_work_rows_) {
    const int64_t cap = std::max(rows, sample_work_rows_ * 2);
    device_->synchronize();
    device_->free(sample_work_);
    sample_work_ = nullptr;
    sample_work_rows_ = 0;
    sample_work_ = static_cast<float*>(device_->alloc(static_cast<size_t>(cap * config_.vocab_size) * sizeof(float)));
    sample_work_rows_ = cap;
  }
  grow_staged(sample_out_dev_, sample_out_staging_, sample_out_capacity_, out_bytes);
}

void GpuBackend::adopt_kv_pool(void*) {
  throw NativeError(ErrorCode::kInvalidArgument, std::string("backend '") + name() + "' keeps its KV pool in device memory");
}

std::string GpuBackend::description() const {
  const gpu::DeviceInfo& i = device_->info();
  std::string s = std::string(device_->kind()) + ":" + std::to_string(i.ordinal) + " " + i.name;
  if (std::string(device_->kind()) == "cuda") {
    s += " (sm_" + std::to_string(i.cc_major) + std::to_string(i.cc_minor) + ", " + std::to_string(i.sm_count) + " SMs, " +
         mib(static_cast<int64_t>(i.total_bytes)) + ")";
  }
  s += "; GEMM: ";
  s += cublaslt_ ? "cuBLASLt " + std::to_string(cublaslt_->version()) + " (" + cublaslt_->path() + ")" : cublaslt_note_;
  s += graphs_enabled_ ? "; decode graphs up to batch " + std::to_string(max_graph_batch_) : "; no graphs (eager)";
  return s;
}

void GpuBackend::gemm(const gpu::GemmArgs& g) {
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
      o.force_splits = gpu::choose_decode_splits(padded, o.num_kv_heads, width * o.block_size, o.sm_count, o.max_splits);
    }
  }
  gpu::plan_step(batch, o, plan_);
  ensure_activations(plan_.num_tokens, plan_.num_logit_rows, plan_.num_decode);
  ensure_image(plan_.layout.total);
  // The previous forward has finished (sampled, or synchronized below): no mark is in flight.
  __atomic_store_n(&progress_[1], 0, __ATOMIC_RELEASE);
  __atomic_store_n(&progress_[0], progress_[0] + 1, __ATOMIC_RELEASE);
  std::memcpy(image_staging_, plan_.image.data(), static_cast<size_t>(plan_.layout.total) * 4);
  device_->upload(image_, image_staging_, static_cast<size_t>(plan_.layout.total) * 4);
  if (use_graph) {
    const auto key = std::make_pair(padded, width);
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
      if (graphs_.size() >= kMaxGraphs) {
        auto oldest = graphs_.begin();
        for (auto g = graphs_.begin(); g != graphs_.end(); ++g) {
          if (g->second.last_used < oldest->second.last_used) oldest = g;
        }
        graphs_.erase(oldest);
      }
      it = graphs_.emplace(key, CapturedGraph{device_->capture([&] { run_forward(plan_); }), 0}).first;
    }
    it->second.graph->launch();
    it->second.last_used = ++graph_replays_;
  } else {
    run_forward(plan_);
  }
  last_logit_rows_ = batch.num_logit_rows;
  (void)c;
  // Without rows to sample nothing else waits for this step: finish it here, so the staging
  // buffers are free and a kernel failure is reported by the step that caused it.
  if (batch.num_logit_rows == 0) device_->synchronize();
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

  gpu::GemmArgs g;
  g.m = static_cast<int>(t);

  gpu::QkvRopeArgs rope;
  rope.qkv = act_.qkv;
  rope.qkv_stride = qkv_width_;
  rope.num_tokens = static_cast<int>(t);
  rope.eps = eps;
  rope.positions = img + L.positions;
  rope.slots = img + L.slots;
  rope.inv_freq = inv_freq_;
  rope.num_heads = static_cast<int>(c.num_heads);
  rope.num_kv_heads = static_cast<int>(c.num_kv_heads);
  rope.head_dim = static_cast<int>(c.head_dim);
  rope.pool = kv_;
  rope.geo = geo_;

  gpu::AttentionArgs attn;
  attn.q = act_.qkv;
  attn.q_stride = qkv_width_;
  attn.out = act_.attn;
  attn.out_stride = c.q_dim();
  attn.pool = kv_;
  attn.geo = geo_;
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

  gpu::SiluMulArgs silu;
  silu.gate_up = act_.gate_up;
  silu.num_tokens = static_cast<int>(t);
  silu.inter = static_cast<int>(inter);
  silu.out = act_.act;

  for (int64_t l = 0; l < c.num_layers; ++l) {
    const Layer& W = layers_[static_cast<size_t>(l)];
    norm.weight = W.input_norm;
    kernels_->rmsnorm(norm, stream);
    g.n = static_cast<int>(qkv_width_);
    g.k = static_cast<int>(h);
    g.a = act_.xn;
    g.lda = h;
    g.w = W.wqkv;
    g.ldw = h;
    g.bias = nullptr;
    g.c = act_.qkv;
    g.ldc = qkv_width_;
    g.out = gpu::GemmOut::kF32;
    g.accumulate = false;
    gemm(g);
    rope.bias = W.bqkv;
    rope.q_norm = W.q_norm;
    rope.k_norm = W.k_norm;
    rope.layer = static_cast<int>(l);
    kernels_->qkv_rope(rope, stream);
    kv_copy_->mark(&progress_[1], l + 1, stream);  // layer l's K/V is in the pool
    attn.layer = static_cast<int>(l);
    kernels_->attention(attn, stream);
    g.n = static_cast<int>(h);
    g.k = static_cast<int>(c.q_dim());
    g.a = act_.attn;
    g.lda = c.q_dim();
    g.w = W.wo;
    g.ldw = c.q_dim();
    g.bias = W.bo;
    g.c = act_.x;
    g.ldc = h;
    g.accumulate = true;
    gemm(g);
    norm.weight = W.post_norm;
    kernels_->rmsnorm(norm, stream);
    g.n = static_cast<int>(2 * inter);
    g.k = static_cast<int>(h);
    g.a = act_.xn;
    g.lda = h;
    g.w = W.wgate_up;
    g.ldw = h;
    g.bias = nullptr;
    g.c = act_.gate_up;
    g.ldc = 2 * inter;
    g.out = gpu::GemmOut::kBf16;
    g.accumulate = false;
    gemm(g);
    kernels_->silu_mul(silu, stream);
    g.n = static_cast<int>(h);
    g.k = static_cast<int>(inter);
    g.a = act_.act;
    g.lda = inter;
    g.w = W.wdown;
    g.ldw = inter;
    g.c = act_.x;
    g.ldc = h;
    g.out = gpu::GemmOut::kF32;
    g.accumulate = true;
    gemm(g);
  }
  if (plan.num_logit_rows == 0) return;
  gpu::RmsNormArgs fin = norm;
  fin.rows = img + L.logit_rows;
  fin.num_rows = plan.num_logit_rows;
  fin.weight = final_norm_;
  fin.out = act_.rows_normed;
  kernels_->rmsnorm(fin, stream);
  g.m = plan.num_logit_rows;
  g.n = static_cast<int>(c.vocab_size);
  g.k = static_cast<int>(h);
  g.a = act_.rows_normed;
  g.lda = h;
  g.w = lm_head_;
  g.ldw = h;
  g.bias = nullptr;
  g.c = act_.logits;
  g.ldc = logit_stride_;
  g.out = gpu::GemmOut::kF32;
  g.accumulate = false;
  gemm(g);
}

void GpuBackend::sample(const std::vector<SampleRow>& rows, SampledRows& out) {
  const int n = static_cast<int>(rows.size());
  const int vocab = static_cast<int>(config_.vocab_size);
  gpu::SampleInputs& in = sample_inputs_;
  in.build(rows.data(), rows.size(), vocab);
  const int32_t top = in.top_stride;

  // One upload: [row descs][penalties][bias ids][bias values][masks], each 16-byte aligned.
  auto align = [](size_t b) { return (b + 15) / 16 * 16; };
  const size_t o_rows = 0;
  const size_t o_pen = align(o_rows + in.rows.size() * sizeof(gpu::SampleRowDesc));
  const size_t o_bid = align(o_pen + in.penalties.size() * sizeof(gpu::PenaltyEntry));
  const size_t o_bval = align(o_bid + in.bias_ids.size() * sizeof(int32_t));
  const size_t o_mask = align(o_bval + in.bias_values.size() * sizeof(float));
  const size_t in_bytes = align(o_mask + in.masks.size() * sizeof(uint32_t));
  // Outputs: [tokens][logprobs][top ids][top logprobs].
  const size_t o_tok = 0, o_lp = align(static_cast<size_t>(n) * 4), o_tid = align(o_lp + static_cast<size_t>(n) * 4);
  const size_t o_tlp = align(o_tid + static_cast<size_t>(n) * static_cast<size_t>(top) * 4);
  const size_t out_bytes = align(o_tlp + static_cast<size_t>(n) * static_cast<size_t>(top) * 4);
  ensure_sample_buffers(n, in_bytes, out_bytes);
  auto* st = static_cast<char*>(sample_in_staging_);
  std::memcpy(st + o_rows, in.rows.data(), in.rows.size() * sizeof(gpu::SampleRowDesc));
  std::memcpy(st + o_pen, in.penalties.data(), in.penalties.size() * sizeof(gpu::PenaltyEntry));
  std::memcpy(st + o_bid, in.bias_ids.data(), in.bias_ids.size() * sizeof(int32_t));
  std::memcpy(st + o_bval, in.bias_values.data(), in.bias_values.size() * sizeof(float));
  std::memcpy(st + o_mask, in.masks.data(), in.masks.size() * sizeof(uint32_t));
  device_->upload(sample_in_dev_, sample_in_staging_, in_bytes);

  auto* din = static_cast<char*>(sample_in_dev_);
  auto* dout = static_cast<char*>(sample_out_dev_);
  gpu::SampleArgs a;
  a.logits = act_.logits;
  a.logit_stride = logit_stride_;
  a.vocab = vocab;
  a.rows = reinterpret_cast<const gpu::SampleRowDesc*>(din + o_rows);
  a.num_rows = n;
  a.penalties = reinterpret_cast<const gpu::PenaltyEntry*>(din + o_pen);
  a.bias_ids = reinterpret_cast<const int32_t*>(din + o_bid);
  a.bias_values = reinterpret_cast<const float*>(din + o_bval);
  a.masks = reinterpret_cast<const uint32_t*>(din + o_mask);
  a.work = sample_work_;
  a.top_stride = top;
  a.out_tokens = reinterpret_cast<int32_t*>(dout + o_tok);
  a.out_logprobs = reinterpret_cast<float*>(dout + o_lp);
  a.out_top_ids = reinterpret_cast<int32_t*>(dout + o_tid);
  a.out_top_logprobs = reinterpret_cast<float*>(dout + o_tlp);
  kernels_->sample(a, device_->stream());
  device_->download(sample_out_staging_, sample_out_dev_, out_bytes);
  device_->synchronize();

  const char* host = static_cast<const char*>(sample_out_staging_);
  out.tokens.assign(reinterpret_cast<const int32_t*>(host + o_tok), reinterpret_cast<const int32_t*>(host + o_tok) + n);
  out.logprobs.assign(reinterpret_cast<const float*>(host + o_lp), reinterpret_cast<const float*>(host + o_lp) + n);
  out.top_stride = top;
  const size_t tn = static_cast<size_t>(n) * static_cast<size_t>(top);
  out.top_ids.assign(reinterpret_cast<const int32_t*>(host + o_tid), reinterpret_cast<const int32_t*>(host + o_tid) + tn);
  out.top_logprobs.assign(reinterpret_cast<const float*>(host + o_tlp), reinterpret_cast<const float*>(host + o_tlp) + tn);
}

void GpuBackend::read_logits(float* dst, int32_t rows) {
  const size_t vocab = static_cast<size_t>(config_.vocab_size);
  std::vector<float> host(static_cast<size_t>(rows) * static_cast<size_t>(logit_stride_));
  device_->download(host.data(), act_.logits, host.size() * sizeof(float));
  device_->synchronize();
  for (int32_t r = 0; r < rows; ++r) {
    std::memcpy(dst + static_cast<size_t>(r) * vocab, host.data() + static_cast<size_t>(r) * static_cast<size_t>(logit_stride_),
                vocab * sizeof(float));
  }
}

// Embeddings: the residual stream (act_.x, f32, rows in batch token order) comes to the host,
// where the final norm and pooling run in f32 as on the CPU backend. One download per pass;
// embedding passes are prefill-sized, so this is small beside the forward.
void GpuBackend::pool_hidden(const ForwardBatch& batch, Pooling pooling, float* dst) {
  const int64_t h = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  std::vector<float> x(static_cast<size_t>(batch.num_tokens) * static_cast<size_t>(h));
  device_->download(x.data(), act_.x, x.size() * sizeof(float));
  device_->synchronize();
  std::vector<double> sum(static_cast<size_t>(h));
  auto norm_row = [&](const float* row, double weight) {
    double ss = 0;
    for (int64_t j = 0; j < h; ++j) ss += static_cast<double>(row[j]) * row[j];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(h)) + eps);
    for (int64_t j = 0; j < h; ++j) sum[static_cast<size_t>(j)] += weight * (row[j] * inv * final_norm_host_[static_cast<size_t>(j)]);
  };
  for (size_t si = 0; si < batch.seqs.size(); ++si) {
    const ForwardSeq& s = batch.seqs[si];
    std::fill(sum.begin(), sum.end(), 0.0);
    if (pooling == Pooling::kLast) {
      norm_row(x.data() + static_cast<size_t>(s.token_offset + s.num_tokens - 1) * static_cast<size_t>(h), 1.0);
    } else {
      for (int32_t i = 0; i < s.num_tokens; ++i) norm_row(x.data() + static_cast<size_t>(s.token_offset + i) * static_cast<size_t>(h), 1.0 / s.num_tokens);
    }
    for (int64_t j = 0; j < h; ++j) dst[static_cast<int64_t>(si) * h + j] = static_cast<float>(sum[static_cast<size_t>(j)]);
  }
}

}  // namespace tandem
