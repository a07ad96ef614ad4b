// CPU f32 kernels: element-wise (norms, RoPE, SiLU) and the paged attention. Inner loops run
// over contiguous memory with GCC vector extensions at the target's width (16 lanes on AVX-512,
// 8 on AVX, 4 on 128-bit targets). Matrix products live in gemm.h.
#pragma once

#include <cstdint>
#include <vector>

#include "../core/backend.h"
#include "../core/kv_layout.h"

namespace tandem {

class ThreadPool;

namespace cpu {

float dot(const float* a, const float* b, int64_t n);

/** out = x / sqrt(mean(x^2) + eps) * weight, computed in f32 as transformers does. */
void rmsnorm(const float* x, const float* weight, int64_t n, float eps, float* out);

/** Rotates one head in place, HF rotate_half convention: pairs (i, i + d/2). */
void rope_rotate(float* head, const float* cos, const float* sin, int64_t head_dim);

/** out[i] = silu(gate[i]) * up[i]. */
void silu_mul(const float* gate, const float* up, float* out, int64_t n);

/** Where one layer's queries and outputs live; K/V come from the pool (layout given to run). */
struct AttentionLayer {
  const float* q = nullptr;  // token t, head h at q + t * q_stride + h * head_dim (RoPE applied)
  int64_t q_stride = 0;
  float* out = nullptr;  // same indexing with out_stride
  int64_t out_stride = 0;
  const float* kv_pool = nullptr;  // this step's K/V already written (an f32 pool)
  // A bf16 (kv_elem_bytes 2) or FP8 e4m3 (1) pool instead: kv_pool is then unused; e4m3
  // elements are multiplied by this layer's k_scale / v_scale as they are gathered.
  const void* kv_pool_raw = nullptr;
  int kv_elem_bytes = 4;
  float k_scale = 1.0f, v_scale = 1.0f;
  int64_t layer = 0;
  int64_t num_heads = 0;  // query heads; kv heads and head_dim come from the KvLayout
  float scale = 1.0f;     // usually 1/sqrt(head_dim)
};

/**
 * Causal attention over the paged KV pool: token i of a sequence attends to positions
 * [0, start_pos + i], read through the sequence's block table (so prefix hits and earlier
 * chunks are used in place). One work item is (sequence, KV head, tile of query tokens): all
 * query heads of the KV head's group and all tokens of the tile share each K/V chunk, which is
 * gathered once (K transposed) into a per-worker L1 buffer. Per chunk of kLanes keys, scores
 * are one vector per query row, the softmax is online (running max and sum, flash-attention
 * style) with a vector exp, and V is accumulated by broadcast FMAs; no horizontal dot
 * products. Items are spread over the pool, heaviest (latest) tiles first.
 * Keeps its work list and scratch between calls: steady-state steps do not allocate.
 */
class PagedAttention {
 public:
  void run(ThreadPool& pool, const ForwardBatch& batch, const KvLayout& layout, const AttentionLayer& args);

 private:
  struct Item {
    int32_t seq;
    int32_t kv_head;
    int32_t first;  // first token of the tile, relative to the sequence
    int32_t count;
  };
  std::vector<Item> items_;
  std::vector<std::vector<float>> scratch_;  // one per pool worker
};

}  // namespace cpu
}  // namespace tandem
