// MoeKernelApi: the GPU backend's mixture-of-experts kernels (kernels/moe_*.cuh), compiled for
// both targets in their own units (moe_cuda.cu, moe_simt.cc) so that changing them does not
// recompile the forward's kernels. One sparse layer on the device:
//
//   route    router logits (xn . Wr, f32 accumulate), then a warp per token: softmax, top-k
//            (torch.topk's order; ties go through the same algorithm the CPU backend calls),
//            renormalized when asked -> ids [t][k], weights [t][k]; then, in the same launch,
//            the last CTA to finish groups the entries: counts per expert, padded offsets (each
//            expert's run rounded up to the tile's rows), every entry's slot (sorted[],
//            position[]), the list of experts hit
//   gate/up  grouped GEMM over tiles of one expert's rows: A rows gathered from xn by token,
//            gate and up of the same columns in one CTA, SiLU(gate) x up stored bf16
//   down     grouped GEMM of those rows, the routing weight applied in the epilogue -> y [slot][h]
//            Both on tensor cores: over 8-row tiles (decode, small groups: the few-rows GEMM's
//            loop, kernels/moe_gemm.cuh), or, when a step's experts average many rows (prefill),
//            over 64- or 128-row tiles placed by the grouping's prefix sum of tiles per expert
//            (the dense GEMM's main loop, kernels/moe_gemm_mma.cuh)
//   combine  per token: x[t] += sum over its experts in ascending id of y, plus
//            sigmoid(xn . w_shared_gate) x shared[t] (Qwen2-MoE); then, when asked (decode),
//            the next RMSNorm of x[t]. Its own launch (a CTA per token), or, over 8-row tiles,
//            inside the down GEMM's: the CTA that finishes a token's rows combines it
//
// Only the tiles of experts that received rows exist, so a decode step reads only the chosen
// experts' weights. Every array is sized for the step's (padded) token count at capture, and
// the grids are upper bounds whose extra CTAs return at once: a decode graph replays any routing.
#pragma once

#include <cstdint>
#include <memory>

#include "bf16.h"
#include "fp8.h"

