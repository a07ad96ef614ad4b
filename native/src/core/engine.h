// Engine: the device-independent model runner. It loads config + weights, owns one backend
// (CPU, or the GPU backend on CUDA or the SIMT harness) and the host thread pool, validates a
// step's flat inputs, runs the forward pass, waits for deferred masks while it runs, and has
// the backend sample. The N-API binding and the C++ test binary both drive it.
#pragma once

#include <chrono>
#include <map>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "../spec/drafter.h"
#include "backend.h"
#include "lora.h"
#include "model_config.h"
#include "sampler.h"

namespace tandem {

class SafetensorsStore;
class ThreadPool;

struct EngineOptions {
  std::string model_dir;
  BackendOptions backend;
  int threads = 0;  // 0: hardware concurrency
  // Speculative decoding: the drafter to load (spec/drafter.h); unset = none.
  std::optional<spec::DraftConfig> speculative;
};

/** One sequence in a step; offsets index the flat arrays of StepInput. */
struct SeqInput {
  int32_t token_offset = 0;
  int32_t num_tokens = 0;
  int32_t start_pos = 0;
  int32_t block_offset = 0;
  int32_t num_blocks = 0;
  bool sample = false;
  int32_t num_top_logprobs = -1;  // -1: none
  int32_t history_offset = 0;     // penalties only; history_len 0 when none apply
  int32_t history_len = 0;
  int32_t num_prompt = 0;
  int32_t bias_offset = 0;  // logit bias entries in StepInput::bias_ids/bias_values
  int32_t bias_len = 0;
  int32_t mask_row = -1;  // structured output: row in StepInput::allowed_masks, -1 = none
  int32_t lora_slot = -1;  // adapter slot (Engine::set_lora), -1 = the base model
  SamplingParams sampling;
  // Speculative decoding (spec/verify.h). num_drafts > 0: the last num_drafts of its tokens are
  // drafts to verify (sample must be set); k + 1 rows are sampled and the accepted prefix plus
  // one more token is returned. propose_drafts > 0: afterwards the drafter proposes up to that
  // many tokens for its next step, for the sequence it knows as draft_key (Drafter::begin).
  int32_t num_drafts = 0;
  int32_t propose_drafts = 0;
  int64_t draft_key = -1;
};

/**
 * Structured-output masks supplied after the step started, so the caller computes them while
 * the forward pass runs: sampling waits for supply() (bounded by a timeout, so a caller that
 * never supplies cannot hang the engine). Rows as StepInput::allowed_masks; `rows` has one
 * entry per sequence (-1 = unconstrained) or is empty (no masks this step).
 */
struct DeferredMasks {
  std::mutex mu;
  std::condition_variable cv;
  bool ready = false;
  std::vector<int32_t> rows;
  std::vector<uint32_t> masks;

  void supply(std::vector<int32_t> r, std::vector<uint32_t> m) {
    {
      std::lock_guard<std::mutex> lock(mu);
      rows = std::move(r);
      masks = std::move(m);
      ready = true;
    }
    cv.notify_all();
  }
  bool wait_for(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, timeout, [this] { return ready; });
  }
};

struct StepInput {
  std::vector<int32_t> tokens;
  std::vector<int32_t> block_tables;
  std::vector<int32_t> history;
  std::vector<int32_t> bias_ids;    // logit bias, all sequences' entries back to back
  std::vector<float> bias_values;
  // Allowed-token bitmasks, ceil(vocab / 32) words per row (bit id&31 of word id>>5).
  std::vector<uint32_t> allowed_masks;
  // Set: masks come later through DeferredMasks (mask_row / allowed_masks are ignored).
  std::shared_ptr<DeferredMasks> deferred_masks;
  std::vector<SeqInput> seqs;
  bool return_logits = false;  // tests and goldens: copy the sampled rows' logits out
};

/**
 * Results for sequences with sample=true, in batch order. A sequence returns emitted[i] tokens
 * (1, or 1 + its accepted drafts in a verify step); tokens, logprobs and top rows are per
 * returned token, flattened in batch order.
 */
