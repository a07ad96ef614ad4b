// The MoE kernels (src/cuda/kernels/moe_*.cuh) against the CPU backend's MoE block
// (cpu/moe.h): routing (ids and weights), the grouping's invariants, and the whole layer
// (route and group -> gate/up -> down -> combine) on the same bf16-exact inputs, including an
// expert that gets every token, experts that get none, a zero router (every probability
// tied: torch.topk's order), a Qwen2-MoE shared expert, and more rows than one tile. The
// tie-order emulation the route kernel falls back to is checked against libstdc++ itself.
// The grouped GEMMs run on both paths: 8-row tiles (the few-rows GEMM's loop) and 64- and
// 128-row tiles (the dense GEMM's main loop: runs that are not tile multiples, columns and k not multiples of the tile,
// several k tiles around the cp.async ring, an expert with every token over several tiles).
// FP8 experts on both paths: bit for bit against the bf16 kernels on the same (exact) values.
// The combine inside the down launch (with the next RMSNorm): bit for bit against its own launch.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <utility>
#include <vector>

#include "../../src/core/model_config.h"
#include "../../src/core/thread_pool.h"
#include "../../src/cpu/moe.h"
#include "../../src/cuda/kernel_lang.h"
#include "../../src/cuda/kernels/moe_topk.cuh"
#include "../../src/cuda/fp8.h"
#include "../../src/cuda/moe_api.h"
#include "gpu_test_util.h"

namespace tandem_test::gpu {

/** The route kernel's fallback (moe_topk.cuh, host build) against std::nth_element / partial_sort. */
inline void check_topk_emulation() {
  namespace sim = tandem::gpu::simt_target;
  std::mt19937 rng(11);
  int differ = 0;
  const int trials = 4000;
  for (int trial = 0; trial < trials; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 300), k = 1 + static_cast<int>(rng() % std::min(n, 64));
    const int levels = 1 + static_cast<int>(rng() % 6);  // few distinct values: many ties
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = static_cast<float>(rng() % static_cast<unsigned>(levels));
    std::vector<sim::TopkItem> items(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) items[static_cast<size_t>(j)] = {v[static_cast<size_t>(j)], j};
    sim::torch_topk_order(items.data(), n, k);
    std::vector<int32_t> want(static_cast<size_t>(k));
    std::vector<float> vals(static_cast<size_t>(k));
    tandem::cpu::TopkScratch scratch;
    tandem::cpu::torch_topk(v.data(), n, k, want.data(), vals.data(), scratch);
    for (int j = 0; j < k; ++j) {
      if (items[static_cast<size_t>(j)].index != want[static_cast<size_t>(j)]) {
        ++differ;
        break;
      }
    }
  }
  CHECK(differ == 0, "moe topk emulation: %d of %d tie patterns ordered unlike libstdc++ (torch.topk)", differ, trials);
}

struct MoeCase {
  const char* label;
  int tokens, experts, top_k, hidden, inter, shared;
  bool renormalize;
  int router;  // 0 random, 1 zero (all tied), 2 expert 3 takes every token first, expert 5 none
  int mma_rows = 0;  // grouped GEMMs over tiles of these rows (0: 8-row tiles)
  int cols_per_cta = 16;  // 8-row tiles: below a pass (32 weight rows) the rest are masked; above it, several passes
};

