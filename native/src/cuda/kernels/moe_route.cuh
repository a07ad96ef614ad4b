// MoE routing and grouping (moe_api.h), one launch a step. A token is routed by one warp
// (moe_route_warp): softmax of its router logits in f32, top-k by repeated warp arg max (ties to
// the lower index). That order is torch.topk's unless two of the best k + 1 values are equal;
// then one lane reruns the selection with the algorithms torch's CPU kernel calls
// (moe_topk.cuh), so ties go where transformers sends them. The logits come from
//   - few tokens (decode): CTAs of 8 experts x 8 tokens, the router's bytes read by many SMs;
//     the last CTA of a token tile to finish routes its tokens (moe_router_kernel);
//   - many tokens: a CTA per token, its warps over the experts (moe_route_kernel).
// The grouping is done by the last CTA to finish (last_block.cuh: CTAs count themselves in on
// MoeGroupArgs::counter once their tokens' ids are written, so a step spends no launch on it; a
// CTA has a thread per expert): per-expert counts (shared-memory integer atomics), a block scan
// of the counts rounded up to kMoeTileRows (the padded offsets), the list of experts hit, then
// every entry's slot from a per-expert cursor. Slots within an expert's run are in no particular
// order on a GPU (the atomics decide); nothing downstream depends on it: a row's GEMM result is
// its own, and combine gathers each token's entries in a fixed order.
#pragma once

#include <algorithm>

#include "../moe_api.h"
#include "bf16_vec.cuh"
#include "block_scan.cuh"
#include "last_block.cuh"
#include "launch.h"
#include "moe_topk.cuh"
#include "reduce.cuh"