struct StepOutput {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;        // NaN where logprobs were not asked
  int32_t top_stride = 0;             // max top-logprobs asked in this step
  std::vector<int32_t> top_ids;       // [num_tokens][top_stride], -1 padded
  std::vector<float> top_logprobs;    // same shape
  std::vector<float> logits;          // [sampled rows][vocab] when return_logits (k + 1 rows per verify)
  std::vector<int32_t> emitted;       // per sampled sequence: tokens it returns
  // Speculative decoding: per sampled sequence its proposed drafts (draft_counts[i] of them,
  // flattened) and the drafter's estimate of each one's acceptance (NaN: none).
  std::vector<int32_t> draft_counts;
  std::vector<int32_t> drafts;
  std::vector<float> draft_scores;
};

/**
 * An embedding batch: sequences back to back in `tokens`, `lengths` tokens each. Each is run
 * from position 0 on its own (no prefix cache), so the engine must serve no generation.
 */
struct EmbedInput {
  std::vector<int32_t> tokens;
  std::vector<int32_t> lengths;
  Pooling pooling = Pooling::kLast;
  bool normalize = true;  // L2-normalize each vector (sentence-transformers' Normalize module)
  // Asked before each forward pass; true stops the call with ErrorCode::kCancelled (the caller
  // is gone: an abandoned request must not hold the engine for its remaining passes).
  std::function<bool()> cancelled;
};

/** One vector per input sequence, in order: [num_seqs][dim]. */
struct EmbedOutput {
  int32_t dim = 0;
  std::vector<float> vectors;
};

class Engine {
 public:
  /**
   * options.backend.kv_pool set: the pool lives in that caller-owned memory (e.g. a UCX
   * allocation a peer reads over shared memory), which must be exactly
   * num_blocks x bytes_per_block; with num_blocks 0 the block count is taken from its size.
   * A mismatch is NativeError(invalid_argument) naming both sizes.
   */
  static std::unique_ptr<Engine> load(const EngineOptions& options);
  /**
   * The KV layout load() would use (block count from num_blocks or the budget), from
   * config.json alone: lets a caller allocate the pool before loading the weights.
   */
  static KvLayout describe_kv_layout(const EngineOptions& options);
  ~Engine();

  const ModelConfig& config() const { return config_; }
  /** The model's e4m3 KV-cache scales, [layer][K, V] (1.0 without checkpoint scales): what converts to or from an e4m3 pool. */
  const std::vector<float>& kv_scales() const { return kv_scales_; }
  const KvLayout& kv_layout() const { return backend_->kv_layout(); }
  const char* backend_name() const { return backend_->name(); }
  std::string backend_description() const { return backend_->description(); }
  /** False when the KV pool is device memory (no host transfer agent can read it in place). */
  bool kv_pool_on_host() const { return backend_->kv_pool_on_host(); }
  int num_threads() const;
  /** The paged KV pool (kv_layout().bytes_per_block() * num_blocks bytes), for a transfer agent. */
  void* kv_pool_base() { return backend_->kv_pool_base(); }
  size_t kv_pool_bytes() const { return kv_layout().bytes_per_block() * static_cast<size_t>(kv_layout().num_blocks); }
  /** True when the pool is caller-owned memory (load with kv_pool, or adopt_kv_pool). */
  bool kv_pool_external() const { return kv_pool_external_; }
  /**
   * Moves the pool into caller-owned memory of exactly kv_pool_bytes(), freeing the engine's
   * own; waits for a running step. Contents are not copied: call before the first step.
   */
  void adopt_kv_pool(void* base, size_t bytes);

  /** The backend, for tests and benchmarks that look at backend-specific state. */
  Backend& backend() { return *backend_; }