inline void check_moe_layer(Gpu& g, const MoeCase& c, tandem::gpu::MoeKernelApi& moe) {
  using tandem::cpu::WeightMatrix;
  std::mt19937 rng(static_cast<unsigned>(c.tokens * 131 + c.experts * 7 + c.router));
  const int t = c.tokens, E = c.experts, k = c.top_k, H = c.hidden, I = c.inter, S = c.shared;
  std::vector<float> xn = random_bf16_floats(rng, static_cast<size_t>(t) * H);
  std::vector<float> router = random_bf16_floats(rng, static_cast<size_t>(E) * H, 0.5f);
  if (c.router == 1) std::fill(router.begin(), router.end(), 0.0f);
  if (c.router == 2) {
    for (int i = 0; i < t; ++i) xn[static_cast<size_t>(i) * H] = 1.0f;  // a constant feature every token has
    router[3 * static_cast<size_t>(H)] = 64.0f;
    router[5 * static_cast<size_t>(H)] = -64.0f;
  }
  std::vector<float> gate_up = random_bf16_floats(rng, static_cast<size_t>(E) * 2 * I * H, 0.2f);
  std::vector<float> down = random_bf16_floats(rng, static_cast<size_t>(E) * H * I, 0.2f);
  std::vector<float> sgu = random_bf16_floats(rng, static_cast<size_t>(2 * S) * H, 0.2f);
  std::vector<float> sdown = random_bf16_floats(rng, static_cast<size_t>(H) * S, 0.2f);
  std::vector<float> sgate = random_bf16_floats(rng, static_cast<size_t>(H), 0.3f);
  std::vector<float> residual = random_bf16_floats(rng, static_cast<size_t>(t) * H);

  // CPU: the backend's MoE block on the same values.
  tandem::ModelConfig mc;
  mc.hidden_size = H;
  mc.moe.num_experts = E;
  mc.moe.top_k = k;
  mc.moe.expert_intermediate = I;
  mc.moe.norm_topk_prob = c.renormalize;
  mc.moe.shared_intermediate = S;
  tandem::cpu::MoeLayerWeights w;
  w.router = WeightMatrix::from_f32(router, E, H);
  for (int e = 0; e < E; ++e) {
    const float* gu = gate_up.data() + static_cast<size_t>(e) * 2 * I * H;
    const float* dn = down.data() + static_cast<size_t>(e) * H * I;
    w.experts.push_back({WeightMatrix::from_f32(std::vector<float>(gu, gu + 2 * I * H), 2 * I, H),
                         WeightMatrix::from_f32(std::vector<float>(dn, dn + H * I), H, I)});
  }
  std::vector<float> shared_out(static_cast<size_t>(t) * H, 0.0f);
  if (S > 0) {
    w.shared = {WeightMatrix::from_f32(sgu, 2 * S, H), WeightMatrix::from_f32(sdown, H, S)};
    w.shared_gate = WeightMatrix::from_f32(sgate, 1, H);
    // The shared expert's output (the backend computes it with its dense kernels): the same MLP on the CPU.
    tandem::ThreadPool one(1);
    tandem::cpu::MoeLayerWeights only_shared;
    only_shared.router = WeightMatrix::from_f32(std::vector<float>(static_cast<size_t>(H), 0.0f), 1, H);
    only_shared.experts.push_back(w.shared);
    tandem::ModelConfig sc = mc;
    sc.moe.num_experts = 1;
    sc.moe.top_k = 1;
    sc.moe.norm_topk_prob = true;  // weight 1
    sc.moe.shared_intermediate = 0;
    tandem::cpu::MoeBlock b;
    b.run(one, sc, only_shared, xn.data(), t, shared_out.data());
  }
  tandem::ThreadPool pool(2);
  tandem::cpu::MoeBlock block;
  std::vector<float> want(static_cast<size_t>(t) * H);
  block.run(pool, mc, w, xn.data(), t, want.data());

  // Device.
  const int n = t * k;
  const int64_t slots = tandem::gpu::moe_max_slots(n, E);
  DeviceArray<bf16_bits> d_xn(*g.device, to_bf16(xn)), d_router(*g.device, to_bf16(router)), d_gu(*g.device, to_bf16(gate_up)),
      d_down(*g.device, to_bf16(down)), d_sgate(*g.device, to_bf16(sgate));
  DeviceArray<int32_t> ids(*g.device, static_cast<size_t>(n)), counts(*g.device, static_cast<size_t>(E)),
      po(*g.device, static_cast<size_t>(E) + 1), sorted(*g.device, static_cast<size_t>(slots)), position(*g.device, static_cast<size_t>(n)),
      active(*g.device, static_cast<size_t>(E) + 1), tile_offsets(*g.device, static_cast<size_t>(E) + 1),
      counter(*g.device, std::vector<int32_t>{0}),
      tile_counters(*g.device, std::vector<int32_t>(static_cast<size_t>(tandem::gpu::kMoeRouterTileCounters), 0));
  DeviceArray<float> logits(*g.device, static_cast<size_t>(t) * E);
  DeviceArray<float> weights(*g.device, static_cast<size_t>(n)), y(*g.device, static_cast<size_t>(slots) * H),
      d_shared(*g.device, shared_out), x(*g.device, residual);
  DeviceArray<bf16_bits> act(*g.device, static_cast<size_t>(slots) * I);
  sorted.poison(0x7f);
  y.poison();
  tandem::gpu::MoeRouteArgs ra;
  ra.xn = d_xn.get();
  ra.router = d_router.get();
  ra.num_tokens = t;
  ra.hidden = H;
  ra.num_experts = E;
  ra.top_k = k;
  ra.renormalize = c.renormalize;
  ra.ids = ids.get();
  ra.weights = weights.get();
  ra.logits = logits.get();
  ra.tile_counters = tile_counters.get();
  tandem::gpu::MoeGroupArgs ga;
  ga.ids = ids.get();
  ga.num_entries = n;
  ga.num_experts = E;
  ga.counts = counts.get();
  ga.padded_offsets = po.get();
  ga.sorted = sorted.get();
  ga.position = position.get();
  ga.active = active.get();
  ga.mma_rows = c.mma_rows;
  ga.mma_tile_offsets = tile_offsets.get();
  ga.counter = counter.get();
  moe.route(ra, ga, g.stream());
  tandem::gpu::MoeGemmArgs ma;
  ma.padded_offsets = po.get();
  ma.sorted = sorted.get();
  ma.num_experts = E;
  ma.top_k = k;
  ma.max_slots = static_cast<int>(slots);
  ma.hidden = H;
  ma.inter = I;
  ma.cols_per_cta = c.cols_per_cta;  // several column blocks per tile
  ma.mma_rows = c.mma_rows;
  ma.counts = counts.get();
  ma.mma_tile_offsets = tile_offsets.get();
  ma.max_mma_tiles = c.mma_rows > 0 ? static_cast<int>(tandem::gpu::moe_max_mma_tiles(n, E, c.mma_rows)) : 0;
  ma.a = d_xn.get();
  ma.w = d_gu.get();
  ma.act = act.get();
  moe.gate_up(ma, g.stream());
  ma.a = act.get();
  ma.w = d_down.get();
  ma.weights = weights.get();
  ma.y = y.get();
  moe.down(ma, g.stream());
  tandem::gpu::MoeCombineArgs ca;
  ca.ids = ids.get();
  ca.position = position.get();
  ca.y = y.get();
  ca.num_tokens = t;
  ca.top_k = k;
  ca.hidden = H;
  ca.xn = d_xn.get();
  ca.shared_gate = S > 0 ? d_sgate.get() : nullptr;
  ca.shared = d_shared.get();
  ca.x = x.get();
  moe.combine(ca, g.stream());

  // The combine inside the down launch (8-row tiles: a decode step's), with the next RMSNorm:
  // the bits of the down launch then the combine kernel, from the same residual, and the token
  // counters left at zero (several column blocks a tile: a token is done after k x blocks).
  if (c.mma_rows == 0) {
    std::vector<float> nw = random_bf16_floats(rng, static_cast<size_t>(H), 0.5f);
    for (float& v : nw) v += 1.0f;
    DeviceArray<float> d_nw(*g.device, nw), x_sep(*g.device, residual), x_fused(*g.device, residual),
        y_fused(*g.device, static_cast<size_t>(slots) * H);
    DeviceArray<bf16_bits> n_sep(*g.device, static_cast<size_t>(t) * H), n_fused(*g.device, static_cast<size_t>(t) * H);
    DeviceArray<int32_t> token_counters(*g.device, std::vector<int32_t>(static_cast<size_t>(t), 0));
    tandem::gpu::MoeCombineArgs cs = ca;
    cs.x = x_sep.get();
    cs.norm_weight = d_nw.get();
    cs.norm_eps = 1e-5f;
    cs.norm_out = n_sep.get();
    moe.combine(cs, g.stream());  // over the y of the down launch above
    tandem::gpu::MoeGemmArgs fd = ma;
    fd.y = y_fused.get();
    fd.token_counters = token_counters.get();
    fd.combine = cs;
    fd.combine.y = y_fused.get();
    fd.combine.x = x_fused.get();
    fd.combine.norm_out = n_fused.get();
    moe.down(fd, g.stream());
    const size_t x_diff = count_bit_diffs(x_sep.download(), x_fused.download()), n_diff = count_bit_diffs(n_sep.download(), n_fused.download());
    int left = 0;
    for (int32_t v : token_counters.download()) left += v != 0;
    CHECK(x_diff == 0 && n_diff == 0 && left == 0,
          "moe %s: combine in the down launch differs from the combine kernel (%zu residual, %zu normed values; %d counters left)", c.label,
          x_diff, n_diff, left);
  }

  // Routing: the CPU block's ids and weights.
  const auto got_ids = ids.download();
  const auto got_w = weights.download();
  int id_mismatch = 0;
  double w_err = 0;
  for (int i = 0; i < n; ++i) {
    id_mismatch += got_ids[static_cast<size_t>(i)] != block.ids()[static_cast<size_t>(i)];
    w_err = std::max(w_err, static_cast<double>(std::fabs(got_w[static_cast<size_t>(i)] - block.weights()[static_cast<size_t>(i)])));
  }
  CHECK(id_mismatch == 0, "moe %s: %d of %d routed experts differ from the CPU's", c.label, id_mismatch, n);
  CHECK(w_err < 1e-5, "moe %s: routing weights differ by %g", c.label, w_err);

  // Grouping: counts, padded offsets, every entry in one slot of its expert's run, padding -1, experts hit.
  const auto gc = counts.download(), gpo = po.download(), gs = sorted.download(), gp = position.download(), ga_ = active.download();
  int bad = 0;
  std::vector<int> want_count(static_cast<size_t>(E), 0);
  for (int i = 0; i < n; ++i) ++want_count[static_cast<size_t>(got_ids[static_cast<size_t>(i)])];
  int hit = 0, run = 0;
  for (int e = 0; e < E; ++e) {
    bad += gc[static_cast<size_t>(e)] != want_count[static_cast<size_t>(e)];
    bad += gpo[static_cast<size_t>(e)] != run;
    run += (want_count[static_cast<size_t>(e)] + tandem::gpu::kMoeTileRows - 1) / tandem::gpu::kMoeTileRows * tandem::gpu::kMoeTileRows;
    if (want_count[static_cast<size_t>(e)] > 0) bad += ga_[static_cast<size_t>(1 + hit++)] != e;
  }
  bad += gpo[static_cast<size_t>(E)] != run || ga_[0] != hit || run > slots;
  if (c.mma_rows > 0) {  // the tensor-core tiles: prefix sum of ceil(count / rows), within the grid's bound
    const auto gto = tile_offsets.download();
    int tiles = 0;
    for (int e = 0; e < E; ++e) {
      bad += gto[static_cast<size_t>(e)] != tiles;
      tiles += (want_count[static_cast<size_t>(e)] + c.mma_rows - 1) / c.mma_rows;
    }
    bad += gto[static_cast<size_t>(E)] != tiles || tiles > ma.max_mma_tiles;
  }
  std::vector<int> seen(static_cast<size_t>(n), 0);
  for (int e = 0; e < E; ++e) {
    for (int p = gpo[static_cast<size_t>(e)]; p < gpo[static_cast<size_t>(e) + 1]; ++p) {
      const int entry = gs[static_cast<size_t>(p)];
      const bool real = p < gpo[static_cast<size_t>(e)] + gc[static_cast<size_t>(e)];
      if (!real) {
        bad += entry != -1;
        continue;
      }
      if (entry < 0 || entry >= n) {
        ++bad;
        continue;
      }
      ++seen[static_cast<size_t>(entry)];
      bad += got_ids[static_cast<size_t>(entry)] != e || gp[static_cast<size_t>(entry)] != p;
    }
  }
  for (int s : seen) bad += s != 1;
  CHECK(bad == 0, "moe %s: grouping has %d inconsistencies", c.label, bad);
  // The route CTAs' counter is zero again (a graph replays the launch with it ready).
  int tiles_left = 0;
  for (int32_t v : tile_counters.download()) tiles_left += v != 0;
  CHECK(counter.download()[0] == 0 && tiles_left == 0, "moe %s: the route kernel left its counter at %d, %d tile counters set", c.label,
        counter.download()[0], tiles_left);

  // 64/128-row tiles: the same grouping's GEMMs over 8-row tiles too, and every real slot's weighted
  // down output compared: the paths differ only in f32 summation order (and, through it, an
  // occasional bf16 rounding of SiLU(gate) x up), so a misplaced tile, column or row shows.
  if (c.mma_rows > 0) {
    DeviceArray<bf16_bits> act_cc(*g.device, static_cast<size_t>(slots) * I);
    DeviceArray<float> y_cc(*g.device, static_cast<size_t>(slots) * H);
    y_cc.poison();
    tandem::gpu::MoeGemmArgs cc = ma;
    cc.mma_rows = 0;
    cc.a = d_xn.get();
    cc.w = d_gu.get();
    cc.act = act_cc.get();
    moe.gate_up(cc, g.stream());
    cc.a = act_cc.get();
    cc.w = d_down.get();
    cc.y = y_cc.get();
    moe.down(cc, g.stream());
    const auto got_y = y.download(), want_y = y_cc.download();
    double worst_y = 0;
    int compared = 0;
    for (int e = 0; e < E; ++e) {
      for (int p = gpo[static_cast<size_t>(e)]; p < gpo[static_cast<size_t>(e)] + gc[static_cast<size_t>(e)]; ++p) {
        for (int j = 0; j < H; ++j) {
          const size_t i = static_cast<size_t>(p) * H + static_cast<size_t>(j);
          const double d = std::fabs(static_cast<double>(got_y[i]) - want_y[i]) / std::max(1.0, std::fabs(static_cast<double>(want_y[i])));
          worst_y = std::isnan(d) ? INFINITY : std::max(worst_y, d);
          ++compared;
        }
      }
    }
    CHECK(compared == n * H && worst_y < kBf16Tolerance, "moe %s: 64/128-row vs 8-row tiles: %d values, max difference %g",
          c.label, compared, worst_y);
    // Rows past an expert's count are masked: its padding slots (and the slots past the last
    // run) keep y's poison. Unmasked rows would also overwrite the next expert's first rows,
    // which the harness's in-order blocks hide (that expert's tiles run later and rewrite them).
    int written = 0;
    for (int e = 0; e <= E; ++e) {
      const int from = e < E ? gpo[static_cast<size_t>(e)] + gc[static_cast<size_t>(e)] : gpo[static_cast<size_t>(E)];
      const int to = e < E ? gpo[static_cast<size_t>(e) + 1] : static_cast<int>(slots);
      for (int p = from; p < to; ++p) {
        for (int j = 0; j < H; ++j) written += !std::isnan(got_y[static_cast<size_t>(p) * H + static_cast<size_t>(j)]);
      }
    }
    CHECK(written == 0, "moe %s: tensor cores wrote %d values of padding slots", c.label, written);
  }

  // FP8 experts (8-row tiles, and 64/128-row ones where the case takes them: each e4m3 turned
  // into bf16(e4m3 x scale) on its way to the tensor cores): e4m3 weights times power-of-two scales, one per
  // row and 32-column group, are exact in bf16 and f32, so the FP8 grouped GEMMs must equal the
  // bf16 ones run on those very values bit for bit (act and y); a wrong row's or group's scale
  // would show.
  {
    constexpr int kGroup = 32;
    struct Q {
      std::vector<uint8_t> q;
      std::vector<float> scales, deq;
      int groups = 1;
    };
    auto quantize = [&](const std::vector<float>& wf, int64_t rows, int64_t cols) {
      Q r;
      r.groups = static_cast<int>((cols + kGroup - 1) / kGroup);
      r.q.resize(static_cast<size_t>(rows * cols));
      r.deq.resize(r.q.size());
      r.scales.resize(static_cast<size_t>(rows * r.groups));
      for (int64_t row = 0; row < rows; ++row) {
        for (int gi = 0; gi < r.groups; ++gi) {
          const float scale = std::ldexp(1.0f, -2 - static_cast<int>((row * 7 + gi * 3) % 5));
          r.scales[static_cast<size_t>(row * r.groups + gi)] = scale;
          for (int64_t col = gi * kGroup; col < std::min<int64_t>(cols, (gi + 1) * kGroup); ++col) {
            const size_t i = static_cast<size_t>(row * cols + col);
            r.q[i] = tandem::gpu::float_to_fp8_bits(wf[i] / scale);
            r.deq[i] = tandem::gpu::fp8_bits_to_float(r.q[i]) * scale;
          }
        }
      }
      return r;
    };
    const Q qgu = quantize(gate_up, static_cast<int64_t>(E) * 2 * I, H), qdn = quantize(down, static_cast<int64_t>(E) * H, I);
    DeviceArray<uint8_t> q8_gu(*g.device, qgu.q), q8_dn(*g.device, qdn.q);
    DeviceArray<float> sc_gu(*g.device, qgu.scales), sc_dn(*g.device, qdn.scales);
    DeviceArray<bf16_bits> deq_gu(*g.device, to_bf16(qgu.deq)), deq_dn(*g.device, to_bf16(qdn.deq));
    DeviceArray<bf16_bits> act_b(*g.device, static_cast<size_t>(slots) * I), act_8(*g.device, static_cast<size_t>(slots) * I);
    DeviceArray<float> y_b(*g.device, static_cast<size_t>(slots) * H), y_8(*g.device, static_cast<size_t>(slots) * H);
    for (auto* a : {&act_b, &act_8}) a->poison();
    for (auto* yy : {&y_b, &y_8}) yy->poison();
    tandem::gpu::MoeGemmArgs f = ma;
    f.a = d_xn.get();
    f.w = deq_gu.get();
    f.act = act_b.get();
    moe.gate_up(f, g.stream());
    f.a = act_b.get();
    f.w = deq_dn.get();
    f.y = y_b.get();
    moe.down(f, g.stream());
    f.w = nullptr;
    f.w8_group_k = kGroup;
    f.a = d_xn.get();
    f.w8 = q8_gu.get();
    f.w8_scales = sc_gu.get();
    f.w8_groups = qgu.groups;
    f.act = act_8.get();
    moe.gate_up(f, g.stream());
    f.a = act_8.get();
    f.w8 = q8_dn.get();
    f.w8_scales = sc_dn.get();
    f.w8_groups = qdn.groups;
    f.y = y_8.get();
    moe.down(f, g.stream());
    const size_t act_diff = count_bit_diffs(act_b.download(), act_8.download());
    const size_t y_diff = count_bit_diffs(y_b.download(), y_8.download());
    CHECK(act_diff == 0 && y_diff == 0, "moe %s: FP8 experts differ from bf16 experts of the same values (%zu act, %zu y values)", c.label,
          act_diff, y_diff);
  }

  // The layer: x = residual + MoE(xn). The device rounds SiLU(gate) x up to bf16 (the CPU keeps f32).
  const auto got_x = x.download();
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = (got_x[i] - residual[i]) - want[i];
    diff2 += d * d;
    ref2 += static_cast<double>(want[i]) * want[i];
  }
  const double rel = std::sqrt(diff2 / std::max(ref2, 1e-30));
  // An element's error scales with the terms it sums, which the output's RMS stands for (an
  // element that cancels to near 0 keeps its terms' error), so the scale is max(1, |want|, RMS).
  const double rms = std::sqrt(ref2 / static_cast<double>(want.size()));
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = (got_x[i] - residual[i]) - want[i];
    worst = std::max(worst, std::fabs(d) / std::max({1.0, std::fabs(static_cast<double>(want[i])), rms}));
  }
  // act is rounded to bf16 once per expert row and a token sums up to k + 1 of them: 4 roundings' worth per element.
  CHECK(rel < 1e-2 && worst < 4 * kBf16Tolerance, "moe %s: layer output relative L2 %g, max %g (RMS %g)", c.label, rel, worst, rms);
  int expert3 = 0, expert5 = 0;
  for (int e : got_ids) {
    expert3 += e == 3;
    expert5 += e == 5;
  }
  if (c.router == 2) CHECK(expert3 == t && expert5 == 0, "moe %s: expert 3 got %d of %d tokens, expert 5 got %d", c.label, expert3, t, expert5);
}

