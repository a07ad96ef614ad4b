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

namespace tandem {

class SafetensorsStore;
class ThreadPool;

/** One sequence's slice of a forward batch. */
struct ForwardSeq {
  int32_t token_offset = 0;  // into ForwardBatch::tokens
  int32_t num_tokens = 0;
  int32_t start_pos = 0;     // position of its first new token (= tokens already cached)
  const int32_t* block_table = nullptr;
  int32_t num_blocks = 0;
  bool want_logits = false;  // logits of its last new token are needed
};

struct ForwardBatch {
  const int32_t* tokens = nullptr;
  int32_t num_tokens = 0;
  std::vector<ForwardSeq> seqs;
  int32_t num_logit_rows = 0;  // count of seqs with want_logits
};

struct BackendOptions {
  std::string device = "cpu";
  int64_t num_blocks = 0;           // > 0 wins over memory_budget_bytes
  int64_t memory_budget_bytes = 0;  // KV pool budget when num_blocks is 0
  int64_t block_size = 16;
  // Caller-owned KV pool (e.g. a UCX-allocated shared-memory region a peer maps and reads
  // without this process's CPU). nullptr: the backend allocates its own. The Engine checks
  // its size against the layout before the backend sees it; the caller keeps it mapped.
  void* kv_pool = nullptr;
  size_t kv_pool_bytes = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual const KvLayout& kv_layout() const = 0;
  /**
   * Writes the new tokens' K/V into the pool, attends over each sequence's cached positions,
   * and writes logits (host f32, num_logit_rows x vocab, in batch order) for the rows asked.
   * Inputs are validated by the caller.
   */
  virtual void forward(const ForwardBatch& batch, float* logits) = 0;
  /** Base address of the KV pool, for registering it with a transfer agent. */
  virtual void* kv_pool_base() = 0;
  /**
   * Moves the pool to caller-owned memory of exactly the layout's size (checked by Engine),
   * dropping the backend's own allocation. Only between steps; the contents are not copied.
   */
  virtual void adopt_kv_pool(void* base) = 0;
};

/** Backends compiled into this build, e.g. {"cpu"} or {"cpu", "cuda"}. */
std::vector<std::string> available_backends();

/** Validates every weight's presence and shape against config, then builds the backend. */
std::unique_ptr<Backend> create_backend(const ModelConfig& config, const SafetensorsStore& weights,
                                        const BackendOptions& options, ThreadPool& pool);

/** Checks that every tensor the config implies exists with the right shape. */
void validate_weights(const ModelConfig& config, const SafetensorsStore& weights);

/** HF tensor name of a per-layer weight, e.g. layer_tensor(3, "self_attn.q_proj.weight"). */
std::string layer_tensor(int64_t layer, const char* suffix);

}  // namespace tandem
