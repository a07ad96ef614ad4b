// Paged attention of the GPU backend against the CPU backend's cpu::PagedAttention, on a bf16
// pool whose values the CPU reads exactly (as f32). One ragged batch per layout mixes what the
// kernels special-case:
//  - prefill from position 0 longer than one tile, a prefix hit (start_pos > 0) ending
//    mid-block, a one-token prefill of a fresh sequence (start 0: decode path, kv length 1),
//    decodes at short and long context (several key chunks, several splits);
//  - block tables shuffled over a pool with unused blocks between them (holes);
//  - head_dim 8..256, GQA groups 1, 2, 4, 7, 8, block sizes 1, 4, 16;
//  - decode split counts 1, 2, 3 and 7 all agree (splits must not change the result);
//  - verify steps (a sequence scored at each of its new tokens, spec::expand_verify) beside
//    prefills and decodes, with their rows planned as decode spans and as one block per row.
// Output rows of heads and tokens outside the batch keep their NaN poison.
// head_dim 64 / 128 prefills run on tensor cores (kernels/attention_mma.cuh); test_attention_prefill
// adds long prefills for them (many key tiles and blocks, prefix hits, single-token CTAs).
#pragma once

#include <algorithm>
#include <chrono>
#include <numeric>

#include "../../src/core/kv_layout.h"
#include "../../src/core/thread_pool.h"
#include "../../src/cpu/kernels.h"
#include "../../src/cuda/step_plan.h"
#include "../../src/spec/verify.h"
#include "gpu_test_util.h"