namespace tandem::gpu::TD_NS {

inline constexpr unsigned kMoeRouteThreads = 256;

// Router logits for few tokens: CTA (expert block of 8, token tile of kMoeLogitTokens): each warp
// streams one expert's router row with 16-byte loads into the tile's tokens (xn rows read
// through L1/L2).
/** Largest expert count of the few-tokens router kernel (its CTA of 256 threads groups them). */
inline constexpr int kMoeRouterWarpExperts = static_cast<int>(kMoeRouteThreads);

/** This warp's expert's logits for the CTA's token tile, into a.logits (lane 0); none past num_experts. */
TD_DEVICE void moe_router_logits_tile(const MoeRouteArgs& a) {
  const int warp = static_cast<int>(threadIdx.x / 32);
  const unsigned lane = td::lane_id();
  const int e = static_cast<int>(blockIdx.x) * static_cast<int>(kMoeRouteThreads / 32) + warp;
  const int t0 = static_cast<int>(blockIdx.y) * kMoeLogitTokens;
  const int h = a.hidden, nt = td::imin(kMoeLogitTokens, a.num_tokens - t0);
  const td::bf16_bits* w = a.router + static_cast<int64_t>(td::imin(e, a.num_experts - 1)) * h;
  // The router's rows do not depend on the kernel before (a programmatic dependent launch may
  // start while it runs): to L2 first, then wait for the normed rows it writes.
  if (e < a.num_experts) {
    for (int i = static_cast<int>(lane) * 64; i < h; i += 32 * 64) td::prefetch_l2(w + i);
  }
  td::grid_dependency_wait();
  td::grid_dependents_launch();
  if (e >= a.num_experts) return;  // this warp only
  float acc[kMoeLogitTokens];
  for (int j = 0; j < kMoeLogitTokens; ++j) acc[j] = 0.0f;
  for (int i = static_cast<int>(lane) * 8; i < h; i += 256) {
    float wv[8], xv[8];
    unpack8(*reinterpret_cast<const td::vec16*>(w + i), wv);
    for (int j = 0; j < kMoeLogitTokens; ++j) {
      if (j < nt) {
        unpack8(*reinterpret_cast<const td::vec16*>(a.xn + static_cast<int64_t>(t0 + j) * h + i), xv);
        for (int q = 0; q < 8; ++q) acc[j] += wv[q] * xv[q];
      }
    }
  }
  for (int j = 0; j < kMoeLogitTokens; ++j) {
    const float v = warp_sum(acc[j]);
    if (lane == 0 && j < nt) a.logits[static_cast<int64_t>(t0 + j) * a.num_experts + e] = v;
  }
}

/**
 * Token t's softmax, top-k and renormalization by one warp: probs (num_experts floats, shared)
 * holds its logits and gets its probabilities (softmax in f32: warp max, exp, warp sum); the
 * best k + 1 by repeated warp arg max (ties to the lower index), a chosen expert masked to -inf
 * in items (scratch, num_experts); picked (k + 1) too. That order is torch.topk's unless two of
 * the best k + 1 values are equal; then lane 0 reruns the selection with the algorithms torch's
 * CPU kernel calls (moe_topk.cuh), so ties go where transformers sends them. Writes ids, weights.
 */
TD_DEVICE void moe_route_warp(const MoeRouteArgs& a, int t, float* probs, TopkItem* items, ArgMax* picked) {
  const int lane = static_cast<int>(td::lane_id()), E = a.num_experts, k = a.top_k;
  float m = -INFINITY;
  for (int e = lane; e < E; e += 32) m = fmaxf(m, probs[e]);
  m = warp_max(m);
  float s = 0.0f;
  for (int e = lane; e < E; e += 32) s += expf(probs[e] - m);
  s = warp_sum(s);
  for (int e = lane; e < E; e += 32) {
    probs[e] = expf(probs[e] - m) / s;
    items[e] = TopkItem{probs[e], e};
  }
  td::sync_warp();
  const int rounds = k < E ? k + 1 : k;
  for (int r = 0; r < rounds; ++r) {
    ArgMax mine{-INFINITY, 0x7fffffff};
    for (int e = lane; e < E; e += 32) mine = better(mine, ArgMax{items[e].value, e});
    const ArgMax best = warp_argmax(mine);
    if (lane == best.index % 32) items[best.index].value = -INFINITY;  // its owner (the lane that reads it)
    if (lane == 0) picked[r] = best;
  }
  td::sync_warp();
  if (lane == 0) {
    int has_tie = 0;
    for (int r = 0; r + 1 < rounds; ++r) has_tie |= picked[r].value == picked[r + 1].value;
    if (has_tie) {  // torch's own order over every expert
      for (int e = 0; e < E; ++e) items[e] = TopkItem{probs[e], e};
      torch_topk_order(items, E, k);
      for (int r = 0; r < k; ++r) picked[r] = ArgMax{items[r].value, items[r].index};
    }
    float total = 0.0f;
    for (int r = 0; r < k; ++r) total += picked[r].value;
    for (int r = 0; r < k; ++r) {
      a.ids[static_cast<int64_t>(t) * k + r] = picked[r].index;
      a.weights[static_cast<int64_t>(t) * k + r] = a.renormalize ? picked[r].value / total : picked[r].value;
    }
  }
  td::sync_warp();
}

/**
 * The grouping of a step's entries (MoeGroupArgs) by one CTA with a thread per expert at least
 * (blockDim >= num_experts). counts: kMoeMaxExperts ints of shared memory, scratch 32. The ids
 * may have been written by other CTAs of this launch: they are read past L1.
 */
TD_DEVICE void moe_group_block(const MoeGroupArgs& a, int* counts, int* scratch) {
  const int tid = static_cast<int>(threadIdx.x), E = a.num_experts, n = a.num_entries;
  for (int e = tid; e < E; e += static_cast<int>(blockDim.x)) counts[e] = 0;
  td::sync_threads();
  for (int i = tid; i < n; i += static_cast<int>(blockDim.x)) td::atomic_add(&counts[load_volatile(a.ids + i)], 1);
  td::sync_threads();
  const int c = tid < E ? counts[tid] : 0;
  const int padded = (c + kMoeTileRows - 1) / kMoeTileRows * kMoeTileRows;
  int total = 0, hit_total = 0;
  const int offset = block_exclusive_scan(padded, scratch, total);
  const int hit_offset = block_exclusive_scan(c > 0 ? 1 : 0, scratch, hit_total);
  if (tid < E) {
    a.counts[tid] = c;
    a.padded_offsets[tid] = offset;
    if (c > 0) a.active[1 + hit_offset] = tid;
  }
  if (tid == 0) {
    a.padded_offsets[E] = total;
    a.active[0] = hit_total;
    if (a.hits_out != nullptr) *a.hits_out = hit_total;
  }
  if (a.mma_rows > 0) {  // the 64/128-row GEMM's tiles: ceil(count / rows) per expert, in expert order
    int tiles_total = 0;
    const int tile_offset = block_exclusive_scan((c + a.mma_rows - 1) / a.mma_rows, scratch, tiles_total);
    if (tid < E) a.mma_tile_offsets[tid] = tile_offset;
    if (tid == 0) a.mma_tile_offsets[E] = tiles_total;
  }
  td::sync_threads();  // every thread has read counts[]: reuse it as the fill cursor
  if (tid < E) counts[tid] = offset;
  for (int p = tid; p < total; p += static_cast<int>(blockDim.x)) a.sorted[p] = -1;
  td::sync_threads();
  for (int i = tid; i < n; i += static_cast<int>(blockDim.x)) {
    const int p = td::atomic_add(&counts[load_volatile(a.ids + i)], 1);
    a.sorted[p] = i;
    a.position[i] = p;
  }
}

// Many tokens: one CTA per token stages its normed row, each warp computes router logits for
// experts w, w + warps, ... (16-byte weight loads, a warp reduction each), then warp 0 routes it
// (moe_route_warp), and the last CTA to finish groups the step's entries (moe_group_block).
TD_GLOBAL void TD_LAUNCH_BOUNDS(kMoeMaxExperts) moe_route_kernel(MoeRouteArgs a, MoeGroupArgs g) {
  TD_DYNAMIC_SHARED(td::bf16_bits, xs);  // [hidden]
  TD_SHARED(float, probs, kMoeMaxExperts);
  TD_SHARED(TopkItem, items, kMoeMaxExperts);
  TD_SHARED(ArgMax, picked, kMaxMoeTopKPlus1);
  TD_SHARED(int, counts, kMoeMaxExperts);
  TD_SHARED(int, iscratch, 32);
  TD_SHARED(int, flag, 1);
  const int t = static_cast<int>(blockIdx.x), tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, warps = static_cast<int>(blockDim.x / 32);
  const unsigned lane = td::lane_id();
  const int h = a.hidden, E = a.num_experts;
  td::grid_dependency_wait();  // before reading xn
  td::grid_dependents_launch();
  const td::bf16_bits* x = a.xn + static_cast<int64_t>(t) * h;
  for (int i = tid * 8; i < h; i += static_cast<int>(blockDim.x) * 8) {
    *reinterpret_cast<td::vec16*>(xs + i) = *reinterpret_cast<const td::vec16*>(x + i);
  }
  td::sync_threads();
  for (int e = warp; e < E; e += warps) {
    const td::bf16_bits* w = a.router + static_cast<int64_t>(e) * h;
    float acc = 0.0f;
    for (int i = static_cast<int>(lane) * 8; i < h; i += 256) {
      float wv[8], xv[8];
      unpack8(*reinterpret_cast<const td::vec16*>(w + i), wv);
      unpack8(*reinterpret_cast<const td::vec16*>(xs + i), xv);
      for (int j = 0; j < 8; ++j) acc += wv[j] * xv[j];
    }
    acc = warp_sum(acc);
    if (lane == 0) probs[e] = acc;
  }
  td::sync_threads();
  if (warp == 0) moe_route_warp(a, t, probs, items, picked);
  if (last_block_arrive(g.counter, a.num_tokens, flag)) moe_group_block(g, counts, iscratch);
}

// Few tokens (up to kMoeSplitRouterTokens, up to kMoeRouterWarpExperts experts), one launch:
// CTA (expert block of 8, token tile of 8) computes its logits (moe_router_logits_tile: the
// router's bytes read by many SMs at once, which a CTA per token could not); the last CTA of a
// token tile to finish routes the tile's tokens, a warp each (reading the other CTAs' logits
// past L1); the last tile to be routed groups the step's entries.
TD_GLOBAL void TD_LAUNCH_BOUNDS(kMoeRouteThreads) moe_router_kernel(MoeRouteArgs a, MoeGroupArgs g) {
  constexpr int W = static_cast<int>(kMoeRouteThreads / 32), EW = kMoeRouterWarpExperts;
  TD_SHARED(float, probs, W * EW);
  TD_SHARED(TopkItem, items, W * EW);
  TD_SHARED(ArgMax, picked, W * kMaxMoeTopKPlus1);
  TD_SHARED(int, counts, EW);
  TD_SHARED(int, iscratch, 32);
  TD_SHARED(int, flag, 1);
  static_assert(kMoeLogitTokens <= W, "a warp per token of a tile");
  moe_router_logits_tile(a);
  if (!last_block_arrive(a.tile_counters + blockIdx.y, static_cast<int>(gridDim.x), flag)) return;
  const int warp = static_cast<int>(threadIdx.x / 32), E = a.num_experts;
  const int t = static_cast<int>(blockIdx.y) * kMoeLogitTokens + warp;
  if (warp < kMoeLogitTokens && t < a.num_tokens) {
    float* p = probs + warp * EW;
    for (int e = static_cast<int>(td::lane_id()); e < E; e += 32) p[e] = load_cg(a.logits + static_cast<int64_t>(t) * E + e);
    td::sync_warp();
    moe_route_warp(a, t, p, items + warp * EW, picked + warp * kMaxMoeTopKPlus1);
  }
  if (last_block_arrive(g.counter, static_cast<int>(gridDim.y), flag)) moe_group_block(g, counts, iscratch);
}

/** Threads of a route CTA: kMoeRouteThreads, or one per expert past that (its last CTA groups). */
inline unsigned moe_route_threads(int num_experts) {
  return std::max(kMoeRouteThreads, static_cast<unsigned>(td::ceil_div(num_experts, 32)) * 32);
}

inline void launch_moe_route(const MoeRouteArgs& a, const MoeGroupArgs& g, void* stream, bool overlap) {
  if (a.num_tokens <= kMoeSplitRouterTokens && a.num_experts <= kMoeRouterWarpExperts) {
    const td::Grid grid{td::ceil_div(a.num_experts, kMoeRouteThreads / 32), td::ceil_div(a.num_tokens, kMoeLogitTokens), 1};
    td::launch_dependent(overlap, moe_router_kernel, grid, kMoeRouteThreads, 0, stream, a, g);
  } else {
    td::launch_dependent(overlap, moe_route_kernel, {static_cast<unsigned>(a.num_tokens)}, moe_route_threads(a.num_experts),
                         static_cast<size_t>(a.hidden) * 2, stream, a, g);
  }
}

}  // namespace tandem::gpu::TD_NS
