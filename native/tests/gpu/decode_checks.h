// The fused decode GEMVs (decode_api.h, kernels/decode_rows.cuh), each held to two references:
//  - bit for bit, the unfused kernels it replaces, run on the same inputs through KernelApi: the
//    few-rows GEMM (same split plan) then rmsnorm | silu_mul | qkv_rope. Any difference in a
//    column's mapping, a split, the split-order sum, the epilogue's arithmetic or a row shows;
//  - within bf16 tolerance, the CPU backend's kernels on a double-precision product (the
//    contract every GPU kernel keeps: cpu::rmsnorm, cpu::silu_mul, cpu::rope_rotate).
// Shapes reach 1, 2, 3, 5 and 16 rows (row passes of 1, 2, 4, 8, 16), k split 1 to 16 ways,
// the last tile past n, head_dim 64 / 80 / 128 (one head, two heads, and a quarter of a head
// per tile group), a padded row (slot -1, no pool write), Qwen2 biases, Qwen3 q/k norms and YaRN's
// cos/sin scale.
// Each case runs the fused kernel twice: the second launch must find its counters reset (a CUDA
// graph replays launches with the counters as the last one left them).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "../../src/core/kv_layout.h"
#include "../../src/core/model_config.h"
#include "../../src/core/thread_pool.h"
#include "../../src/cpu/kernels.h"
#include "../../src/cuda/decode_api.h"
#include "../../src/cuda/step_plan.h"
#include "elementwise_checks.h"
#include "gpu_test_util.h"