namespace tandem_test::gpu {

/**
 * Prefill rows of head_dim 64 and 128 run on tensor cores (attention_mma.cuh): q and the
 * softmax weights p are rounded to bf16 for mma.sync, so three bf16 roundings (q, p, the output)
 * instead of the output's alone. Measured worst: 0.0093 (head_dim 128, 2 keys).
 */
inline constexpr double kMmaAttentionTolerance = 1.5 * kBf16Tolerance;

struct GpuAttnCase {
  int head_dim, heads, kv_heads, block_size;
  int q_pad = 16, out_pad = 8;  // row strides are heads * head_dim + pad (odd pads: unaligned rows)
};

struct GpuAttnSeq {
  int32_t start_pos, num_tokens;
  bool verify = false;  // logits at every new token: the GPU runs it as decode rows
};

/**
 * Runs `specs` as one batch for each split count and compares every output row with the CPU's.
 * fp8: the pool holds e4m3 codes with per-layer K / V scales (--kv-cache-dtype fp8), which both
 * kernels widen as they gather; the prefill then runs on CUDA cores.
 * far: the GPU reads the pool through block ids past 2^32 elements (far_pool_blocks; SIMT only).
 */
inline void check_attention_batch(Gpu& g, const GpuAttnCase& c, const std::vector<GpuAttnSeq>& specs,
                                  const std::vector<int>& split_counts, uint32_t seed, bool fp8 = false, bool far = false) {
  std::mt19937 rng(seed);
  tandem::KvLayout L;
  L.block_size = c.block_size;
  L.num_layers = 2;
  L.num_kv_heads = c.kv_heads;
  L.head_dim = c.head_dim;
  L.elem_bytes = 2;
  int64_t blocks_needed = 0;
  for (const auto& s : specs) blocks_needed += (s.start_pos + s.num_tokens + c.block_size - 1) / c.block_size;
  L.num_blocks = blocks_needed * 2 + 3;  // unused blocks between the tables: holes
  std::vector<int32_t> ids(static_cast<size_t>(L.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);

  tandem::ForwardBatch batch;
  std::vector<std::vector<int32_t>> tables;
  int32_t tokens = 0;
  size_t next_id = 0;
  for (const auto& s : specs) {
    const int32_t n = (s.start_pos + s.num_tokens + c.block_size - 1) / c.block_size;
    std::vector<int32_t> t;
    for (int32_t b = 0; b < n; ++b) {
      t.push_back(ids[next_id]);
      next_id += 2;  // skip one: a hole
    }
    tables.push_back(t);
    tokens += s.num_tokens;
  }
  std::vector<int32_t> token_ids(static_cast<size_t>(tokens), 1);
  batch.tokens = token_ids.data();
  batch.num_tokens = tokens;
  int32_t off = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    tandem::ForwardSeq f;
    f.token_offset = off;
    f.num_tokens = specs[i].num_tokens;
    f.start_pos = specs[i].start_pos;
    f.block_table = tables[i].data();
    f.num_blocks = static_cast<int32_t>(tables[i].size());
    f.want_logits = true;
    f.num_logits = specs[i].verify ? specs[i].num_tokens : 1;
    batch.seqs.push_back(f);
    off += specs[i].num_tokens;
  }
  // The CPU attends over the batch as it is; the GPU backend expands verify steps first.
  tandem::ForwardBatch expanded;
  const tandem::ForwardBatch& gpu_batch = tandem::spec::expand_verify(batch, expanded);
  const bool any_verify = &gpu_batch != &batch;

  const int layer = 1;
  const int64_t d = c.head_dim;
  const int64_t q_stride = c.heads * d + c.q_pad, out_stride = c.heads * d + c.out_pad;
  auto pool = random_bf16_floats(rng, static_cast<size_t>(L.num_blocks * L.block_stride()));
  std::vector<uint8_t> pool8(fp8 ? pool.size() : 0);
  for (auto& b : pool8) b = static_cast<uint8_t>((rng() % 0x7f) | (rng() & 0x80));  // any code but NaN
  const std::vector<float> kv_scales = {0.5f, 0.25f, 0.03f, 0.007f};  // [layer][k, v]
  auto q = random_floats(rng, static_cast<size_t>(tokens * q_stride));
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));

  // CPU reference: the CPU backend's kernel on the same values in an f32 pool.
  tandem::KvLayout Lf = L;
  Lf.elem_bytes = 4;
  std::vector<float> want(static_cast<size_t>(tokens * out_stride), NAN);
  tandem::ThreadPool pool_threads(2);
  tandem::cpu::AttentionLayer a;
  a.q = q.data();
  a.q_stride = q_stride;
  a.out = want.data();
  a.out_stride = out_stride;
  a.kv_pool = pool.data();
  if (fp8) {
    a.kv_pool_raw = pool8.data();
    a.kv_elem_bytes = 1;
    a.k_scale = kv_scales[2 * layer];
    a.v_scale = kv_scales[2 * layer + 1];
  }
  a.layer = layer;
  a.num_heads = c.heads;
  a.scale = scale;
  tandem::cpu::PagedAttention cpu_attention;
  cpu_attention.run(pool_threads, batch, Lf, a);

  // The CPU has its answer; from here the tables name far blocks (the batches point at them).
  const int64_t far_blocks = far ? far_pool_blocks(L.block_stride()) : 0;
  for (auto& t : tables) {
    for (int32_t& b : t) b += static_cast<int32_t>(far_blocks);
  }

  std::vector<char> mma_prefill_row(static_cast<size_t>(tokens), 0);
  for (const auto& f : gpu_batch.seqs) {
    const bool mma = !fp8 && f.num_tokens > 1 && (c.head_dim == 64 || c.head_dim == 128);
    for (int32_t k = 0; k < f.num_tokens; ++k) mma_prefill_row[static_cast<size_t>(f.token_offset + k)] = mma;
  }

  DeviceArray<bf16_bits> d_pool(*g.device, to_bf16(pool));
  DeviceArray<uint8_t> d_pool8(*g.device, fp8 ? pool8 : std::vector<uint8_t>(1));
  DeviceArray<float> d_kv_scales(*g.device, kv_scales);
  DeviceArray<float> d_q(*g.device, q);
  DeviceArray<bf16_bits> d_out(*g.device, static_cast<size_t>(tokens * out_stride));
  const int group = c.heads / c.kv_heads;
  for (int run = 0; run < static_cast<int>(split_counts.size()) * (any_verify ? 2 : 1); ++run) {
    const int splits = split_counts[static_cast<size_t>(run) % split_counts.size()];
    const bool spans = run >= static_cast<int>(split_counts.size());
    tandem::gpu::PlanOptions o;
    o.block_size = c.block_size;
    o.tile_tokens = tandem::gpu::attention_tile_tokens(group, c.head_dim);
    o.num_kv_heads = c.kv_heads;
    o.force_splits = splits;
    o.span_tokens = spans ? o.tile_tokens : 1;
    tandem::gpu::StepPlan plan;
    tandem::gpu::plan_step(gpu_batch, o, plan);
    if (spans) {
      CHECK(plan.num_spans < plan.num_decode && plan.max_span > 1, "attention d=%d: verify rows not planned as spans (%d spans, %d rows)",
            c.head_dim, plan.num_spans, plan.num_decode);
    }
    DeviceArray<int32_t> d_img(*g.device, plan.image);
    DeviceArray<float> d_partial(*g.device, static_cast<size_t>(std::max(1, plan.num_decode) * splits * c.heads *
                                                                 tandem::gpu::attention_partial_floats(c.head_dim)));
    d_out.poison();
    tandem::gpu::AttentionArgs args;
    args.q = d_q.get();
    args.q_stride = q_stride;
    args.out = d_out.get();
    args.out_stride = out_stride;
    const int64_t far_elements = far_blocks * L.block_stride();
    args.pool = fp8 ? reinterpret_cast<bf16_bits*>(far_pool_base(d_pool8.get(), far_elements)) : far_pool_base(d_pool.get(), far_elements);
    args.kv_fp8 = fp8;
    args.kv_scales = d_kv_scales.get();
    args.layer = layer;
    args.geo = {L.block_stride(), L.layer_stride(), L.kv_stride(), L.token_stride(), static_cast<int32_t>(L.block_size),
                c.kv_heads, c.head_dim};
    args.num_heads = c.heads;
    args.scale = scale;
    const int32_t* img = d_img.get();
    args.seqs = reinterpret_cast<const tandem::gpu::SeqDesc*>(img + plan.layout.seqs);
    args.block_tables = img + plan.layout.block_tables;
    args.prefill_items = reinterpret_cast<const tandem::gpu::PrefillItem*>(img + plan.layout.prefill_items);
    args.num_prefill_items = plan.num_prefill_items;
    args.decode_seqs = img + plan.layout.decode_seqs;
    args.num_decode = plan.num_decode;
    args.num_splits = plan.num_splits;
    args.partial = d_partial.get();
    args.decode_spans = img + plan.layout.decode_spans;
    args.max_span = plan.max_span;
    g.kernels->attention(args, g.stream());
    auto got = from_bf16(d_out.download());
    // Worst error relative to each row's tolerance (prefill rows of head_dim 64 / 128: the tensor-core path).
    double worst = 0, worst_tol = kBf16Tolerance;
    int poison_lost = 0, worst_token = 0, worst_head = 0;
    for (int32_t t = 0; t < tokens; ++t) {
      const double tol = mma_prefill_row[static_cast<size_t>(t)] ? kMmaAttentionTolerance : kBf16Tolerance;
      for (int h = 0; h < c.heads; ++h) {
        const size_t at = static_cast<size_t>(t * out_stride + h * d);
        const double e = max_rel_error(got.data() + at, want.data() + at, static_cast<size_t>(d));
        if (e / tol > worst / worst_tol) worst = e, worst_tol = tol, worst_token = t, worst_head = h;
      }
      for (int64_t e = c.heads * d; e < out_stride; ++e) poison_lost += !std::isnan(got[static_cast<size_t>(t * out_stride + e)]);
    }
    CHECK(worst <= worst_tol, "attention%s%s d=%d heads=%d/%d block=%d splits=%d%s: max relative error %g > %g (token row %d, head %d)",
          fp8 ? " (e4m3 pool)" : "", far ? " (far pool)" : "", c.head_dim, c.heads, c.kv_heads, c.block_size, splits, spans ? " (spans)" : "", worst, worst_tol,
          worst_token, worst_head);
    CHECK(poison_lost == 0, "attention d=%d: %d elements written between heads' rows", c.head_dim, poison_lost);
  }
}

