// The CPU backend's mixture-of-experts block, and the reference for the GPU's MoE kernels.
//   route    router GEMM -> per token: softmax in f32, top-k exactly as torch.topk's CPU kernel
//            orders ties, renormalized when the config says so
//   group    entries (token, slot) sorted by expert, stable: each expert's rows are contiguous
//   experts  per active expert: gather its rows, gate/up GEMM, SiLU x up, down GEMM; threaded
//            across experts when enough are active, else each expert's GEMMs are threaded
//   combine  out[t] = sum over its experts in ascending id of w x y (transformers' index_add_
//            order), plus sigmoid(gate . x) x shared(x) for Qwen2-MoE
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "../core/moe_config.h"
#include "../core/thread_pool.h"
#include "weight_matrix.h"

namespace tandem {

class SafetensorsStore;
struct ModelConfig;

namespace cpu {

/** One expert's SwiGLU MLP: gate rows then up rows stacked (one GEMM), and down. */
struct ExpertMlp {
  WeightMatrix gate_up;
  WeightMatrix down;
};

/** How MoeLayerWeights::load treats the experts' linear weights (the router stays unquantized). */
struct MoeLoadOptions {
  const ModelConfig* config = nullptr;
  const SafetensorsStore* store = nullptr;
  ExpertLayout layout = ExpertLayout::kPerExpert;
  ThreadPool* pool = nullptr;   // spreads quantization at load over its threads (optional)
  bool fp8_weight_only = false; // --fp8-compute w8a16
};

/**
 * One sparse layer's weights in the CPU backend's format (weight_matrix.h). Every expert's gate/up
 * and down (and the shared expert's) load as a dense linear layer does (WeightMatrix::load under
 * the model's quantization config): an FP8 checkpoint's experts stay e4m3 with their scales (any
 * layout fp8_weights.h reads), `--quantization fp8` quantizes them at load, `--quantization none`
 * dequantizes them. The router and the shared expert's gate load as non-linear weights: the
 * checkpoint's precision (FP8 with its scales only if the checkpoint quantized them).
 */
struct MoeLayerWeights {
  WeightMatrix router;  // [num_experts][hidden]
  std::vector<ExpertMlp> experts;
  ExpertMlp shared;          // Qwen2-MoE shared expert; empty otherwise
  WeightMatrix shared_gate;  // [1][hidden]; empty without a shared expert
  static MoeLayerWeights load(const ModelConfig& c, const SafetensorsStore& w, int64_t layer, ThreadPool* pool = nullptr,
                              bool fp8_weight_only = false);
};

/** The scratch torch.topk's CPU kernel sorts: (value, index) pairs in index order. */
using TopkScratch = std::vector<std::pair<double, int64_t>>;

/**
 * torch.topk(values, k) as its CPU kernel computes it (aten TopKImpl.h): libstdc++'s
 * std::partial_sort when k * 64 <= n, else std::nth_element at k - 1 then std::sort of the
 * first k - 1, with NaN first and otherwise "greater". Among equal values the order is what
 * those algorithms leave, not the lowest index: with 8 equal values and k = 2 the result is
 * ids 6, 5. ids/out_values get k entries, best first.
 */
void torch_topk(const float* values, int64_t n, int64_t k, int32_t* ids, float* out_values, TopkScratch& scratch);

/** One token's routing: softmax(logits) in f32, torch_topk, weights / their sum when renormalize. */
void moe_route(const float* logits, int64_t num_experts, int64_t k, bool renormalize, int32_t* ids, float* weights,
               std::vector<float>& probs, TopkScratch& scratch);

/**
 * The step's grouping: entry i = token i / k, slot i % k. sorted[offsets[e] .. offsets[e+1])
 * are expert e's entries in ascending entry order; position[i] is entry i's place there.
 */
struct MoeGrouping {
  std::vector<int32_t> counts, offsets, sorted, position;
  void build(const int32_t* ids, int64_t num_entries, int64_t num_experts);
};

class MoeBlock {
 public:
  /** out[t] = the MoE MLP of x[t] (x: post-attention-normed rows, [t][hidden]) for t tokens. */
  void run(ThreadPool& pool, const ModelConfig& c, const MoeLayerWeights& w, const float* x, int64_t t, float* out);
  /** The last run's routing (tests): [t][k] expert ids and weights. */
  const std::vector<int32_t>& ids() const { return ids_; }
  const std::vector<float>& weights() const { return weights_; }

 private:
  struct Worker {
    std::unique_ptr<ThreadPool> serial;  // one thread: an expert's GEMMs inside a parallel_for over experts
    std::vector<float> x, gate_up, act;
    std::vector<float> probs;
    TopkScratch topk;
  };
  void expert(ThreadPool& gemm_pool, Worker& wk, const ModelConfig& c, const ExpertMlp& e, const float* x,
              const int32_t* entries, int64_t rows, int64_t top_k, float* y);
  void ensure_workers(int n);

  std::vector<Worker> workers_;
  std::vector<float> logits_, weights_, y_, shared_, gate_;
  std::vector<int32_t> ids_, active_, shared_rows_;
  MoeGrouping groups_;
};

}  // namespace cpu
}  // namespace tandem
