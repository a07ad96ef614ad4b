// Element-wise kernels of the GPU backend against the CPU backend's kernels (cpu/kernels.h):
// embedding, RMSNorm (row map and strides), the attention prologue (biases, Qwen3 q/k norms,
// RoPE with llama3-scaled frequencies, K/V into the paged pool, a padded token with slot -1
// that must write nothing) and SwiGLU. Inputs are bf16-exact, so the only differences are
// the device's own roundings: outputs stored as bf16 are compared within one bf16 step.
#pragma once

#include <algorithm>

#include "../../src/core/kv_layout.h"
#include "../../src/cpu/kernels.h"
#include "../../src/cuda/fp8.h"
#include "gpu_test_util.h"

namespace tandem_test::gpu {

inline void check_embed_and_rmsnorm(Gpu& g) {
  std::mt19937 rng(101);
  const int vocab = 37, hidden = 72, tokens = 9;
  auto table = random_bf16_floats(rng, static_cast<size_t>(vocab) * hidden);
  std::vector<int32_t> ids = {5, 0, 36, 5, 17, 2, 2, 30, 11};
  DeviceArray<bf16_bits> d_table(*g.device, to_bf16(table));
  DeviceArray<int32_t> d_ids(*g.device, ids);
  DeviceArray<float> d_x(*g.device, static_cast<size_t>(tokens) * hidden);
  d_x.poison();
  tandem::gpu::EmbedArgs e;
  e.tokens = d_ids.get();
  e.num_tokens = tokens;
  e.table = d_table.get();
  e.hidden = hidden;
  e.x = d_x.get();
  g.kernels->embed(e, g.stream());
  auto x = d_x.download();
  bool exact = true;
  for (int t = 0; t < tokens; ++t) {
    for (int j = 0; j < hidden; ++j) exact &= x[static_cast<size_t>(t * hidden + j)] == table[static_cast<size_t>(ids[t] * hidden + j)];
  }
  CHECK(exact, "embed: rows differ from the table");

  // RMSNorm of rows {8, 1, 4} of a strided activation, into a strided bf16 output.
  const int64_t x_stride = hidden + 5, out_stride = hidden + 3;
  auto act = random_floats(rng, static_cast<size_t>(tokens * x_stride), 3.0f);
  auto weight = random_floats(rng, hidden, 0.2f);
  for (float& w : weight) w += 1.0f;
  std::vector<int32_t> rows = {8, 1, 4};
  DeviceArray<float> d_act(*g.device, act);
  DeviceArray<float> d_w(*g.device, weight);
  DeviceArray<int32_t> d_rows(*g.device, rows);
  DeviceArray<bf16_bits> d_out(*g.device, rows.size() * out_stride);
  d_out.poison();
  tandem::gpu::RmsNormArgs r;
  r.x = d_act.get();
  r.x_stride = x_stride;
  r.rows = d_rows.get();
  r.num_rows = 3;
  r.weight = d_w.get();
  r.hidden = hidden;
  r.eps = 1e-5f;
  r.out = d_out.get();
  r.out_stride = out_stride;
  g.kernels->rmsnorm(r, g.stream());
  auto out = from_bf16(d_out.download());
  double worst = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    std::vector<float> want(hidden);
    tandem::cpu::rmsnorm(act.data() + rows[i] * x_stride, weight.data(), hidden, 1e-5f, want.data());
    worst = std::max(worst, max_rel_error(out.data() + i * out_stride, want.data(), hidden));
  }
  CHECK(worst <= kBf16Tolerance, "rmsnorm: max relative error %g", worst);
}

/**
 * The attention prologue on the CPU, in place on one token's q/k/v row: the biases as the GEMM
 * adds them, cpu::rmsnorm per head (Qwen3: q_norm, k_norm non-null), cpu::rope_rotate with f32
 * cos/sin of position x inv_freq, times rope_scale (YaRN) (v heads are rotated too; callers compare q
 * and k/v only).
 */