namespace tandem::gpu {

/** Rows of one grouped-GEMM tile (an expert's run is padded to a multiple of it). */
inline constexpr int kMoeTileRows = 8;
/** Largest expert count the route kernel holds (its grouping CTA has a thread per expert). */
inline constexpr int kMoeMaxExperts = 1024;
/** Largest top-k (core/moe_config.h kMaxTopK), plus one: the route kernel looks one past k for ties. */
inline constexpr int kMaxMoeTopKPlus1 = 65;
/** Largest hidden size: a tile's rows are staged whole in shared memory. */
inline constexpr int kMoeMaxHidden = 8192;

/** Rows of the tensor-core grouped GEMM's tiles (kernels/moe_gemm_mma.cuh: the dense GEMM's 64x128 and 128x128 tiles). */
inline constexpr int kMoeMmaRowsSmall = 64;
inline constexpr int kMoeMmaRowsLarge = 128;

/** Slots a step's grouping may use: every entry plus one partial tile per expert it can hit. */
inline int64_t moe_max_slots(int64_t entries, int64_t num_experts) {
  const int64_t hit = entries < num_experts ? entries : num_experts;
  return (entries + hit * (kMoeTileRows - 1) + kMoeTileRows - 1) / kMoeTileRows * kMoeTileRows;
}

/** Tensor-core tiles of `rows` rows a step's grouping may make: sum over experts of ceil(count / rows). */
inline int64_t moe_max_mma_tiles(int64_t entries, int64_t num_experts, int64_t rows) {
  const int64_t hit = entries < num_experts ? entries : num_experts;
  return (entries + hit * (rows - 1)) / rows;
}

struct MoeRouteArgs {
  const bf16_bits* xn = nullptr;      // [num_tokens][hidden]
  const bf16_bits* router = nullptr;  // [num_experts][hidden]
  int num_tokens = 0, hidden = 0, num_experts = 0, top_k = 0;
  bool renormalize = false;
  int32_t* ids = nullptr;   // [num_tokens][top_k]
  float* weights = nullptr;  // [num_tokens][top_k]
  // [num_tokens][num_experts] scratch. Up to kMoeSplitRouterTokens tokens (and 256 experts),
  // the logits are computed by CTAs of 8 experts x 8 tokens (the router's bytes read by many SMs
  // at once, which one CTA per token could not), and the last CTA of each 8-token tile routes
  // it; past it each token's CTA computes its own.
  float* logits = nullptr;
  // kMoeRouterTileCounters ints, zero, that those CTAs count in on per tile; left zero.
  int32_t* tile_counters = nullptr;
};

/** Steps of at most this many tokens compute their router logits over CTAs of several tokens. */
inline constexpr int kMoeSplitRouterTokens = 64;
/** Tokens of one such CTA (a tile; its last CTA to finish routes them, a warp each). */
inline constexpr int kMoeLogitTokens = 8;
/** MoeRouteArgs::tile_counters: one per tile of the largest such step. */
inline constexpr int kMoeRouterTileCounters = (kMoeSplitRouterTokens + kMoeLogitTokens - 1) / kMoeLogitTokens;

/** The grouping of one step's entries (entry i = token i / top_k, slot i % top_k). */
struct MoeGroupArgs {
  const int32_t* ids = nullptr;  // [num_entries]
  int num_entries = 0, num_experts = 0;
  int32_t* counts = nullptr;          // [num_experts]
  int32_t* padded_offsets = nullptr;  // [num_experts + 1]: expert e's slots are [po[e], po[e] + counts[e])
  int32_t* sorted = nullptr;          // [moe_max_slots]: the entry in each slot, -1 in padding
  int32_t* position = nullptr;        // [num_entries]: the slot of each entry
  int32_t* active = nullptr;          // [num_experts + 1]: active[0] = experts hit, then their ids ascending
  int32_t* hits_out = nullptr;        // optional: the count of experts hit is also stored here (statistics)
  // For the tensor-core grouped GEMM (mma_rows > 0): expert e's tiles of mma_rows rows are
  // [mma_tile_offsets[e], mma_tile_offsets[e + 1]), the prefix sum of ceil(counts[e] / mma_rows).
  int mma_rows = 0;
  int32_t* mma_tile_offsets = nullptr;  // [num_experts + 1]
  // One int, zero, that the route kernel's CTAs count themselves in on; the last leaves it zero
  // again (a captured graph replays with it ready).
  int32_t* counter = nullptr;
};

struct MoeCombineArgs {
  const int32_t* ids = nullptr;       // [num_tokens][top_k]
  const int32_t* position = nullptr;  // [num_tokens * top_k]
  const float* y = nullptr;           // [slots][hidden]
  int num_tokens = 0, top_k = 0, hidden = 0;
  const bf16_bits* xn = nullptr;            // shared expert gate input
  const bf16_bits* shared_gate = nullptr;   // [hidden] or null (no shared expert)
  const float* shared = nullptr;            // [num_tokens][hidden] shared expert output
  float* x = nullptr;                       // [num_tokens][hidden] residual, accumulated
  // Optional (a decode step): then norm_out[t] = bf16(rmsnorm(x[t]) x norm_weight), the next
  // layer's input norm (or the final one) in the same launch, the bits rmsnorm_kernel gives.
  // norm_out may be xn itself: a token's CTA reads its xn row before it writes the row.
  const float* norm_weight = nullptr;
  float norm_eps = 0.0f;
  bf16_bits* norm_out = nullptr;  // [num_tokens][hidden]
};

/** One grouped GEMM over the tiles of a grouping (padded_offsets / sorted from MoeGroupArgs). */
struct MoeGemmArgs {
  const int32_t* padded_offsets = nullptr;
  const int32_t* sorted = nullptr;
  int num_experts = 0, top_k = 0;
  int max_slots = 0;  // the grid's bound: moe_max_slots(entries, experts)
  // gate/up: a = xn rows by token (entry / top_k); w = [experts][2 inter][hidden] (gate rows, then up)
  // down:    a = act rows by slot;                 w = [experts][hidden][inter]
  const bf16_bits* a = nullptr;
  const bf16_bits* w = nullptr;
  int hidden = 0, inter = 0;
  bf16_bits* act = nullptr;      // gate/up out: [max_slots][inter]
  const float* weights = nullptr;  // down: the routing weight of each entry ([entries])
  float* y = nullptr;            // down out: [max_slots][hidden], weighted
  int cols_per_cta = 64;         // 8-row tiles: output columns one CTA computes (chosen per shape, recorded)
  // 64- or 128-row tiles when mma_rows > 0 (kMoeMmaRowsSmall or kMoeMmaRowsLarge, the grouping's
  // MoeGroupArgs::mma_rows): tiles from mma_tile_offsets, rows past counts[e] masked; the grid's
  // bound is max_mma_tiles (moe_max_mma_tiles). cols_per_cta is then unused.
  int mma_rows = 0;
  const int32_t* counts = nullptr;            // [num_experts]
  const int32_t* mma_tile_offsets = nullptr;  // [num_experts + 1]
  int max_mma_tiles = 0;
  // FP8 experts (w8 set, w unused): e4m3 with w's layout, scales [experts * rows][w8_groups] of
  // w8_group_k columns each (a multiple of 8). W8A16: each weight becomes bf16(weight x scale) on
  // its way to the tensor cores (in registers for 8-row tiles, in shared memory for 64/128-row
  // ones); the activations as they are.
  const fp8_bits* w8 = nullptr;
  const float* w8_scales = nullptr;
  int w8_groups = 1, w8_group_k = 0;
  // down over 8-row tiles (mma_rows 0): with token_counters set, the combine (`combine`'s
  // arguments) runs in this launch, each token by the CTA that stores its last y columns
  // (kernels/moe_combine.cuh): a decode step spends no launch on it.
  int32_t* token_counters = nullptr;  // [num_tokens], zero; left zero
  MoeCombineArgs combine;
};


class MoeKernelApi {
 public:
  virtual ~MoeKernelApi() = default;
  virtual const char* target() const = 0;
  /**
   * Launch every kernel as a programmatic dependent of the one before (compute capability 9.0+,
   * else ignored): its launch and CTA start overlap that kernel's tail, and it waits for it
   * (td::grid_dependency_wait) before reading anything; the router-logits kernel first sends its
   * router rows to L2. Decode steps are chains of small kernels: this hides the gaps between them.
   */
  virtual void set_overlap(bool on) = 0;
  /** Routes the tokens (a) and groups the entries (g: its ids are a.ids) in one launch after the logits. */
  virtual void route(const MoeRouteArgs& a, const MoeGroupArgs& g, void* stream) = 0;
  virtual void gate_up(const MoeGemmArgs& a, void* stream) = 0;
  virtual void down(const MoeGemmArgs& a, void* stream) = 0;
  virtual void combine(const MoeCombineArgs& a, void* stream) = 0;
};

std::unique_ptr<MoeKernelApi> make_simt_moe_kernels();
/** Only in builds with the CUDA target. */
std::unique_ptr<MoeKernelApi> make_cuda_moe_kernels();

}  // namespace tandem::gpu
