// Per-token kernels of a transformer layer: embedding gather, RMSNorm (f32 residual in, bf16
// out for the next GEMM), the attention prologue (q/k/v biases, per-head q/k RMSNorm, rotary
// embedding, K/V into the paged pool) and SwiGLU. Numerics follow the CPU backend's kernels
// (cpu/kernels.cc): f32 arithmetic in the same order, bf16 only where a value is stored.
#pragma once

#include "../kernel_api.h"
#include "launch.h"
#include "bf16_vec.cuh"
#include "reduce.cuh"

namespace tandem::gpu::TD_NS {

/** Max head_dim / 2 / 32: pairs one lane holds in qkv_rope_kernel (head_dim <= 256). */
inline constexpr int kRopePairsPerLane = 4;

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
  float ss = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < hidden; i += static_cast<int>(blockDim.x)) ss += in[i] * in[i];
  ss = block_sum(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(hidden) + eps);
  td::bf16_bits* o = out + r * out_stride;
  for (int i = static_cast<int>(threadIdx.x); i < hidden; i += static_cast<int>(blockDim.x)) {
    o[i] = td::float_to_bf16(weight[i] * (in[i] * inv));
  }
}

// One block per token, one warp per head at a time (q heads, then k heads, then v heads).
// Lane l holds the rotary pairs (i, i + d/2) for i = l, l + 32, ...
TD_GLOBAL void qkv_rope_kernel(QkvRopeArgs a) {
  const int64_t t = blockIdx.x;
  const unsigned lane = td::lane_id();
  const int warps = static_cast<int>(blockDim.x / 32);
  const int d = a.head_dim, half = d / 2;
  const int heads = a.num_heads + 2 * a.num_kv_heads;
  float* row = a.qkv + t * a.qkv_stride;
  const int32_t pos = a.positions[t];
  const int32_t slot = a.slots[t];
  td::bf16_bits* dst_base = nullptr;
  if (slot >= 0) {
    const int64_t blk = slot / a.geo.block_size, off = slot % a.geo.block_size;
    dst_base = a.pool + blk * a.geo.block_stride + static_cast<int64_t>(a.layer) * a.geo.layer_stride + off * a.geo.token_stride;
  }
  for (int h = static_cast<int>(threadIdx.x / 32); h < heads; h += warps) {
    const bool is_q = h < a.num_heads;
    const bool is_v = h >= a.num_heads + a.num_kv_heads;
    float* head = row + static_cast<int64_t>(h) * d;
    const float* bias = a.bias != nullptr ? a.bias + static_cast<int64_t>(h) * d : nullptr;
    float x1[kRopePairsPerLane], x2[kRopePairsPerLane];
    float ss = 0.0f;
    for (int p = 0; p < kRopePairsPerLane; ++p) {
      const int i = static_cast<int>(lane) + 32 * p;
      x1[p] = x2[p] = 0.0f;
      if (i < half) {
        x1[p] = head[i] + (bias != nullptr ? bias[i] : 0.0f);
        x2[p] = head[i + half] + (bias != nullptr ? bias[i + half] : 0.0f);
        ss += x1[p] * x1[p] + x2[p] * x2[p];
      }
    }
    if (!is_v && a.q_norm != nullptr) {
      const float* w = is_q ? a.q_norm : a.k_norm;
      ss = warp_sum(ss);
      const float inv = 1.0f / sqrtf(ss / static_cast<float>(d) + a.eps);
      for (int p = 0; p < kRopePairsPerLane; ++p) {
        const int i = static_cast<int>(lane) + 32 * p;
        if (i < half) {
          x1[p] = w[i] * (x1[p] * inv);
          x2[p] = w[i + half] * (x2[p] * inv);
        }
      }
    }
    if (!is_v) {
      for (int p = 0; p < kRopePairsPerLane; ++p) {
        const int i = static_cast<int>(lane) + 32 * p;
        if (i < half) {
          const float angle = static_cast<float>(pos) * a.inv_freq[i];
          const float c = cosf(angle) * a.rope_scale, s = sinf(angle) * a.rope_scale;
          const float r1 = x1[p] * c - x2[p] * s;
          const float r2 = x2[p] * c + x1[p] * s;
          x1[p] = r1;
          x2[p] = r2;
        }
      }
    }
    if (is_q) {
      for (int p = 0; p < kRopePairsPerLane; ++p) {
        const int i = static_cast<int>(lane) + 32 * p;
        if (i < half) {
          head[i] = x1[p];
          head[i + half] = x2[p];
        }
      }
    } else if (dst_base != nullptr) {
      const int kv_head = is_v ? h - a.num_heads - a.num_kv_heads : h - a.num_heads;
      td::bf16_bits* dst = dst_base + (is_v ? a.geo.kv_stride : 0) + static_cast<int64_t>(kv_head) * d;
      for (int p = 0; p < kRopePairsPerLane; ++p) {
        const int i = static_cast<int>(lane) + 32 * p;
        if (i < half) {
          dst[i] = td::float_to_bf16(x1[p]);
          dst[i + half] = td::float_to_bf16(x2[p]);
        }
      }
    }
  }
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
    for (int e = 0; e < 8; ++e) o[e] = g[e] / (1.0f + expf(-g[e])) * u[e];
    *reinterpret_cast<td::vec16*>(out + t * inter + i) = pack8(o);
  }
}

inline void launch_embed(const EmbedArgs& a, void* stream) {
  td::launch(embed_kernel, {static_cast<unsigned>(a.num_tokens)}, 128, 0, stream, a.tokens, a.table, a.hidden, a.x);
}

inline void launch_rmsnorm(const RmsNormArgs& a, void* stream) {
  td::launch(rmsnorm_kernel, {static_cast<unsigned>(a.num_rows)}, 256, 0, stream, a.x, a.x_stride, a.rows, a.weight,
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