/**
 * Long prefills on the tensor-core path (head_dim 64 and 128): keys over many key tiles and
 * pool blocks, a sequence from position 0 (200 tokens), a chunk of 100 after a 37-token prefix
 * (starts mid-block), a sequence of two plan tiles plus one token (its last CTA has a single
 * query token), a 2-token prefill, decodes in the same batch; GQA groups 1, 2, 4, 7, 8; block
 * sizes 1, 16, 32; one case with unaligned q and out rows (scalar loads and stores).
 */
inline void test_attention_prefill(Gpu& g) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<GpuAttnCase> cases = {
      {64, 2, 2, 16}, {64, 14, 2, 32}, {64, 8, 1, 1, 3, 1}, {128, 4, 2, 16}, {128, 8, 2, 32}, {128, 7, 1, 1},
  };
  uint32_t seed = 1900;
  int sequences = 0;
  for (const auto& c : cases) {
    const int tile = tandem::gpu::attention_tile_tokens(c.heads / c.kv_heads, c.head_dim);
    const std::vector<GpuAttnSeq> specs = {{0, 200}, {37, 100}, {5, 1}, {40, 2 * tile + 1}, {0, 2}, {250, 1}};
    check_attention_batch(g, c, specs, {1}, seed++);
    sequences += static_cast<int>(specs.size());
  }
  // The tensor-core prefill over a pool past 2^32 elements (64-bit KV offsets).
  if (g.name == "simt") check_attention_batch(g, cases[3], {{0, 70}, {37, 20}, {250, 1}}, {1}, seed++, false, true);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("gpu attention prefill: %zu layouts, %d sequences (up to 200 new tokens, prefix hits, GQA 1-8) checked on %s in %.1f s\n",
              cases.size(), sequences, g.name.c_str(), secs);
}