inline void qkv_rope_reference(std::vector<float>& row, const float* bias, const float* q_norm, const float* k_norm, int heads,
                               int kv_heads, int d, int32_t position, const std::vector<float>& inv_freq, float rope_scale = 1.0f) {
  if (bias != nullptr) for (size_t i = 0; i < row.size(); ++i) row[i] += bias[i];
  const int half = d / 2;
  std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
  for (int j = 0; j < half; ++j) {
    const float angle = static_cast<float>(position) * inv_freq[static_cast<size_t>(j)];
    cs[static_cast<size_t>(j)] = std::cos(angle) * rope_scale;
    sn[static_cast<size_t>(j)] = std::sin(angle) * rope_scale;
  }
  for (int h = 0; h < heads + kv_heads; ++h) {
    float* head = row.data() + h * d;
    if (q_norm != nullptr) tandem::cpu::rmsnorm(head, h < heads ? q_norm : k_norm, d, 1e-6f, head);
    tandem::cpu::rope_rotate(head, cs.data(), sn.data(), d);
  }
}

// yarn: frequencies in all three YaRN bands and a cos/sin scale.
// fp8: the pool is e4m3 (--kv-cache-dtype fp8): K and V land as e4m3(value / the layer's scale),
// within one e4m3 rounding of the CPU's value (2^-4 relative, or half the smallest subnormal step).
// far: the kernel writes through slots past 2^32 pool elements (far_pool_blocks; SIMT only).
inline void check_qkv_rope(Gpu& g, bool qwen3, bool bias, bool llama3_rope, bool yarn = false, bool fp8 = false, bool far = false) {
  std::mt19937 rng(qwen3 * 4 + bias * 2 + llama3_rope + 7);
  const int heads = 6, kv_heads = 2, d = 80, tokens = 5;
  const int q_dim = heads * d, kv_dim = kv_heads * d, width = q_dim + 2 * kv_dim;
  const int64_t stride = width + 8;
  tandem::KvLayout L;
  L.num_blocks = 6;
  L.block_size = 4;
  L.num_layers = 3;
  L.num_kv_heads = kv_heads;
  L.head_dim = d;
  L.elem_bytes = 2;
  const int layer = 1;
  auto qkv = random_floats(rng, static_cast<size_t>(tokens * stride));
  auto b = random_floats(rng, static_cast<size_t>(width), 0.5f);
  auto qn = random_floats(rng, d, 0.1f), kn = random_floats(rng, d, 0.1f);
  for (float& w : qn) w += 1.0f;
  for (float& w : kn) w += 1.0f;
  tandem::ModelConfig c;
  c.head_dim = d;
  c.rope_theta = 500000.0;
  if (llama3_rope) {
    c.rope_scaling.llama3 = true;
    c.rope_scaling.factor = 8.0;
    c.rope_scaling.original_max_position_embeddings = 64;
  }
  if (yarn) {  // frequencies in all three YaRN bands, and a cos/sin scale
    c.rope_scaling.yarn = true;
    c.rope_scaling.factor = 4.0;
    c.rope_scaling.original_max_position_embeddings = 64;
    c.rope_scaling.attention_factor = 1.1386;
  }
  auto inv_freq = tandem::rope_inv_freq(c);
  const float rope_scale = tandem::rope_attention_scale(c);
  std::vector<int32_t> positions = {0, 1, 7, 300, 4};
  std::vector<int32_t> slots = {4 * 3 + 0, 4 * 3 + 1, 4 * 0 + 3, -1, 4 * 5 + 2};  // token 3: padding

  DeviceArray<float> d_qkv(*g.device, qkv), d_b(*g.device, b), d_qn(*g.device, qn), d_kn(*g.device, kn), d_inv(*g.device, inv_freq);
  const int64_t far_blocks = far ? far_pool_blocks(L.block_stride()) : 0;
  std::vector<int32_t> device_slots = slots;
  for (int32_t& s : device_slots) s = s < 0 ? s : s + static_cast<int32_t>(far_blocks * L.block_size);
  DeviceArray<int32_t> d_pos(*g.device, positions), d_slots(*g.device, device_slots);
  DeviceArray<bf16_bits> d_pool(*g.device, static_cast<size_t>(L.num_blocks * L.block_stride()));
  d_pool.poison(0x11);
  // Layer 1's scales are used: |K| <= 448 x 0.031, |V| <= 448 x 0.017, past any value here (saturation is not rounding).
  const std::vector<float> kv_scales = {1.0f, 1.0f, 0.031f, 0.017f, 1.0f, 1.0f};  // [layer][k, v]
  DeviceArray<float> d_kv_scales(*g.device, kv_scales);
  tandem::gpu::QkvRopeArgs a;
  a.qkv = d_qkv.get();
  a.qkv_stride = stride;
  a.num_tokens = tokens;
  a.bias = bias ? d_b.get() : nullptr;
  a.q_norm = qwen3 ? d_qn.get() : nullptr;
  a.k_norm = qwen3 ? d_kn.get() : nullptr;
  a.eps = 1e-6f;
  a.positions = d_pos.get();
  a.slots = d_slots.get();
  a.inv_freq = d_inv.get();
  a.rope_scale = rope_scale;
  a.num_heads = heads;
  a.num_kv_heads = kv_heads;
  a.head_dim = d;
  a.pool = far_pool_base(d_pool.get(), far_blocks * L.block_stride(), fp8 ? 1 : 2);
  a.kv_fp8 = fp8;  // the pool's first half holds the e4m3 bytes then
  a.kv_scales = d_kv_scales.get();
  a.layer = layer;
  a.geo = {L.block_stride(), L.layer_stride(), L.kv_stride(), L.token_stride(), static_cast<int32_t>(L.block_size), kv_heads, d};
  g.kernels->qkv_rope(a, g.stream());
  auto got_q = d_qkv.download();
  auto pool = d_pool.download();

  // CPU: bias as the GEMM adds it, then cpu::rmsnorm per head, cpu::rope_rotate (cos/sin in f32).
  double worst_q = 0, worst_kv = 0;
  int pool_writes_wrong = 0;
  std::vector<bool> written(pool.size(), false);
  for (int t = 0; t < tokens; ++t) {
    std::vector<float> row(qkv.begin() + t * stride, qkv.begin() + t * stride + width);
    qkv_rope_reference(row, bias ? b.data() : nullptr, qwen3 ? qn.data() : nullptr, qwen3 ? kn.data() : nullptr, heads, kv_heads, d,
                       positions[static_cast<size_t>(t)], inv_freq, rope_scale);
    worst_q = std::max(worst_q, max_rel_error(got_q.data() + t * stride, row.data(), q_dim));
    if (slots[static_cast<size_t>(t)] < 0) continue;
    const int64_t blk = slots[static_cast<size_t>(t)] / L.block_size, off = slots[static_cast<size_t>(t)] % L.block_size;
    for (int kv = 0; kv < 2; ++kv) {
      const int64_t base = L.offset(blk, layer, kv, off);
      std::vector<float> got(static_cast<size_t>(kv_dim));
      const float s = kv_scales[static_cast<size_t>(2 * layer + kv)];
      const auto* bytes = reinterpret_cast<const uint8_t*>(pool.data());
      for (int i = 0; i < kv_dim; ++i) {
        if (fp8) {
          got[static_cast<size_t>(i)] = tandem::gpu::fp8_bits_to_float(bytes[base + i]) * s;
          written[static_cast<size_t>((base + i) / 2)] = true;
        } else {
          got[static_cast<size_t>(i)] = tandem::gpu::bf16_bits_to_float(pool[static_cast<size_t>(base + i)]);
          written[static_cast<size_t>(base + i)] = true;
        }
      }
      if (fp8) {
        const float* want = row.data() + q_dim + kv * kv_dim;
        for (int i = 0; i < kv_dim; ++i) {
          const double err = std::fabs(got[static_cast<size_t>(i)] - want[i]);
          const double tol = std::max(std::fabs(static_cast<double>(want[i])) / 16.0, s * 0x1p-10) * 1.001;
          worst_kv = std::max(worst_kv, err / tol * kBf16Tolerance);  // scaled so the bf16 check below applies
        }
      } else {
        worst_kv = std::max(worst_kv, max_rel_error(got.data(), row.data() + q_dim + kv * kv_dim, static_cast<size_t>(kv_dim)));
      }
    }
  }
  // fp8: an element pair is "written" when either byte is; a pair fully outside the slots keeps 0x1111.
  for (size_t i = 0; i < pool.size(); ++i) pool_writes_wrong += !written[i] && pool[i] != 0x1111;
  CHECK(worst_q <= 1e-5, "qkv_rope (qwen3=%d bias=%d llama3=%d): q max relative error %g", qwen3, bias, llama3_rope, worst_q);
  CHECK(worst_kv <= kBf16Tolerance, "qkv_rope (qwen3=%d bias=%d llama3=%d): k/v max relative error %g", qwen3, bias,
        llama3_rope, worst_kv);
  CHECK(pool_writes_wrong == 0, "qkv_rope: %d pool elements written outside the tokens' slots", pool_writes_wrong);
}

