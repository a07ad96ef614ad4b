// DecodeKernelApi: the fused kernels of a decode step (few rows, memory-bound), beside KernelApi
// and compiled the same two ways (decode_cuda.cu by nvcc, decode_simt.cc for the SIMT harness;
// their own units, so changing them does not rebuild the forward's kernels).
//
// One kernel per projection, each a few-rows GEMV (kernels/gemm_rows.cuh's main loop, split over
// k) whose epilogue finishes what used to take more launches, by the last block to arrive
// (kernels/last_block.cuh):
//   kQkvRope      q/k/v projection + bias + Qwen3 q/k norms + RoPE + K/V into the pool (per
//                 group of whole heads); optionally the layer-progress mark after the last group
//   kResidualNorm O or down projection + bias added into the f32 residual (per 32 columns), then
//                 the RMSNorm of the updated rows into the next GEMV's bf16 input (the grid's
//                 last block): fused residual-add + RMSNorm
//   kSiluMul      gate and up rows of each output index in one block, silu(gate) * up written as
//                 the bf16 input of the down projection: no gate_up buffer, no SwiGLU launch
// the decode attention with its split merge in one launch (kernels/decode_attention.cuh),
// and the sampler's fast path (SampleFastArgs below).
// Every sum is taken in the same order as the unfused kernels (gemm_rows_kernel, its split-K
// reduce, rmsnorm_kernel, qkv_rope_kernel, silu_mul_kernel), so the fused step computes the
// same bits as the unfused one on our own GEMMs; the kernel checks hold them to that. FP8
// weights take the FP8 GEMV's main loop instead (kernels/fp8_gemm_rows.cuh: e4m3 rows with
// their scales, activations quantized in shared memory for W8A8) under the same epilogues.
#pragma once

#include <cstdint>
#include <memory>

#include "fp8_kernels.h"
#include "kernel_api.h"

namespace tandem::gpu {

/** Most rows a fused decode GEMV takes (the few-rows path's limit). */
inline constexpr int kDecodeMaxRows = 16;

enum class DecodeEpilogue : int32_t { kResidualNorm = 0, kSiluMul = 1, kQkvRope = 2 };

struct DecodeGemvArgs {
  DecodeEpilogue epilogue = DecodeEpilogue::kResidualNorm;
  int m = 0;  // rows, 1..kDecodeMaxRows
  int n = 0;  // rows of w: kQkvRope q_dim + 2 kv_dim, kResidualNorm hidden, kSiluMul 2 * inter
  int k = 0;  // k % 8 == 0
  const bf16_bits* a = nullptr;  // [m][lda] bf16 input
  int64_t lda = 0;
  const bf16_bits* w = nullptr;  // [n][ldw], as nn.Linear stores it (gate rows, then up rows)
  int64_t ldw = 0;
  const float* bias = nullptr;  // [n] or null (kResidualNorm; kQkvRope takes its bias in rope)
  float* workspace = nullptr;   // >= decode_gemv_workspace_floats(m, n) floats
  int64_t workspace_floats = 0;
  int* counters = nullptr;      // >= decode_gemv_counters(n, ...) ints, zero (left zero)

  // kResidualNorm: x[r][:] += a[r] . w^T + bias; then, with norm_weight, the grid's last block
  // writes xn[r] = rmsnorm(x[r]) * norm_weight (bf16) for every row.
  float* x = nullptr;
  int64_t ldx = 0;
  const float* norm_weight = nullptr;
  float eps = 1e-6f;
  bf16_bits* xn = nullptr;
  int64_t ldxn = 0;

  // kSiluMul: act[r][j] = bf16(silu(bf16(g)) * bf16(u)), g = a[r] . w[j], u = a[r] . w[inter + j].
  bf16_bits* act = nullptr;
  int64_t ldact = 0;

  // kQkvRope: the projection lands in rope.qkv (f32, [m][rope.qkv_stride]), then the attention
  // prologue runs per head as qkv_rope_kernel would (rope.num_tokens = m). With progress, the
  // grid's last block stores progress_value there once every row's K/V is in the pool.
  QkvRopeArgs rope;
  int64_t* progress = nullptr;
  int64_t progress_value = 0;

  // FP8 weights (w8 set, w unused): e4m3 [n][ldw] with scales [n][w8_groups] (w8_group_k columns
  // each), the activations quantized as w8_act says; the FP8 GEMV's plan and sums, so at most
  // kFp8RowsMaxM rows.
  const fp8_bits* w8 = nullptr;
  const float* w8_scales = nullptr;
  int w8_groups = 1, w8_group_k = 0;
  Fp8Act w8_act = Fp8Act::kNone;
  float w8_act_static = 1.0f, w8_act_ub = 0.0f;
};

/** Workspace floats a fused GEMV of m rows and n weight rows needs (every split's partial sums). */
int64_t decode_gemv_workspace_floats(int m, int n, int k);

/** Counters a fused GEMV over n weight rows needs (one per epilogue group, plus the grid's). */
int64_t decode_gemv_counters(int n);
/** Counters of the fused decode attention: one per (decode sequence, KV head). */
inline int64_t decode_attention_counters(int num_decode, int num_kv_heads) { return static_cast<int64_t>(num_decode) * num_kv_heads; }

/**
 * The sampler's fast path (kernels/sampling_fast.cuh): each row's vocabulary over many blocks.
 * scratch: DecodeKernelApi::sample_fast_scratch_bytes bytes; counters: sample_fast_counters
 * ints, zero (left zero). The sizes depend on the target (its chunk and block sizes).
 */
struct SampleFastArgs {
  void* scratch = nullptr;
  int* counters = nullptr;
};

class DecodeKernelApi {
 public:
  virtual ~DecodeKernelApi() = default;
  virtual const char* target() const = 0;
  /**
   * Launch gemv and attention as programmatic dependents of the kernel before each (compute
   * capability 9.0+, else ignored): a GEMV's blocks issue their first weight loads and L2
   * prefetches while that kernel finishes, then wait for it (td::grid_dependency_wait).
   */
  virtual void set_overlap(bool on) = 0;
  virtual void gemv(const DecodeGemvArgs& a, void* stream) = 0;
  /** Whether gemv takes this product (rows, shape, an FP8 weight's layout); gemv throws where not. */
  virtual bool gemv_applies(const DecodeGemvArgs& a) const = 0;
  /**
   * The decode sequences' attention (a.num_prefill_items must be 0) with the split merge in the
   * same launch; counters: decode_attention_counters(num_decode, num_kv_heads) ints, zero.
   */
  virtual void attention(const AttentionArgs& a, int* counters, void* stream) = 0;
  /**
   * Samples every row as KernelApi::sample does (same tokens, same logprobs): the fast path,
   * then the one-block kernel for the rows it leaves (a.skip_status is set here).
   */
  virtual void sample(const SampleArgs& a, const SampleFastArgs& f, void* stream) = 0;
  virtual int64_t sample_fast_scratch_bytes(int rows, int vocab) const = 0;
  virtual int64_t sample_fast_counters(int rows, int vocab) const = 0;
  /** Where row r's outcome lies in the scratch: int32 at r * row_bytes + offset, 1 = sampled by the fast path. */
  virtual int64_t sample_fast_status_offset(int vocab, int64_t* row_bytes) const = 0;
};

std::unique_ptr<DecodeKernelApi> make_simt_decode_kernels();
/** Only in builds with the CUDA target (cuda_built()). */
std::unique_ptr<DecodeKernelApi> make_cuda_decode_kernels();

}  // namespace tandem::gpu
