// Backend: the device-specific half of the engine. It owns the weights in its own format and
// the paged KV pool, and runs one batched forward pass. The CPU backend is always built; the
// CUDA backend (issue 7) slots in beside it through create_backend.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kv_layout.h"
#include "model_config.h"
#include "sampler.h"

namespace tandem {

class SafetensorsStore;
class ThreadPool;
struct LoraAdapter;

/** One sequence's slice of a forward batch. */
struct ForwardSeq {
  int32_t token_offset = 0;  // into ForwardBatch::tokens
  int32_t num_tokens = 0;
  int32_t start_pos = 0;     // position of its first new token (= tokens already cached)
  const int32_t* block_table = nullptr;
  int32_t num_blocks = 0;
  bool want_logits = false;  // logits of its last new token are needed
  int32_t num_logits = 1;    // with want_logits: logits of its last num_logits tokens (a verify step's drafts)
  int32_t lora_slot = -1;    // adapter slot (Backend::set_lora) applied to its tokens; -1 = base model
};

struct ForwardBatch {
  const int32_t* tokens = nullptr;
  int32_t num_tokens = 0;
  std::vector<ForwardSeq> seqs;
  int32_t num_logit_rows = 0;  // logit rows: num_logits of each seq with want_logits, in batch order
};

/**
 * One row to sample after a forward pass: the logits of a sequence with want_logits, by its
 * index among the forward's logit rows (batch order). Pointers are host memory owned by the
 * caller for the duration of sample().
 */
struct SampleRow {
  int32_t logit_row = 0;
  SamplingParams params;
  int64_t position = 0;              // position the sampled token takes (seeds the draw)
  const int32_t* history = nullptr;  // prompt + generated (penalties only)
  int32_t history_len = 0;
  int32_t num_prompt = 0;
  int32_t num_top_logprobs = -1;     // -1 none; 0 the sampled token's; n plus the n best
  const int32_t* bias_ids = nullptr;
  const float* bias_values = nullptr;
  int32_t bias_len = 0;
  const uint32_t* allowed = nullptr;  // ceil(vocab / 32) words, bit id&31 of word id>>5; null = all
};

/** What sample() returns, one entry per row in order. */
struct SampledRows {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;      // NaN where not asked
  int32_t top_stride = 0;           // max num_top_logprobs of the rows
  std::vector<int32_t> top_ids;     // [rows][top_stride], -1 padded
  std::vector<float> top_logprobs;  // same shape, NaN padded
};

struct BackendOptions {
  std::string device = "cpu";       // "cpu", "cuda", "cuda:N", or "simt" (the CUDA backend on the SIMT harness, tests)
  int64_t num_blocks = 0;           // > 0 wins over memory_budget_bytes
  int64_t memory_budget_bytes = 0;  // KV pool budget when num_blocks is 0
  int64_t block_size = 16;
  // GPU backends: with neither num_blocks nor memory_budget_bytes, the pool takes this share of
  // the device's memory after weights and activations (0: the default, 0.9).
  double gpu_memory_utilization = 0;
  int64_t max_batch_tokens = 8192;  // GPU: activations are sized for this many tokens per step
  int64_t max_seqs = 256;           // GPU: logits rows and decode graphs up to this many sequences
  int64_t max_drafts = 0;           // GPU: speculative decoding's drafts per sequence (verify rows are sized for them)
  bool cuda_graphs = true;          // GPU: replay decode steps from captured graphs
  std::string gemm = "auto";        // GPU: "auto" (cuBLASLt where present), "cublaslt", "own"
  // KV pool element type: "auto" (the backend's own: f32 on the CPU, bf16 on GPUs), "bf16" or
  // "fp8" (e4m3, scaled by the checkpoint's k_scale / v_scale or 1.0).
  std::string kv_cache_dtype = "auto";
  // Weights: "" (the checkpoint's own quantization_config), "fp8" (quantize bf16/f16/f32 linear
  // layers at load: per-channel scales, dynamic per-token activations), "none" (dequantize an
  // FP8 checkpoint). Applied by the Engine to the config the backend sees (quant_config.h).
  std::string quantization;
  // FP8 weights: "auto" computes as the checkpoint says (W8A8 where it quantizes activations),
  // "w8a16" keeps activations unquantized (tests; GPUs without FP8 tensor cores do this anyway).
  std::string fp8_compute = "auto";
  // Caller-owned KV pool (e.g. a UCX-allocated shared-memory region a peer maps and reads
  // without this process's CPU). nullptr: the backend allocates its own. The Engine checks
  // its size against the layout before the backend sees it; the caller keeps it mapped.
  void* kv_pool = nullptr;
  size_t kv_pool_bytes = 0;
};

/** How an embedding step reduces a sequence's final hidden states (after the final norm) to one vector. */
enum class Pooling : int32_t { kLast = 0, kMean = 1 };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual const KvLayout& kv_layout() const = 0;
  /**
   * Writes the new tokens' K/V into the pool, attends over each sequence's cached positions,
   * and computes the logits of the rows asked (num_logit_rows, in batch order), which stay in
   * the backend for sample() and read_logits(). Inputs are validated by the caller. A device
   * backend may return before the device has finished (sample() waits).
   */
  virtual void forward(const ForwardBatch& batch) = 0;
  /** Samples the rows of the last forward pass (out.* sized by the backend). */
  virtual void sample(const std::vector<SampleRow>& rows, SampledRows& out) = 0;
  /** Copies the first `rows` logits rows of the last forward pass to host memory ([rows][vocab]). */
  virtual void read_logits(float* dst, int32_t rows) = 0;
  /** Base address of the KV pool, for registering it with a transfer agent. */
  virtual void* kv_pool_base() = 0;
  /** False when the pool is device memory (a host transfer agent cannot read it in place). */
  virtual bool kv_pool_on_host() const { return true; }
  /**
   * Moves the pool to caller-owned memory of exactly the layout's size (checked by Engine),
   * dropping the backend's own allocation. Only between steps; the contents are not copied.
   */
  virtual void adopt_kv_pool(void* base) = 0;
  /**
   * Embeddings: after forward(), writes per sequence of `batch` (in order) its new tokens'
   * hidden states after the final norm, pooled (the last token's, or the mean over its tokens),
   * into dst [num_seqs][hidden_size], unnormalized. Backends without it throw.
   */
  virtual void pool_hidden(const ForwardBatch& batch, Pooling pooling, float* dst);
  /**
   * Multi-LoRA seam: a backend that returns true keeps adapters in numbered slots and, in
   * forward(), adds each sequence's low-rank update x·Aᵀ·Bᵀ·scale to the q/k/v/o and
   * gate/up/down projections of that sequence's tokens, grouped by adapter (segmented
   * shrink-then-expand, SGMV), in the same pass as the base model's GEMMs.
   */
  virtual bool supports_lora() const { return false; }
  /** Puts an adapter in a slot (nullptr empties it). Only between steps (the Engine locks). */
  virtual void set_lora(int32_t slot, std::shared_ptr<const LoraAdapter> adapter);
  /** One line for logs and info(): the device and how it computes. */
  virtual std::string description() const { return name(); }

