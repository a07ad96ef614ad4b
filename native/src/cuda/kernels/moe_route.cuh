// MoE routing and grouping (moe_api.h). The route kernel is one CTA per token: the token's
// normed row is staged in shared memory, each warp computes router logits for experts w, w +
// warps, ... (16-byte weight loads, a warp reduction each), then a block softmax in f32 and
// top-k by repeated block arg max (ties to the lower index). That order is torch.topk's unless
// two of the best k + 1 values are equal; then one thread reruns the selection with the
// algorithms torch's CPU kernel calls (moe_topk.cuh), so ties go where transformers sends them.
// The grouping is done by the route kernel's last CTA to finish (last_block.cuh: the CTAs count
// themselves in on MoeGroupArgs::counter once their token's ids are written, so a step spends
// no launch on it; a CTA has a thread per expert): per-expert counts (shared-memory integer
// atomics), a block scan of the counts rounded up to kMoeTileRows (the padded offsets), the
// list of experts hit, then every entry's slot from a per-expert cursor. Slots within an expert's run are in no
// particular order on a GPU (the atomics decide); nothing downstream depends on it: a row's
// GEMM result is its own, and combine gathers each token's entries in a fixed order.
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

// Router logits for few tokens: CTA (expert block of 8, token tile of 8): each warp streams one
// expert's router row with 16-byte loads into the tile's tokens (xn rows read through L1/L2).
inline constexpr int kMoeLogitTokens = 8;

TD_GLOBAL void TD_LAUNCH_BOUNDS(kMoeRouteThreads) moe_router_logits_kernel(MoeRouteArgs a) {
  const int warp = static_cast<int>(threadIdx.x / 32);
  const unsigned lane = td::lane_id();
  const int e = static_cast<int>(blockIdx.x) * static_cast<int>(kMoeRouteThreads / 32) + warp;
  const int t0 = static_cast<int>(blockIdx.y) * kMoeLogitTokens;
  if (e >= a.num_experts) return;  // a whole warp; the kernel has no barrier
  const int h = a.hidden, nt = td::imin(kMoeLogitTokens, a.num_tokens - t0);
  const td::bf16_bits* w = a.router + static_cast<int64_t>(e) * h;
  // The router's rows do not depend on the kernel before (a programmatic dependent launch may
  // start while it runs): to L2 first, then wait for the normed rows it writes.
  for (int i = static_cast<int>(lane) * 64; i < h; i += 32 * 64) td::prefetch_l2(w + i);
  td::grid_dependency_wait();
  td::grid_dependents_launch();
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

// kLogitsReady: the logits are in a.logits already (moe_router_logits_kernel); else this CTA
// computes its token's own from the staged xn row.
// Then the last CTA to finish groups the step's entries (moe_group_block).
template <bool kLogitsReady>
TD_GLOBAL void TD_LAUNCH_BOUNDS(kMoeMaxExperts) moe_route_kernel(MoeRouteArgs a, MoeGroupArgs g) {
  TD_DYNAMIC_SHARED(td::bf16_bits, xs);  // [hidden]
  TD_SHARED(float, probs, kMoeMaxExperts);
  TD_SHARED(TopkItem, items, kMoeMaxExperts);
  TD_SHARED(float, scratch, 32);
  TD_SHARED(ArgMax, best_scratch, 32);
  TD_SHARED(ArgMax, picked, kMaxMoeTopKPlus1);
  TD_SHARED(int, counts, kMoeMaxExperts);
  TD_SHARED(int, iscratch, 32);
  TD_SHARED(int, flag, 1);
  const int t = static_cast<int>(blockIdx.x), tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, warps = static_cast<int>(blockDim.x / 32);
  const unsigned lane = td::lane_id();
  const int h = a.hidden, E = a.num_experts, k = a.top_k;
  td::grid_dependency_wait();  // before reading the logits or xn
  td::grid_dependents_launch();
  const td::bf16_bits* x = a.xn + static_cast<int64_t>(t) * h;
  if constexpr (kLogitsReady) {
    for (int e = tid; e < E; e += static_cast<int>(blockDim.x)) probs[e] = a.logits[static_cast<int64_t>(t) * E + e];
  } else {
    for (int i = tid * 8; i < h; i += static_cast<int>(blockDim.x) * 8) {
      *reinterpret_cast<td::vec16*>(xs + i) = *reinterpret_cast<const td::vec16*>(x + i);
    }
  }
  td::sync_threads();
  for (int e = warp; !kLogitsReady && e < E; e += warps) {
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
  // Softmax in f32: max, exp, sum (fixed-order block reductions).
  float m = -INFINITY;
  for (int e = tid; e < E; e += static_cast<int>(blockDim.x)) m = fmaxf(m, probs[e]);
  m = block_max(m, scratch);
  float s = 0.0f;
  for (int e = tid; e < E; e += static_cast<int>(blockDim.x)) s += expf(probs[e] - m);
  s = block_sum(s, scratch);
  td::sync_threads();  // every thread has read probs[] as logits
  for (int e = tid; e < E; e += static_cast<int>(blockDim.x)) probs[e] = expf(probs[e] - m) / s;
  td::sync_threads();
  // The best k + 1 by repeated arg max; a chosen expert's value is masked to -inf in items[].
  for (int e = tid; e < E; e += static_cast<int>(blockDim.x)) items[e] = TopkItem{probs[e], e};
  td::sync_threads();
  const int rounds = k < E ? k + 1 : k;
  for (int r = 0; r < rounds; ++r) {
    ArgMax mine{-INFINITY, 0x7fffffff};
    for (int e = tid; e < E; e += static_cast<int>(blockDim.x)) mine = better(mine, ArgMax{items[e].value, e});
    const ArgMax best = block_argmax(mine, best_scratch);
    if (tid == 0) {
      picked[r] = best;
      items[best.index].value = -INFINITY;
    }
    td::sync_threads();
  }
  if (tid == 0) {
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
  if (last_block_arrive(g.counter, a.num_tokens, flag)) moe_group_block(g, counts, iscratch);
}

/** Threads of a route CTA: kMoeRouteThreads, or one per expert past that (its last CTA groups). */
inline unsigned moe_route_threads(int num_experts) {
  return std::max(kMoeRouteThreads, static_cast<unsigned>(td::ceil_div(num_experts, 32)) * 32);
}

inline void launch_moe_route(const MoeRouteArgs& a, const MoeGroupArgs& g, void* stream, bool overlap) {
  const unsigned threads = moe_route_threads(a.num_experts), tokens = static_cast<unsigned>(a.num_tokens);
  if (a.num_tokens <= kMoeSplitRouterTokens) {
    const td::Grid grid{td::ceil_div(a.num_experts, kMoeRouteThreads / 32), td::ceil_div(a.num_tokens, kMoeLogitTokens), 1};
    td::launch_dependent(overlap, moe_router_logits_kernel, grid, kMoeRouteThreads, 0, stream, a);
    td::launch_dependent(overlap, moe_route_kernel<true>, {tokens}, threads, 0, stream, a, g);
  } else {
    td::launch_dependent(overlap, moe_route_kernel<false>, {tokens}, threads, static_cast<size_t>(a.hidden) * 2, stream, a, g);
  }
}

}  // namespace tandem::gpu::TD_NS