inline void test_moe(Gpu& g) {
  check_topk_emulation();
  std::unique_ptr<tandem::gpu::MoeKernelApi> moe =
      g.name == "cuda" ? tandem::gpu::make_cuda_moe_kernels() : tandem::gpu::make_simt_moe_kernels();
  // As the backend launches them (programmatic dependents on sm_90+): on a GPU a kernel that
  // read its predecessor's output before waiting for it would fail the checks below.
  moe->set_overlap(true);
  const MoeCase cases[] = {
      {"random 37 tokens, 16 experts, top-4", 37, 16, 4, 64, 32, 0, true, 0},
      {"decode 3 tokens, top-2 of 8", 3, 8, 2, 64, 48, 0, true, 0},
      {"prefill 70 tokens (each token's CTA computes its logits)", 70, 16, 2, 64, 32, 0, true, 0},
      {"one expert takes all, one none", 21, 8, 2, 64, 32, 0, true, 2},
      {"zero router (ties)", 5, 8, 2, 64, 32, 0, true, 1},
      // More experts than the route kernel's 256 threads: its CTAs take one thread per expert,
      // for the last one's grouping.
      {"300 experts, top-8 (route CTAs of 320 threads)", 6, 300, 8, 64, 32, 0, true, 0},
      {"qwen2-moe shared expert, not renormalized", 9, 8, 4, 64, 32, 48, false, 0},
      // 8-row tiles: 64 columns a CTA (two passes of down, four of gate/up, the last CTA's
      // partial), hidden 320 two 256-wide k steps (the second past k), inter 136 one.
      {"8-row tiles, several passes a CTA", 11, 8, 2, 320, 136, 0, true, 0, 0, 64},
      // Tensor cores. Expert 3's 150 rows are tiles of 64, 64 and 22; hidden 320 is five k tiles
      // around the 4-stage ring; inter 48 is a partial column tile (gate/up) and a partial k tile (down).
      {"tensor cores 64-row tiles, one expert takes all", 150, 8, 2, 320, 48, 0, true, 2, 64},
      // Most of 64 experts get no rows, the rest 1..5 (each a mostly padded tile); shared expert.
      {"tensor cores 64-row tiles, sparse experts", 40, 64, 2, 64, 32, 48, false, 0, 64},
      // 128-row tiles (4 warps, 3 stages): expert 3's 200 rows are tiles of 128 and 72; inter 136
      // is three column blocks of gate/up (the last 8 wide) and three k tiles of down.
      {"tensor cores 128-row tiles, one expert takes all", 200, 16, 4, 192, 136, 0, true, 2, 128},
      {"tensor cores 64-row tiles, random", 96, 4, 2, 128, 72, 0, true, 0, 64},
  };
  for (const MoeCase& c : cases) check_moe_layer(g, c, *moe);
  std::printf("gpu moe: topk tie emulation vs libstdc++, %zu layers (routing, grouping, grouped GEMMs over 8-row and 64/128-row tiles, FP8 experts on both, combine on its own and in the down launch) checked on %s\n",
              sizeof(cases) / sizeof(cases[0]), g.name.c_str());
}

}  // namespace tandem_test::gpu