  // KV movement between workers (issue 24). Token t of a copy lives in block ids[t / block_size],
  // slot t % block_size on each side, so block size and dtype may differ (cuda/kv_copy.h).
  // These run beside forward() on another thread (the Engine serializes them among
  // themselves): they touch only the blocks named, which the scheduler keeps out of steps
  // while they move. Arguments are validated by the Engine. Defaults: unsupported.
  /** Blocks ids[0..n) into dst: n whole blocks of this pool's layout, back to back; only layers [l0, l1) written. */
  virtual void kv_read_blocks(const int32_t* ids, int32_t n, void* dst, int l0, int l1);
  /**
   * src: src_blocks whole blocks of src_layout back to back; its tokens from src_first on land in
   * ids from token 0, as many as both sides hold. (src_first: a copy that starts mid-block in
   * the source, e.g. after a prefix hit at another block size.)
   */
  virtual void kv_write_blocks(const int32_t* ids, int32_t n, const void* src, const KvLayout& src_layout, int64_t src_blocks,
                               int l0, int l1, int64_t src_first = 0);
  /** Bytes another process passes to kv_open_peer to map this pool; "" for a host pool (UCX reads those). */
  virtual std::string kv_export_handle() { return ""; }
  /** Maps a peer's exported pool of `bytes`; returns its base here. */
  virtual void* kv_open_peer(const std::string& handle, size_t bytes);
  virtual void kv_close_peer(void* base);
  /** Tokens of the peer's blocks src_ids (layout `peer`, mapped at peer_base) into this pool's dst_ids. */
  virtual void kv_copy_from_peer(void* peer_base, const KvLayout& peer, const int32_t* src_ids, int32_t ns,
                                 const int32_t* dst_ids, int32_t nd, int l0, int l1, int64_t src_first = 0);
  /**
   * Layer-wise progress of the forward passes: [0] forward passes begun, [1] layers whose K/V the
   * latest one has written. Host memory the backend updates as it goes (a GPU's kernels write it
   * through a mapped pinned page), for the transfer protocol to poll without a call.
   */
  virtual const int64_t* layer_progress() const { return nullptr; }
};

/** Tokens a copy moves: the smaller of the two tables' slots (the source's from src_first). */
inline int64_t kv_copy_tokens(int64_t src_blocks, int64_t src_block_size, int64_t dst_blocks, int64_t dst_block_size,
                              int64_t src_first = 0) {
  const int64_t a = src_blocks * src_block_size - src_first, b = dst_blocks * dst_block_size;
  return a < b ? a : b;
}

/** A compiled backend and whether it can run here. */
struct BackendStatus {
  std::string name;    // "cpu", "cuda"
  bool available = false;
  std::string reason;  // why not, when unavailable
  std::string detail;  // e.g. the GPU's name
  std::string fp8;     // which FP8 paths this backend runs here (weights, KV cache); "" when unavailable
};

/** Backends usable on this machine: "cpu", plus "cuda" when built and a driver and a GPU exist. */
std::vector<std::string> available_backends();
/** Every backend of the build with its availability and, when unavailable, the reason. */
std::vector<BackendStatus> backend_status();

/** Bytes per KV element a device's pool uses (f32 on the CPU, bf16 on GPUs). */
size_t kv_elem_bytes(const std::string& device);
/** The same under a --kv-cache-dtype ("auto", "bf16", "fp8"; anything else is invalid_argument). */
size_t kv_elem_bytes(const std::string& device, const std::string& kv_cache_dtype);

/** Validates every weight's presence and shape against config, then builds the backend. */
std::unique_ptr<Backend> create_backend(const ModelConfig& config, const SafetensorsStore& weights,
                                        const BackendOptions& options, ThreadPool& pool);

/** Checks that every tensor the config implies exists with the right shape. */
void validate_weights(const ModelConfig& config, const SafetensorsStore& weights);

/** HF tensor name of a per-layer weight, e.g. layer_tensor(3, "self_attn.q_proj.weight"). */
std::string layer_tensor(int64_t layer, const char* suffix);

}  // namespace tandem