namespace tandem_test::gpu {

using tandem::gpu::DecodeEpilogue;
using tandem::gpu::DecodeGemvArgs;

inline std::unique_ptr<tandem::gpu::DecodeKernelApi> open_decode_kernels(const Gpu& g) {
  return g.name == "cuda" ? tandem::gpu::make_cuda_decode_kernels() : tandem::gpu::make_simt_decode_kernels();
}

/** A decode GEMV's common inputs: bf16 a [m][lda], w [n][k], the workspace and counters. */
struct DecodeInputs {
  int m, n, k;
  int64_t lda;
  std::vector<float> a, w;
  DeviceArray<bf16_bits> d_a, d_w;
  DeviceArray<float> d_ws;
  DeviceArray<int> d_counters;
  DecodeInputs(Gpu& g, std::mt19937& rng, int m_, int n_, int k_)
      : m(m_), n(n_), k(k_), lda(k_ + 8), a(random_bf16_floats(rng, static_cast<size_t>(m_ * (k_ + 8)))),
        w(random_bf16_floats(rng, static_cast<size_t>(n_) * k_, 0.25f)), d_a(*g.device, to_bf16(a)), d_w(*g.device, to_bf16(w)),
        d_ws(*g.device, static_cast<size_t>(tandem::gpu::kGemmWorkspaceFloats)),
        d_counters(*g.device, static_cast<size_t>(tandem::gpu::decode_gemv_counters(n_))) {
    d_counters.poison(0);
  }
  DecodeGemvArgs args(DecodeEpilogue e) const {
    DecodeGemvArgs x;
    x.epilogue = e;
    x.m = m;
    x.n = n;
    x.k = k;
    x.a = d_a.get();
    x.lda = lda;
    x.w = d_w.get();
    x.ldw = k;
    x.workspace = d_ws.get();
    x.workspace_floats = tandem::gpu::kGemmWorkspaceFloats;
    x.counters = d_counters.get();
    return x;
  }
  tandem::gpu::GemmArgs gemm(void* c, int64_t ldc, tandem::gpu::GemmOut out, bool accumulate, const float* bias) const {
    tandem::gpu::GemmArgs x;
    x.m = m;
    x.n = n;
    x.k = k;
    x.a = d_a.get();
    x.lda = lda;
    x.w = d_w.get();
    x.ldw = k;
    x.bias = bias;
    x.c = c;
    x.ldc = ldc;
    x.out = out;
    x.accumulate = accumulate;
    x.workspace = d_ws.get();
    x.workspace_floats = tandem::gpu::kGemmWorkspaceFloats;
    return x;
  }
  /** a[r] . w[j] in double. */
  double dot(int r, int j) const {
    double s = 0;
    for (int i = 0; i < k; ++i) s += static_cast<double>(a[static_cast<size_t>(r * lda + i)]) * w[static_cast<size_t>(j) * k + i];
    return s;
  }
  bool counters_zero() const {
    const auto c = d_counters.download();
    return std::all_of(c.begin(), c.end(), [](int v) { return v == 0; });
  }
};

// O / down projection + residual + the next RMSNorm.
inline void check_decode_residual_norm(Gpu& g, tandem::gpu::DecodeKernelApi& dk, int m, int n, int k, bool bias, uint32_t seed) {
  std::mt19937 rng(seed);
  DecodeInputs in(g, rng, m, n, k);
  const int64_t ldx = n + 4, ldxn = n + 8;
  const auto x0 = random_floats(rng, static_cast<size_t>(m * ldx), 2.0f);
  auto norm = random_floats(rng, static_cast<size_t>(n), 0.2f);
  for (float& v : norm) v += 1.0f;
  const auto b = random_floats(rng, static_cast<size_t>(n), 0.5f);
  DeviceArray<float> d_b(*g.device, b), d_norm(*g.device, norm), d_x(*g.device, x0), d_x2(*g.device, x0);
  DeviceArray<bf16_bits> d_xn(*g.device, static_cast<size_t>(m * ldxn)), d_xn2(*g.device, static_cast<size_t>(m * ldxn));
  d_xn.poison();
  d_xn2.poison();

  DecodeGemvArgs a = in.args(DecodeEpilogue::kResidualNorm);
  a.bias = bias ? d_b.get() : nullptr;
  a.x = d_x.get();
  a.ldx = ldx;
  a.norm_weight = d_norm.get();
  a.eps = 1e-5f;
  a.xn = d_xn.get();
  a.ldxn = ldxn;
  dk.gemv(a, g.stream());
  const auto x_fused = d_x.download();
  const auto xn_fused = d_xn.download();
  CHECK(in.counters_zero(), "decode residual (m=%d n=%d k=%d): counters not reset", m, n, k);
  // Again on the original residual: same bits (the counters were left ready).
  d_x.upload(x0);
  dk.gemv(a, g.stream());
  CHECK(count_bit_diffs(d_x.download(), x_fused) == 0 && count_bit_diffs(d_xn.download(), xn_fused) == 0,
        "decode residual (m=%d n=%d k=%d): a second launch differs", m, n, k);

  // Unfused: the GEMM accumulating into the residual, then rmsnorm.
  g.kernels->gemm(in.gemm(d_x2.get(), ldx, tandem::gpu::GemmOut::kF32, true, a.bias), g.stream());
  tandem::gpu::RmsNormArgs r;
  r.x = d_x2.get();
  r.x_stride = ldx;
  r.num_rows = m;
  r.weight = d_norm.get();
  r.hidden = n;
  r.eps = 1e-5f;
  r.out = d_xn2.get();
  r.out_stride = ldxn;
  g.kernels->rmsnorm(r, g.stream());
  CHECK(count_bit_diffs(x_fused, d_x2.download()) == 0, "decode residual (m=%d n=%d k=%d bias=%d): residual differs from the unfused GEMM", m, n, k, bias);
  CHECK(count_bit_diffs(xn_fused, d_xn2.download()) == 0, "decode residual (m=%d n=%d k=%d bias=%d): norm differs from rmsnorm_kernel", m, n, k, bias);

  // CPU: x + a.w + b in double, then cpu::rmsnorm.
  double worst_x = 0, worst_n = 0;
  const auto xn = from_bf16(xn_fused);
  for (int i = 0; i < m; ++i) {
    std::vector<float> row(static_cast<size_t>(n)), want(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) row[static_cast<size_t>(j)] = static_cast<float>(x0[static_cast<size_t>(i * ldx + j)] + in.dot(i, j) + (bias ? b[static_cast<size_t>(j)] : 0.0));
    worst_x = std::max(worst_x, max_rel_error(x_fused.data() + i * ldx, row.data(), static_cast<size_t>(n)));
    tandem::cpu::rmsnorm(row.data(), norm.data(), n, 1e-5f, want.data());
    worst_n = std::max(worst_n, max_rel_error(xn.data() + i * ldxn, want.data(), static_cast<size_t>(n)));
  }
  CHECK(worst_x <= 1e-4, "decode residual (m=%d n=%d k=%d): residual vs CPU %g", m, n, k, worst_x);
  CHECK(worst_n <= 2 * kBf16Tolerance, "decode residual (m=%d n=%d k=%d): norm vs CPU %g", m, n, k, worst_n);
}

// gate/up projection + SwiGLU.
inline void check_decode_silu(Gpu& g, tandem::gpu::DecodeKernelApi& dk, int m, int inter, int k, uint32_t seed) {
  std::mt19937 rng(seed);
  DecodeInputs in(g, rng, m, 2 * inter, k);
  const int64_t ldact = inter + 8;
  DeviceArray<bf16_bits> d_act(*g.device, static_cast<size_t>(m * ldact)), d_gu(*g.device, static_cast<size_t>(m * 2 * inter)),
      d_act2(*g.device, static_cast<size_t>(m * inter));
  d_act.poison();
  DecodeGemvArgs a = in.args(DecodeEpilogue::kSiluMul);
  a.act = d_act.get();
  a.ldact = ldact;
  dk.gemv(a, g.stream());
  const auto act = d_act.download();
  CHECK(in.counters_zero(), "decode silu (m=%d inter=%d k=%d): counters not reset", m, inter, k);
  dk.gemv(a, g.stream());
  CHECK(count_bit_diffs(d_act.download(), act) == 0, "decode silu (m=%d inter=%d k=%d): a second launch differs", m, inter, k);

  g.kernels->gemm(in.gemm(d_gu.get(), 2 * inter, tandem::gpu::GemmOut::kBf16, false, nullptr), g.stream());
  tandem::gpu::SiluMulArgs s;
  s.gate_up = d_gu.get();
  s.num_tokens = m;
  s.inter = inter;
  s.out = d_act2.get();
  g.kernels->silu_mul(s, g.stream());
  const auto act2 = d_act2.download();
  size_t diffs = 0, gaps_written = 0;
  for (int r = 0; r < m; ++r) {
    diffs += std::memcmp(act.data() + r * ldact, act2.data() + r * inter, static_cast<size_t>(inter) * 2) != 0;
    for (int64_t j = inter; j < ldact; ++j) gaps_written += act[static_cast<size_t>(r * ldact + j)] != 0xFFFF;
  }
  CHECK(diffs == 0, "decode silu (m=%d inter=%d k=%d): %zu rows differ from gemm + silu_mul", m, inter, k, diffs);
  CHECK(gaps_written == 0, "decode silu (m=%d inter=%d k=%d): %zu elements written past inter", m, inter, k, gaps_written);

  double worst = 0;
  const auto got = from_bf16(act);
  for (int r = 0; r < m; ++r) {
    std::vector<float> gate(static_cast<size_t>(inter)), up(static_cast<size_t>(inter)), want(static_cast<size_t>(inter));
    for (int j = 0; j < inter; ++j) {
      gate[static_cast<size_t>(j)] = static_cast<float>(in.dot(r, j));
      up[static_cast<size_t>(j)] = static_cast<float>(in.dot(r, inter + j));
    }
    tandem::cpu::silu_mul(gate.data(), up.data(), want.data(), inter);
    worst = std::max(worst, max_rel_error(got.data() + r * ldact, want.data(), static_cast<size_t>(inter)));
  }
  CHECK(worst <= 3 * kBf16Tolerance, "decode silu (m=%d inter=%d k=%d): vs CPU %g", m, inter, k, worst);
}

// q/k/v projection + bias + q/k norm + RoPE + K/V write.
// far: both write through slots past 2^32 pool elements (far_pool_blocks; SIMT only).
inline void check_decode_qkv(Gpu& g, tandem::gpu::DecodeKernelApi& dk, int m, int heads, int kv_heads, int d, int k, bool qwen3,
                             bool bias, uint32_t seed, float rope_scale = 1.0f, bool far = false) {
  std::mt19937 rng(seed);
  const int q_dim = heads * d, kv_dim = kv_heads * d, width = q_dim + 2 * kv_dim;
  DecodeInputs in(g, rng, m, width, k);
  const int64_t stride = width + 8;
  tandem::KvLayout L;
  L.num_blocks = 8;
  L.block_size = 4;
  L.num_layers = 2;
  L.num_kv_heads = kv_heads;
  L.head_dim = d;
  L.elem_bytes = 2;
  const int layer = 1;
  auto b = random_floats(rng, static_cast<size_t>(width), 0.5f);
  auto qn = random_floats(rng, static_cast<size_t>(d), 0.1f), kn = random_floats(rng, static_cast<size_t>(d), 0.1f);
  for (float& v : qn) v += 1.0f;
  for (float& v : kn) v += 1.0f;
  tandem::ModelConfig c;
  c.head_dim = d;
  c.rope_theta = 10000.0;
  const auto inv_freq = tandem::rope_inv_freq(c);
  std::vector<int32_t> positions(static_cast<size_t>(m)), slots(static_cast<size_t>(m));
  for (int t = 0; t < m; ++t) {
    positions[static_cast<size_t>(t)] = 3 + 17 * t;
    slots[static_cast<size_t>(t)] = (t * 5 + 2) % static_cast<int>(L.num_blocks * L.block_size);
  }
  if (m > 1) slots[static_cast<size_t>(m - 1)] = -1;  // a graph's padded row
  DeviceArray<float> d_b(*g.device, b), d_qn(*g.device, qn), d_kn(*g.device, kn), d_inv(*g.device, inv_freq);
  const int64_t far_blocks = far ? far_pool_blocks(L.block_stride()) : 0, far_elements = far_blocks * L.block_stride();
  std::vector<int32_t> device_slots = slots;
  for (int32_t& s : device_slots) s = s < 0 ? s : s + static_cast<int32_t>(far_blocks * L.block_size);
  DeviceArray<int32_t> d_pos(*g.device, positions), d_slots(*g.device, device_slots);
  DeviceArray<float> d_qkv(*g.device, static_cast<size_t>(m * stride)), d_qkv2(*g.device, static_cast<size_t>(m * stride));
  DeviceArray<bf16_bits> d_pool(*g.device, static_cast<size_t>(L.num_blocks * L.block_stride())),
      d_pool2(*g.device, static_cast<size_t>(L.num_blocks * L.block_stride()));
  DeviceArray<int64_t> d_progress(*g.device, 1);
  d_qkv.poison();
  d_qkv2.poison();
  d_pool.poison(0x11);
  d_pool2.poison(0x11);
  d_progress.poison(0);

  tandem::gpu::QkvRopeArgs rope;
  rope.qkv_stride = stride;
  rope.num_tokens = m;
  rope.bias = bias ? d_b.get() : nullptr;
  rope.q_norm = qwen3 ? d_qn.get() : nullptr;
  rope.k_norm = qwen3 ? d_kn.get() : nullptr;
  rope.eps = 1e-6f;
  rope.positions = d_pos.get();
  rope.slots = d_slots.get();
  rope.inv_freq = d_inv.get();
  rope.rope_scale = rope_scale;  // YaRN's attention factor on cos/sin
  rope.num_heads = heads;
  rope.num_kv_heads = kv_heads;
  rope.head_dim = d;
  rope.layer = layer;
  rope.geo = {L.block_stride(), L.layer_stride(), L.kv_stride(), L.token_stride(), static_cast<int32_t>(L.block_size), kv_heads, d};

  DecodeGemvArgs a = in.args(DecodeEpilogue::kQkvRope);
  a.rope = rope;
  a.rope.qkv = d_qkv.get();
  a.rope.pool = far_pool_base(d_pool.get(), far_elements);
  a.progress = d_progress.get();
  a.progress_value = 7;
  dk.gemv(a, g.stream());
  const auto qkv = d_qkv.download();
  const auto pool = d_pool.download();
  CHECK(d_progress.download()[0] == 7, "decode qkv (m=%d d=%d): the progress mark was not written", m, d);
  CHECK(in.counters_zero(), "decode qkv (m=%d d=%d k=%d): counters not reset", m, d, k);
  d_qkv.poison();
  dk.gemv(a, g.stream());
  CHECK(count_bit_diffs(d_qkv.download(), qkv) == 0 && count_bit_diffs(d_pool.download(), pool) == 0,
        "decode qkv (m=%d d=%d k=%d): a second launch differs", m, d, k);

  g.kernels->gemm(in.gemm(d_qkv2.get(), stride, tandem::gpu::GemmOut::kF32, false, nullptr), g.stream());
  tandem::gpu::QkvRopeArgs r2 = rope;
  r2.qkv = d_qkv2.get();
  r2.pool = far_pool_base(d_pool2.get(), far_elements);
  g.kernels->qkv_rope(r2, g.stream());
  CHECK(count_bit_diffs(qkv, d_qkv2.download()) == 0, "decode qkv (m=%d heads=%d/%d d=%d k=%d qwen3=%d bias=%d): q/k/v rows differ from gemm + qkv_rope", m,
        heads, kv_heads, d, k, qwen3, bias);
  CHECK(count_bit_diffs(pool, d_pool2.download()) == 0, "decode qkv (m=%d heads=%d/%d d=%d k=%d qwen3=%d bias=%d): the pool differs from gemm + qkv_rope", m,
        heads, kv_heads, d, k, qwen3, bias);

  // CPU: the projection in double, bias, cpu::rmsnorm per head, cpu::rope_rotate.
  double worst_q = 0, worst_kv = 0;
  for (int t = 0; t < m; ++t) {
    std::vector<float> row(static_cast<size_t>(width));
    for (int j = 0; j < width; ++j) row[static_cast<size_t>(j)] = static_cast<float>(in.dot(t, j));
    qkv_rope_reference(row, bias ? b.data() : nullptr, qwen3 ? qn.data() : nullptr, qwen3 ? kn.data() : nullptr, heads, kv_heads, d,
                       positions[static_cast<size_t>(t)], inv_freq, rope_scale);
    worst_q = std::max(worst_q, max_rel_error(qkv.data() + t * stride, row.data(), static_cast<size_t>(q_dim)));
    if (slots[static_cast<size_t>(t)] < 0) continue;
    const int64_t blk = slots[static_cast<size_t>(t)] / L.block_size, off = slots[static_cast<size_t>(t)] % L.block_size;
    for (int kv = 0; kv < 2; ++kv) {
      const int64_t at = L.offset(blk, layer, kv, off);
      std::vector<float> got(static_cast<size_t>(kv_dim));
      for (int i = 0; i < kv_dim; ++i) got[static_cast<size_t>(i)] = tandem::gpu::bf16_bits_to_float(pool[static_cast<size_t>(at + i)]);
      worst_kv = std::max(worst_kv, max_rel_error(got.data(), row.data() + q_dim + kv * kv_dim, static_cast<size_t>(kv_dim)));
    }
  }
  CHECK(worst_q <= 1e-4, "decode qkv (m=%d d=%d k=%d qwen3=%d bias=%d): q vs CPU %g", m, d, k, qwen3, bias, worst_q);
  CHECK(worst_kv <= 2 * kBf16Tolerance, "decode qkv (m=%d d=%d k=%d qwen3=%d bias=%d): k/v vs CPU %g", m, d, k, qwen3, bias, worst_kv);
}

// Decode attention with the merge in the same launch, vs attention_decode_kernel +
// attention_merge_kernel (bit for bit) and cpu::PagedAttention (bf16 tolerance).
// span > 1: each of `positions` starts a verify step's rows (span consecutive positions over one
// block table, as spec::expand_verify leaves them), planned as decode spans: the plan must group
// them, and with one split the spans must equal one block per row bit for bit (a span row's
// extra chunks are all masked, so its running sums never change).
// far: the kernels read through block ids past 2^32 pool elements (far_pool_blocks; SIMT only).
inline void check_decode_attention(Gpu& g, tandem::gpu::DecodeKernelApi& dk, int d, int heads, int kv_heads, int block_size,
                                   const std::vector<int32_t>& starts, int splits, uint32_t seed, int span = 1, bool far = false) {
  std::vector<int32_t> positions;
  for (int32_t p : starts) {
    for (int j = 0; j < span; ++j) positions.push_back(p + j);
  }
  std::mt19937 rng(seed);
  tandem::KvLayout L;
  L.block_size = block_size;
  L.num_layers = 2;
  L.num_kv_heads = kv_heads;
  L.head_dim = d;
  L.elem_bytes = 2;
  int64_t need = 0;
  for (int32_t p : starts) need += (p + span - 1) / block_size + 1;
  L.num_blocks = need + 2;
  std::vector<std::vector<int32_t>> tables;
  int32_t next = 1;  // block 0 unused
  tandem::ForwardBatch batch;
  std::vector<int32_t> token_ids(positions.size(), 1);
  batch.tokens = token_ids.data();
  batch.num_tokens = static_cast<int32_t>(positions.size());
  for (int32_t p : starts) {
    std::vector<int32_t> t;
    for (int32_t b = 0; b <= (p + span - 1) / block_size; ++b) t.push_back(next++);
    tables.push_back(t);
  }
  for (size_t i = 0; i < positions.size(); ++i) {
    const std::vector<int32_t>& table = tables[i / static_cast<size_t>(span)];
    tandem::ForwardSeq f;
    f.token_offset = static_cast<int32_t>(i);
    f.num_tokens = 1;
    f.start_pos = positions[i];
    f.block_table = table.data();
    f.num_blocks = static_cast<int32_t>(table.size());
    f.want_logits = true;
    batch.seqs.push_back(f);
  }
  const int n = static_cast<int>(positions.size());
  const int64_t stride = heads * d + 8;
  auto pool = random_bf16_floats(rng, static_cast<size_t>(L.num_blocks * L.block_stride()));
  auto q = random_floats(rng, static_cast<size_t>(n * stride));
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  tandem::gpu::PlanOptions o;
  o.block_size = block_size;
  o.tile_tokens = tandem::gpu::attention_tile_tokens(heads / kv_heads, d);
  o.num_kv_heads = kv_heads;
  o.force_splits = splits;
  o.span_tokens = span > 1 ? o.tile_tokens : 1;
  tandem::gpu::StepPlan plan;
  // The plan's image takes far block ids; the CPU reads the tables as they were.
  const int64_t far_blocks = far ? far_pool_blocks(L.block_stride()) : 0;
  for (auto& t : tables) {
    for (int32_t& b : t) b += static_cast<int32_t>(far_blocks);
  }
  tandem::gpu::plan_step(batch, o, plan);
  for (auto& t : tables) {
    for (int32_t& b : t) b -= static_cast<int32_t>(far_blocks);
  }
  const int32_t want_spans = span > 1 ? static_cast<int32_t>(starts.size() * ((span + o.tile_tokens - 1) / o.tile_tokens)) : n;
  CHECK(plan.num_spans == want_spans, "decode attention span=%d: %d spans planned for %d rows (want %d)", span, plan.num_spans, n,
        want_spans);
  DeviceArray<bf16_bits> d_pool(*g.device, to_bf16(pool));
  DeviceArray<float> d_q(*g.device, q);
  DeviceArray<int32_t> d_img(*g.device, plan.image);
  DeviceArray<float> d_partial(*g.device, static_cast<size_t>(n * splits * heads * tandem::gpu::attention_partial_floats(d)));
  DeviceArray<bf16_bits> d_out(*g.device, static_cast<size_t>(n * stride)), d_out2(*g.device, static_cast<size_t>(n * stride));
  DeviceArray<int> d_counters(*g.device, static_cast<size_t>(tandem::gpu::decode_attention_counters(n, kv_heads)));
  d_out.poison();
  d_out2.poison();
  d_counters.poison(0);
  tandem::gpu::AttentionArgs a;
  a.q = d_q.get();
  a.q_stride = stride;
  a.out = d_out.get();
  a.out_stride = stride;
  a.pool = far_pool_base(d_pool.get(), far_blocks * L.block_stride());
  a.layer = 1;
  a.geo = {L.block_stride(), L.layer_stride(), L.kv_stride(), L.token_stride(), static_cast<int32_t>(block_size), kv_heads, d};
  a.num_heads = heads;
  a.scale = scale;
  const int32_t* img = d_img.get();
  a.seqs = reinterpret_cast<const tandem::gpu::SeqDesc*>(img + plan.layout.seqs);
  a.block_tables = img + plan.layout.block_tables;
  a.decode_seqs = img + plan.layout.decode_seqs;
  a.num_decode = plan.num_decode;
  a.num_splits = plan.num_splits;
  a.partial = d_partial.get();
  a.decode_spans = img + plan.layout.decode_spans;
  a.max_span = plan.max_span;
  dk.attention(a, d_counters.get(), g.stream());
  const auto fused = d_out.download();
  const auto counters = d_counters.download();
  CHECK(std::all_of(counters.begin(), counters.end(), [](int v) { return v == 0; }), "decode attention d=%d splits=%d: counters not reset", d,
        splits);
  tandem::gpu::AttentionArgs b = a;
  b.out = d_out2.get();
  g.kernels->attention(b, g.stream());
  CHECK(count_bit_diffs(fused, d_out2.download()) == 0, "decode attention d=%d heads=%d/%d block=%d splits=%d: differs from decode + merge kernels",
        d, heads, kv_heads, block_size, splits);
  if (span > 1 && splits == 1) {
    tandem::gpu::PlanOptions rows = o;
    rows.span_tokens = 1;
    tandem::gpu::StepPlan per_row;
    tandem::gpu::plan_step(batch, rows, per_row);
    DeviceArray<int32_t> d_img_rows(*g.device, per_row.image);
    tandem::gpu::AttentionArgs r = a;
    r.out = d_out2.get();
    r.seqs = reinterpret_cast<const tandem::gpu::SeqDesc*>(d_img_rows.get() + per_row.layout.seqs);
    r.block_tables = d_img_rows.get() + per_row.layout.block_tables;
    r.decode_seqs = d_img_rows.get() + per_row.layout.decode_seqs;
    r.decode_spans = d_img_rows.get() + per_row.layout.decode_spans;
    r.max_span = per_row.max_span;
    d_out2.poison();
    dk.attention(r, d_counters.get(), g.stream());
    CHECK(per_row.num_spans == n && count_bit_diffs(fused, d_out2.download()) == 0,
          "decode attention d=%d span=%d: spans differ from one block per row (%d spans)", d, span, per_row.num_spans);
  }

  tandem::KvLayout Lf = L;
  Lf.elem_bytes = 4;
  std::vector<float> want(static_cast<size_t>(n * stride), NAN);
  tandem::ThreadPool threads(1);
  tandem::cpu::AttentionLayer c;
  c.q = q.data();
  c.q_stride = stride;
  c.out = want.data();
  c.out_stride = stride;
  c.kv_pool = pool.data();
  c.layer = 1;
  c.num_heads = heads;
  c.scale = scale;
  tandem::cpu::PagedAttention cpu;
  cpu.run(threads, batch, Lf, c);
  const auto got = from_bf16(fused);
  double worst = 0;
  for (int t = 0; t < n; ++t) worst = std::max(worst, max_rel_error(got.data() + t * stride, want.data() + t * stride, static_cast<size_t>(heads * d)));
  CHECK(worst <= kBf16Tolerance, "decode attention d=%d heads=%d/%d splits=%d: vs CPU %g", d, heads, kv_heads, splits, worst);
}

inline void test_decode_fused(Gpu& g, bool quick) {
  auto dk = open_decode_kernels(g);
  dk->set_overlap(true);  // programmatic dependent launches, as the engine runs them (the harness holds each thread to its wait)
  int cases = 0;
  // (m, n, k): k split 4 ways over 3 tiles; 16 rows over 2 chunks of k; a tile past n.
  const int residual[][3] = {{1, 96, 1024}, {3, 100, 512}, {16, 72, 2304}, {5, 264, 264}, {2, 8448, 256}};
  for (const auto& s : residual) {
    if (quick && s[1] > 1000) continue;
    for (int bias = 0; bias < 2; ++bias, ++cases) check_decode_residual_norm(g, *dk, s[0], s[1], s[2], bias, 900 + cases);
  }
  const int silu[][3] = {{1, 40, 768}, {2, 136, 256}, {16, 24, 520}, {3, 4232, 256}};
  for (const auto& s : silu) {
    if (quick && s[1] > 1000) continue;
    check_decode_silu(g, *dk, s[0], s[1], s[2], 950 + cases++);
  }
  // (m, heads, kv_heads, head_dim, k): one head per group (64), two (80), a quarter... of 128.
  const int qkv[][5] = {{1, 4, 2, 64, 512}, {3, 6, 2, 80, 264}, {16, 2, 1, 128, 256}, {2, 8, 8, 64, 1024}};
  for (const auto& s : qkv) {
    for (int v = 0; v < (quick ? 1 : 4); ++v, ++cases) check_decode_qkv(g, *dk, s[0], s[1], s[2], s[3], s[4], v & 2, v & 1, 970 + cases);
  }
  check_decode_qkv(g, *dk, 2, 4, 2, 64, 256, true, false, 970 + cases++, 1.1386f);  // YaRN: cos/sin scaled
  // Attention: GQA groups 2 / 7 / 1, block sizes 16 / 4 / 1, one to sixteen rows, 1 to 7 splits.
  const std::vector<int32_t> short_and_long = {0, 5, 130, 300};
  for (int splits : {1, 3, 7}) {
    check_decode_attention(g, *dk, 64, 14, 2, 16, short_and_long, splits, 990 + cases++);
    if (!quick) check_decode_attention(g, *dk, 128, 7, 1, 4, {33, 1, 260}, splits, 990 + cases++);
  }
  check_decode_attention(g, *dk, 80, 8, 8, 1, std::vector<int32_t>(16, 40), 2, 990 + cases++);
  // Verify spans: 5 rows (k = 4) from short and long contexts crossing block boundaries, one and
  // several splits; 9 rows over a tile of 8 (GQA 8 at d 64: two spans of one sequence).
  for (int splits : {1, 3}) {
    check_decode_attention(g, *dk, 64, 14, 2, 16, {0, 14, 125}, splits, 990 + cases++, 5);
    check_decode_attention(g, *dk, 128, 8, 2, 4, {37, 2}, splits, 990 + cases++, 5);
  }
  check_decode_attention(g, *dk, 64, 8, 1, 16, {20, 300}, 1, 990 + cases++, 9);
  check_decode_attention(g, *dk, 64, 8, 1, 16, {20, 300}, 4, 990 + cases++, 9);
  const bool far = g.name == "simt";
  if (far) {  // KV written and read through block ids past 2^32 pool elements
    check_decode_qkv(g, *dk, 3, 6, 2, 64, 256, true, true, 970 + cases++, 1.0f, true);
    check_decode_attention(g, *dk, 64, 14, 2, 16, short_and_long, 3, 990 + cases++, 1, true);
    check_decode_attention(g, *dk, 64, 14, 2, 16, {0, 14, 125}, 3, 990 + cases++, 5, true);
  }
  std::printf("gpu decode fused: %d cases (residual + RMSNorm, gate/up + SiLU, QKV + RoPE + KV write, attention + merge) checked on %s%s\n", cases,
              g.name.c_str(), far ? " (3 over a pool past 2^32 elements)" : "");
}

}  // namespace tandem_test::gpu