inline void check_silu_mul(Gpu& g) {
  std::mt19937 rng(55);
  const int tokens = 7, inter = 136;
  auto gu = random_bf16_floats(rng, static_cast<size_t>(tokens * 2 * inter), 2.0f);
  DeviceArray<bf16_bits> d_gu(*g.device, to_bf16(gu));
  DeviceArray<bf16_bits> d_out(*g.device, static_cast<size_t>(tokens * inter));
  d_out.poison();
  tandem::gpu::SiluMulArgs a;
  a.gate_up = d_gu.get();
  a.num_tokens = tokens;
  a.inter = inter;
  a.out = d_out.get();
  g.kernels->silu_mul(a, g.stream());
  auto out = from_bf16(d_out.download());
  double worst = 0;
  for (int t = 0; t < tokens; ++t) {
    std::vector<float> want(inter);
    tandem::cpu::silu_mul(gu.data() + t * 2 * inter, gu.data() + t * 2 * inter + inter, want.data(), inter);
    worst = std::max(worst, max_rel_error(out.data() + t * inter, want.data(), inter));
  }
  CHECK(worst <= kBf16Tolerance, "silu_mul: max relative error %g", worst);
}

inline void test_elementwise(Gpu& g) {
  check_embed_and_rmsnorm(g);
  for (int v = 0; v < 8; ++v) check_qkv_rope(g, v & 4, v & 2, v & 1);
  check_qkv_rope(g, true, false, false, true);  // YaRN (Qwen3-style)
  check_qkv_rope(g, false, true, false, true);
  check_qkv_rope(g, true, false, true, false, true);  // into an e4m3 pool
  check_qkv_rope(g, false, true, false, false, true);
  const bool far = g.name == "simt";
  if (far) {  // through slots past 2^32 pool elements, bf16 and e4m3
    check_qkv_rope(g, true, true, false, false, false, true);
    check_qkv_rope(g, true, false, false, false, true, true);
  }
  check_silu_mul(g);
  std::printf("gpu elementwise: embed, rmsnorm, 12 qkv_rope variants (2 YaRN, 2 into an e4m3 pool), silu_mul checked on %s%s\n", g.name.c_str(),
              far ? " (2 qkv_rope variants again through slots past 2^32 pool elements)" : "");
}

}  // namespace tandem_test::gpu