  /** Reads an adapter's factors from disk (no lock: a step may run meanwhile). */
  std::shared_ptr<const LoraAdapter> read_lora(const LoraSpec& spec) const { return load_lora_adapter(spec, config_); }
  /** Puts an adapter in a slot (nullptr empties it); waits for a running step. */
  void set_lora(int32_t slot, std::shared_ptr<const LoraAdapter> adapter);
  bool supports_lora() const { return backend_->supports_lora(); }

  /** Runs one batched step. Bad inputs -> NativeError(invalid_argument); the pool is untouched. */
  StepOutput step(const StepInput& input);

  /**
   * Speculative decoding: the drafter whose proposals step() returns (SeqInput::propose_drafts);
   * nullptr = none. Set before the first step. begin()/end() go to it directly (any thread).
   */
  void set_drafter(std::unique_ptr<spec::Drafter> drafter);
  spec::Drafter* drafter() const { return drafter_.get(); }

  /**
   * Embeddings (embedding.cc): runs the sequences in as few forward passes as the KV pool
   * holds (each from position 0, through blocks 0..n of the pool, which it overwrites), pools
   * the final-norm hidden states and optionally L2-normalizes. Bad inputs ->
   * NativeError(invalid_argument) naming the sequence.
   */
  EmbedOutput embed(const EmbedInput& input);

  // KV movement between workers (issue 24; Backend's kv_* do the work). These serialize among
  // themselves, not with steps: they touch only the named blocks, which the caller keeps out
  // of steps while they move, and return when the data is in place (a later step sees it).
  // Layer ranges are [l0, l1), l1 = -1 for all layers. Bad arguments: invalid_argument.
  /** Blocks ids into dst (ids.size() whole blocks of kv_layout(), back to back; dst_bytes checked). */
  void kv_read_blocks(const std::vector<int32_t>& ids, void* dst, size_t dst_bytes, int l0, int l1);
  /** src holds whole blocks of src_layout (num_blocks ignored); its tokens from src_first land in ids from token 0. */
  void kv_write_blocks(const std::vector<int32_t>& ids, const void* src, size_t src_bytes, const KvLayout& src_layout, int l0,
                       int l1, int64_t src_first = 0);
  /** What a peer process passes to kv_open_peer; "" when the pool is host memory (UCX reads it). */
  std::string kv_export_handle();
  /** Maps a peer's pool (its layout with num_blocks); returns an id for kv_copy_from_peer. */
  int kv_open_peer(const std::string& handle, const KvLayout& peer);
  void kv_copy_from_peer(int peer, const std::vector<int32_t>& src_ids, const std::vector<int32_t>& dst_ids, int l0, int l1,
                         int64_t src_first = 0);
  void kv_close_peer(int peer);
  /** [0] forward passes begun, [1] layers whose K/V the latest has written (see Backend). */
  const int64_t* layer_progress() const { return backend_->layer_progress(); }

 private:
  Engine() = default;
  void validate(const StepInput& input) const;
  void draft(const StepInput& in, const std::vector<size_t>& sampled, StepOutput& out);

  ModelConfig config_;
  std::vector<float> kv_scales_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<Backend> backend_;
  bool kv_pool_external_ = false;
  int64_t max_pass_tokens_ = 8192;  // embed(): tokens per forward pass (BackendOptions::max_batch_tokens)
  std::vector<bool> lora_loaded_;  // by slot, for validate()
  std::unique_ptr<spec::Drafter> drafter_;
  std::vector<spec::DraftQuery> draft_queries_;  // reused between steps
  std::mutex step_mu_;  // steps are serialized; the TS side sends one at a time anyway
  /** l1 = -1 -> all layers; checks the range. */
  std::pair<int, int> kv_layers(int l0, int l1) const;
  void kv_check_ids(const std::vector<int32_t>& ids, const KvLayout& layout, const char* what) const;
  void kv_check_compatible(const KvLayout& other, const char* what) const;
  struct Peer {
    void* base = nullptr;
    KvLayout layout;
  };
  std::mutex kv_mu_;  // KV movement calls, and the peers below
  std::map<int, Peer> peers_;
  int next_peer_ = 1;
};

}  // namespace tandem