// The split heuristic: blocks to fill the SMs twice, at least one 32-key chunk each, capped.
inline void test_decode_splits() {
  using tandem::gpu::choose_decode_splits;
  // Batch 1, 2 KV heads (Qwen2-0.5B), a 144-key table on 132 SMs: one split per chunk, 5.
  CHECK(choose_decode_splits(1, 2, 144, 132, 16) == 5, "short batch-1 context: %d splits", choose_decode_splits(1, 2, 144, 132, 16));
  CHECK(choose_decode_splits(1, 2, 4096, 132, 16) == 16, "long context: capped at max_splits");
  CHECK(choose_decode_splits(2, 2, 4096, 132, 16) == 16, "the worked example: 16 splits");
  CHECK(choose_decode_splits(256, 8, 4096, 132, 16) == 1, "a full batch fills the device alone");
  CHECK(choose_decode_splits(1, 2, 20, 132, 16) == 1, "one chunk: one split");
  CHECK(choose_decode_splits(0, 2, 20, 132, 16) == 1, "no decode rows");
}

inline void test_attention(Gpu& g) {
  test_decode_splits();
  const std::vector<GpuAttnCase> cases = {
      {8, 4, 2, 4}, {16, 7, 1, 1}, {64, 14, 2, 16}, {128, 4, 1, 16}, {80, 8, 8, 4}, {256, 8, 2, 16}, {128, 32, 4, 16}, {40, 2, 2, 4},
  };
  uint32_t seed = 900;
  // Verify steps of 5 and 3 rows (one crossing a block), between a prefill and a decode.
  const std::vector<GpuAttnSeq> specs = {{0, 23}, {300, 1}, {37, 13}, {0, 1}, {5, 1}, {64, 2}, {61, 5, true}, {130, 1}, {0, 3, true}};
  for (const auto& c : cases) check_attention_batch(g, c, specs, {1, 2, 3, 7}, seed++);
  // Decode splits, verify spans and the CUDA-core prefill over a pool past 2^32 elements.
  const bool far = g.name == "simt";
  if (far) check_attention_batch(g, cases[2], specs, {1, 3}, seed++, false, true);
  std::printf("gpu attention: %zu layouts x 9 sequences (2 verify steps, as spans and per row) x 4 split counts checked on %s%s\n",
              cases.size(), g.name.c_str(), far ? " (one layout again over block ids past 2^32 pool elements)" : "");
  test_attention_prefill(g);
}

}  // namespace tandem_test::gpu
