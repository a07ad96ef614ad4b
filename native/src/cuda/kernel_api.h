// KernelApi: every kernel the GPU backend launches, as plain argument structs of device
// pointers and sizes. Two implementations are compiled from the same kernel source
// (kernels/*.cuh): the CUDA target (kernels_cuda.cu, nvcc) and the SIMT target
// (kernels_simt.cc, any C++ compiler). The backend and the kernel checks only see this header.
//
// Conventions: activations row-major with explicit strides; weights bf16 [out][in] as
// nn.Linear stores them; the KV pool bf16 in the engine's block layout
// (core/kv_layout.h: [block][layer][k|v][slot][kv_head][head_dim]). Per-step tables (tokens,
// positions, slots, sequences, block tables, work items) are device arrays, never kernel
// arguments, so a captured graph replays with new contents at the same addresses.
#pragma once

#include <cstdint>
#include <memory>

#include "bf16.h"

namespace tandem::gpu {

/** Element strides of the paged KV pool (bf16 elements), from KvLayout. */
struct PoolGeometry {
  int64_t block_stride = 0;
  int64_t layer_stride = 0;
  int64_t kv_stride = 0;     // K to V of one layer
  int64_t token_stride = 0;  // one slot: num_kv_heads * head_dim
  int32_t block_size = 16;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
};

/** One sequence of a step as the kernels read it. */
struct SeqDesc {
  int32_t token_offset = 0;  // row of its first new token
  int32_t num_tokens = 0;
  int32_t start_pos = 0;     // tokens already in the pool before this step
  int32_t table_offset = 0;  // into the block-table array
};

/** A tile of one sequence's new tokens for the prefill attention kernel. */
struct PrefillItem {
  int32_t seq = 0;
  int32_t first = 0;  // relative to the sequence's new tokens
  int32_t count = 0;  // <= attention_tile_tokens(...)
  int32_t pad = 0;
};

/** Keys per attention chunk (one per lane of a warp). */
inline constexpr int kAttentionChunk = 32;
/** Largest head_dim the attention and RoPE kernels take. */
inline constexpr int kMaxHeadDim = 256;

/** Query rows (query heads of a KV group x tokens) one attention block holds. */
inline int attention_max_rows(int head_dim) { return head_dim > 128 ? 32 : 64; }

/** Tokens per prefill tile for a GQA group of `group` query heads (0: the group does not fit). */
inline int attention_tile_tokens(int group, int head_dim) { return attention_max_rows(head_dim) / group; }

/** Dynamic shared memory of one attention block, in floats (see kernels/attention.cuh). */
inline int64_t attention_shared_floats(int rows, int head_dim) {
  const int64_t d = head_dim, c = kAttentionChunk;
  return 2 * rows * d + c * (d + 1) + c * d + rows * c + 3 * rows;
}

/** Floats of split-KV scratch per (decode sequence, split, query head): running max, sum, accumulators. */
TD_HOST_DEVICE int64_t attention_partial_floats(int head_dim) { return 2 + head_dim; }

struct EmbedArgs {
  const int32_t* tokens = nullptr;  // [num_tokens]
  int num_tokens = 0;
  const bf16_bits* table = nullptr;  // [vocab][hidden]
  int hidden = 0;
  float* x = nullptr;  // [num_tokens][hidden]
};

/** out[r] = bf16(x[row(r)] / rms(x[row(r)]) * weight); row(r) = rows[r], or r when rows is null. */
struct RmsNormArgs {
  const float* x = nullptr;
  int64_t x_stride = 0;
  const int32_t* rows = nullptr;
  int num_rows = 0;
  const float* weight = nullptr;
  int hidden = 0;
  float eps = 1e-6f;
  bf16_bits* out = nullptr;
  int64_t out_stride = 0;
};

/**
 * Per token: q/k/v biases (Qwen2), per-head q/k RMSNorm (Qwen3), rotary embedding (HF
 * rotate_half pairs (i, i + d/2)) of q in place and of k, then k and v written to the pool at
 * the token's slot (block_id * block_size + offset; -1 = no write, for graph padding).
 */
struct QkvRopeArgs {
  float* qkv = nullptr;  // [num_tokens][qkv_stride]: q heads, then k heads, then v heads
  int64_t qkv_stride = 0;
  int num_tokens = 0;
  const float* bias = nullptr;    // [q_dim + 2 kv_dim] or null
  const float* q_norm = nullptr;  // [head_dim] or null (then k_norm is null too)
  const float* k_norm = nullptr;
  float eps = 1e-6f;
  const int32_t* positions = nullptr;  // [num_tokens]
  const int32_t* slots = nullptr;      // [num_tokens]
  const float* inv_freq = nullptr;     // [head_dim / 2]
  float rope_scale = 1.0f;             // cos and sin are multiplied by it (YaRN's attention factor)
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  bf16_bits* pool = nullptr;
  int layer = 0;
  PoolGeometry geo;
  // An e4m3 pool (--kv-cache-dtype fp8): `pool` points at its bytes, and K / V are stored
  // divided by the layer's scales, kv_scales[2 layer] and [2 layer + 1] (device memory).
  bool kv_fp8 = false;
  const float* kv_scales = nullptr;
};

/** out[t][i] = bf16(silu(gate) * up) with gate = gate_up[t][i], up = gate_up[t][inter + i]. */
struct SiluMulArgs {
  const bf16_bits* gate_up = nullptr;  // [num_tokens][2 * inter]
  int num_tokens = 0;
  int inter = 0;
  bf16_bits* out = nullptr;  // [num_tokens][inter]
};

/**
 * Causal attention of one layer over the paged pool. Prefill tiles attend over [0, position]
 * per token; decode sequences (one new token each) are split over the KV length into
 * num_splits ranges whose partial results are merged. Output rows are bf16.
 */
struct AttentionArgs {
  const float* q = nullptr;  // token t, head h at q + t * q_stride + h * head_dim
  int64_t q_stride = 0;
  bf16_bits* out = nullptr;  // same indexing with out_stride
  int64_t out_stride = 0;
  const bf16_bits* pool = nullptr;
  int layer = 0;
  PoolGeometry geo;
  bool kv_fp8 = false;               // an e4m3 pool, as QkvRopeArgs
  const float* kv_scales = nullptr;
  int num_heads = 0;
  float scale = 1.0f;
  const SeqDesc* seqs = nullptr;
  const int32_t* block_tables = nullptr;
  const PrefillItem* prefill_items = nullptr;
  int num_prefill_items = 0;
  const int32_t* decode_seqs = nullptr;  // sequence indices, one new token each
  int num_decode = 0;
  int num_splits = 1;
  float* partial = nullptr;  // [num_decode][num_splits][num_heads][attention_partial_floats]
  // Decode spans (speculative verify rows, StepPlan::decode_spans): decode entry x leads a span of
  // decode_spans[x] entries that are one sequence's consecutive positions over one block table,
  // whose blocks read each K/V chunk once for every row of the span; 0 marks an entry inside a
  // span (its blocks return at once). Null: every entry is its own span. max_span bounds every
  // span (it sizes the blocks' shared memory: attention_shared_floats(group * max_span, d)).
  const int32_t* decode_spans = nullptr;
  int max_span = 1;
};

enum class GemmOut : int32_t { kF32 = 0, kBf16 = 1 };

/** c[m][n] = a[m][:] . w[n][:] + bias[n] (+ c[m][n] when accumulate; f32 output only). */
struct GemmArgs {
  int m = 0, n = 0, k = 0;  // k % 8 == 0 (16-byte rows)
  const bf16_bits* a = nullptr;
  int64_t lda = 0;
  const bf16_bits* w = nullptr;
  int64_t ldw = 0;
  const float* bias = nullptr;
  void* c = nullptr;
  int64_t ldc = 0;
  GemmOut out = GemmOut::kF32;
  bool accumulate = false;
  // Split-K partials: k is split only while splits x m x n fits workspace_floats (null or 0:
  // no split). The automatic plans split only grids too small to fill the GPU, so they never
  // ask for more than kGemmWorkspaceFloats.
  float* workspace = nullptr;
  int64_t workspace_floats = 0;
};

/** A product over packed rows: a [m][k], w [n][k] and c [m][n] (lda = ldw = k, ldc = n); no bias, c overwritten. */
inline GemmArgs packed_gemm(int64_t m, int64_t n, int64_t k, const bf16_bits* a, const bf16_bits* w, void* c, GemmOut out) {
  GemmArgs g;
  g.m = static_cast<int>(m);
  g.n = static_cast<int>(n);
  g.k = static_cast<int>(k);
  g.a = a;
  g.lda = k;
  g.w = w;
  g.ldw = k;
  g.c = c;
  g.ldc = n;
  g.out = out;
  return g;
}

/** Split-K scratch that covers every automatic plan: 264 CTAs' worth of 64 x 128 partial tiles. */
inline constexpr int64_t kGemmWorkspaceFloats = int64_t{264} * 64 * 128;

/** Scratch for any split of an m x n product, forced splits included (up to 16). */
inline int64_t gemm_workspace_floats(int64_t m, int64_t n) { return 16 * m * n; }

/** One sampled row (POD shared by host and device). */
struct SampleRowDesc {
  int32_t logit_row = 0;
  int32_t top_k = 0;           // <= 0: off
  float temperature = 1.0f;    // <= 0: greedy
  float top_p = 1.0f;
  float min_p = 0.0f;
  float presence = 0.0f;
  float frequency = 0.0f;
  float repetition = 1.0f;
  uint32_t seed_lo = 0, seed_hi = 0;
  uint32_t position_lo = 0, position_hi = 0;  // the position the sampled token takes
  int32_t penalty_offset = 0, penalty_len = 0;  // into SampleArgs::penalties
  int32_t bias_offset = 0, bias_len = 0;        // into bias_ids / bias_values
  int32_t mask_offset = -1;  // first word of its allowed-token bitmask in masks, -1 = none
  int32_t num_top = -1;      // -1: no logprobs; 0: the sampled token's; n: plus the n best
};

/** A distinct token of a row's history: repetition applies to all, presence/frequency to generated > 0. */
struct PenaltyEntry {
  int32_t token = 0;
  int32_t generated = 0;
};

/**
 * Samples one token per row with the CPU sampler's semantics (core/sampler.h): penalties ->
 * logit bias -> allowed-token mask -> greedy | temperature, top-k, top-p, min-p, and one draw
 * from uniform(seed, position) over the kept tokens in id order. Logprobs are of the raw
 * logits. Only tokens and logprobs are written for the host to read.
 */
struct SampleArgs {
  const float* logits = nullptr;  // [rows][logit_stride]
  int64_t logit_stride = 0;
  int vocab = 0;
  const SampleRowDesc* rows = nullptr;
  int num_rows = 0;
  const PenaltyEntry* penalties = nullptr;
  const int32_t* bias_ids = nullptr;
  const float* bias_values = nullptr;
  const uint32_t* masks = nullptr;
  float* work = nullptr;  // [num_rows][vocab] scratch
  int top_stride = 0;
  int32_t* out_tokens = nullptr;        // [num_rows]
  float* out_logprobs = nullptr;        // [num_rows] (NaN when not asked)
  int32_t* out_top_ids = nullptr;       // [num_rows][top_stride], -1 padded
  float* out_top_logprobs = nullptr;    // same shape, NaN padded
  // Rows another pass already sampled (the fast path, decode_api.h): row r is left alone when
  // the int32 at skip_status + r * skip_stride_bytes is 1. Null: every row is sampled.
  const unsigned char* skip_status = nullptr;
  int64_t skip_stride_bytes = 0;
};

class KernelApi {
 public:
  virtual ~KernelApi() = default;
  /** "cuda" or "simt". */
  virtual const char* target() const = 0;
  virtual void embed(const EmbedArgs& a, void* stream) = 0;
  virtual void rmsnorm(const RmsNormArgs& a, void* stream) = 0;
  virtual void qkv_rope(const QkvRopeArgs& a, void* stream) = 0;
  virtual void silu_mul(const SiluMulArgs& a, void* stream) = 0;
  virtual void attention(const AttentionArgs& a, void* stream) = 0;
  /** Our own GEMM on tensor cores (mma.sync): a few-rows GEMV for m <= 16, tiled otherwise. */
  virtual void gemm(const GemmArgs& a, void* stream) = 0;
  virtual void sample(const SampleArgs& a, void* stream) = 0;
};

std::unique_ptr<KernelApi> make_simt_kernels();
/** Only in builds with the CUDA target (cuda_built()). */
std::unique_ptr<KernelApi> make_cuda_kernels();

}  // namespace tandem::gpu
