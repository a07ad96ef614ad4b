// Per-row operations that more than one kernel applies, written once so every kernel that
// applies them computes the same bits: the RMSNorm of one row by a block (rmsnorm_kernel, and
// the fused decode GEMVs' epilogue), the attention prologue of one (token, head) by a warp
// (qkv_rope_kernel, and the fused QKV GEMV's epilogue), and SwiGLU of one element (silu_mul_kernel
// and the fused gate/up GEMV). Device functions only, so any target unit may include this.
#pragma once

#include "../fp8.h"
#include "../kernel_api.h"
#include "reduce.cuh"

namespace tandem::gpu::TD_NS {

/** The block size of rmsnorm_kernel, and of every kernel whose rmsnorm_row must give its bits. */
inline constexpr unsigned kRmsNormThreads = 256;

/** Max head_dim / 2 / 32: pairs one lane holds in qkv_rope_head (head_dim <= 256). */
inline constexpr int kRopePairsPerLane = 4;

/**
 * out[i] = bf16(weight[i] * (in[i] / rms(in))) over one row, by the whole block (every thread
 * takes part: the sum of squares is a block reduction in thread-stride order). `load` reads
 * the input (a plain load, or one that bypasses L1 for data other blocks just wrote).
 */
template <class Load>
TD_DEVICE void rmsnorm_row(const float* in, const float* weight, int hidden, float eps, td::bf16_bits* out,
                           float* scratch, const Load& load) {
  float ss = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < hidden; i += static_cast<int>(blockDim.x)) {
    const float v = load(in + i);
    ss += v * v;
  }
  ss = block_sum(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(hidden) + eps);
  for (int i = static_cast<int>(threadIdx.x); i < hidden; i += static_cast<int>(blockDim.x)) {
    out[i] = td::float_to_bf16(weight[i] * (load(in + i) * inv));
  }
}

struct PlainLoad {
  TD_DEVICE float operator()(const float* p) const { return *p; }
};

/** SwiGLU of one element, as the CPU backend: silu(gate) * up in f32. */
TD_DEVICE float silu_mul1(float g, float u) { return g / (1.0f + expf(-g)) * u; }

/**
 * The attention prologue of token t's head h by one warp: the head's q/k/v bias, per-head q/k
 * RMSNorm (Qwen3), rotary embedding of q (in place) and k, and k/v into the pool at the
 * token's slot (none for slot -1). Lane l holds the rotary pairs (i, i + d/2), i = l, l + 32, ...
 */
TD_DEVICE void qkv_rope_head(const QkvRopeArgs& a, int64_t t, int h, unsigned lane) {
  const int d = a.head_dim, half = d / 2;
  float* row = a.qkv + t * a.qkv_stride;
  const int32_t pos = a.positions[t];
  const int32_t slot = a.slots[t];
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
        const float c = cosf(angle) * a.rope_scale, s = sinf(angle) * a.rope_scale;  // YaRN scales cos/sin
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
  } else if (slot >= 0) {
    const int64_t blk = slot / a.geo.block_size, off = slot % a.geo.block_size;
    const int kv_head = is_v ? h - a.num_heads - a.num_kv_heads : h - a.num_heads;
    const int64_t at = blk * a.geo.block_stride + static_cast<int64_t>(a.layer) * a.geo.layer_stride + off * a.geo.token_stride +
                       (is_v ? a.geo.kv_stride : 0) + static_cast<int64_t>(kv_head) * d;  // in elements
    if (a.kv_fp8) {
      // e4m3 pool: value / the layer's K or V scale, rounded to nearest even, saturating.
      fp8_bits* dst = reinterpret_cast<fp8_bits*>(a.pool) + at;
      const float s = a.kv_scales[2 * a.layer + (is_v ? 1 : 0)];
      for (int p = 0; p < kRopePairsPerLane; ++p) {
        const int i = static_cast<int>(lane) + 32 * p;
        if (i < half) {
          dst[i] = fp8_quantize(x1[p], s);
          dst[i + half] = fp8_quantize(x2[p], s);
        }
      }
    } else {
      td::bf16_bits* dst = a.pool + at;
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

}  // namespace tandem::gpu::TD_NS
