// Per-token kernels of a transformer layer: embedding gather, RMSNorm (f32 residual in, bf16
// out for the next GEMM), the attention prologue (q/k/v biases, per-head q/k RMSNorm, rotary
// embedding, K/V into the paged pool) and SwiGLU. Numerics follow the CPU backend's kernels
// (cpu/kernels.cc): f32 arithmetic in the same order, bf16 only where a value is stored.
#pragma once

#include "../fp8.h"
#include "../kernel_api.h"
#include "launch.h"
#include "bf16_vec.cuh"
#include "reduce.cuh"
#include "row_ops.cuh"

namespace tandem::gpu::TD_NS {

// One block per token; 16-byte loads of the bf16 row (hidden % 8 == 0).
TD_GLOBAL void embed_kernel(const int32_t* tokens, const td::bf16_bits* table, int hidden, float* x) {
  const int64_t t = blockIdx.x;
  const td::bf16_bits* row = table + static_cast<int64_t>(tokens[t]) * hidden;
  float* out = x + t * hidden;
  for (int i = static_cast<int>(threadIdx.x) * 8; i < hidden; i += static_cast<int>(blockDim.x) * 8) {
    unpack8(*reinterpret_cast<const td::vec16*>(row + i), out + i);
  }
}

// One block per output row.
TD_GLOBAL void rmsnorm_kernel(const float* x, int64_t x_stride, const int32_t* rows, const float* weight, int hidden,
                              float eps, td::bf16_bits* out, int64_t out_stride) {
  TD_SHARED(float, scratch, 32);
  const int64_t r = blockIdx.x;
  const float* in = x + (rows != nullptr ? static_cast<int64_t>(rows[r]) : r) * x_stride;
  rmsnorm_row(in, weight, hidden, eps, out + r * out_stride, scratch, PlainLoad{});
}

// One block per token, one warp per head at a time (q heads, then k heads, then v heads).
TD_GLOBAL void qkv_rope_kernel(QkvRopeArgs a) {
  const int warps = static_cast<int>(blockDim.x / 32);
  const int heads = a.num_heads + 2 * a.num_kv_heads;
  for (int h = static_cast<int>(threadIdx.x / 32); h < heads; h += warps) qkv_rope_head(a, blockIdx.x, h, td::lane_id());
}

// Eight elements per thread per step (inter % 8 == 0), grid-stride over tokens x inter.
TD_GLOBAL void silu_mul_kernel(const td::bf16_bits* gate_up, int num_tokens, int inter, td::bf16_bits* out) {
  const int64_t vecs_per_row = inter / 8;
  const int64_t total = static_cast<int64_t>(num_tokens) * vecs_per_row;
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < total;
       v += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = v / vecs_per_row, i = (v % vecs_per_row) * 8;
    const td::bf16_bits* row = gate_up + t * 2 * inter;
    float g[8], u[8], o[8];
    unpack8(*reinterpret_cast<const td::vec16*>(row + i), g);
    unpack8(*reinterpret_cast<const td::vec16*>(row + inter + i), u);
    for (int e = 0; e < 8; ++e) o[e] = silu_mul1(g[e], u[e]);
    *reinterpret_cast<td::vec16*>(out + t * inter + i) = pack8(o);
  }
}

inline void launch_embed(const EmbedArgs& a, void* stream) {
  td::launch(embed_kernel, {static_cast<unsigned>(a.num_tokens)}, 128, 0, stream, a.tokens, a.table, a.hidden, a.x);
}

inline void launch_rmsnorm(const RmsNormArgs& a, void* stream) {
  td::launch(rmsnorm_kernel, {static_cast<unsigned>(a.num_rows)}, kRmsNormThreads, 0, stream, a.x, a.x_stride, a.rows, a.weight,
             a.hidden, a.eps, a.out, a.out_stride);
}

inline void launch_qkv_rope(const QkvRopeArgs& a, void* stream) {
  td::launch(qkv_rope_kernel, {static_cast<unsigned>(a.num_tokens)}, 128, 0, stream, a);
}

inline void launch_silu_mul(const SiluMulArgs& a, void* stream) {
  const int64_t vecs = static_cast<int64_t>(a.num_tokens) * (a.inter / 8);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((vecs + 255) / 256, 4096));
  td::launch(silu_mul_kernel, {blocks}, 256, 0, stream, a.gate_up, a.num_tokens, a.inter, a.out);
}

}  // namespace tandem::gpu::TD_NS
