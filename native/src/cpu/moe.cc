#include "moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../core/fp8_weights.h"
#include "../core/model_config.h"
#include "../core/safetensors.h"
#include "../core/thread_pool.h"
#include "gemm.h"
#include "kernels.h"

namespace tandem {
namespace cpu {
namespace {

/** Views stacked by rows as f32, row-major (rows returned). */
std::vector<float> stack_f32(const std::vector<const TensorView*>& parts, int64_t& rows) {
  rows = 0;
  for (const TensorView* t : parts) rows += t->shape[0];
  std::vector<float> values(static_cast<size_t>(rows * parts.front()->shape[1]));
  size_t at = 0;
  for (const TensorView* t : parts) {
    convert_to_f32(*t, values.data() + at);
    at += t->num_elements();
  }
  return values;
}

/** Views stacked by rows into one WeightMatrix, keeping bf16 when every part is bf16 (as WeightMatrix::load). */
WeightMatrix stack(const std::vector<const TensorView*>& parts) {
  int64_t rows = 0;
  const int64_t cols = parts.front()->shape[1];
  bool all_bf16 = true;
  for (const TensorView* t : parts) {
    rows += t->shape[0];
    all_bf16 = all_bf16 && t->dtype == DType::kBF16;
  }
  if (all_bf16) {
    std::vector<uint16_t> bits(static_cast<size_t>(rows * cols));
    size_t at = 0;
    for (const TensorView* t : parts) {
      std::memcpy(bits.data() + at, t->data, t->num_elements() * sizeof(uint16_t));
      at += t->num_elements();
    }
    return WeightMatrix::from_bf16(std::move(bits), rows, cols);
  }
  std::vector<float> values = stack_f32(parts, rows);
  return WeightMatrix::from_f32(std::move(values), rows, cols);
}

/**
 * An expert's (stacked) linear weight. The per-expert layout's tensors are named checkpoint tensors:
 * they load exactly as a dense linear layer does (WeightMatrix::load: FP8 with the checkpoint's
 * scales, quantized per row under `--quantization fp8`, dequantized under `--quantization none`,
 * otherwise the checkpoint's precision). transformers 5's fused 3-D layout (bf16/f32 only: an FP8
 * 3-D tensor is refused by validate_fp8_weights) is sliced in memory: quantized here under
 * `--quantization fp8` with the same quantize_per_row, else kept.
 */
WeightMatrix expert_linear(const std::vector<const TensorView*>& parts, const MoeLoadOptions& o) {
  WeightMatrix m;
  if (o.layout == ExpertLayout::kPerExpert) {
    std::vector<WeightMatrix::Part> named;
    for (const TensorView* t : parts) named.push_back({t->name, t->shape});
    m = WeightMatrix::load(*o.store, *o.config, named, true, o.pool);
  } else {
    const QuantConfig& q = o.config->quant;
    if (q.method != QuantMethod::kOnLoad || q.dequantize) return stack(parts);
    int64_t rows = 0;
    const std::vector<float> values = stack_f32(parts, rows);
    m = WeightMatrix::from_fp8(quantize_per_row(values.data(), rows, parts.front()->shape[1], o.pool));
  }
  if (o.fp8_weight_only) m.set_weight_only();
  return m;
}

/** The router or the shared expert's gate: a non-linear weight, in the checkpoint's precision (WeightMatrix::load). */
WeightMatrix gate_weight(const TensorView& t, const MoeLoadOptions& o) {
  WeightMatrix m = WeightMatrix::load(*o.store, *o.config, {{t.name, t.shape}}, false, o.pool);
  if (o.fp8_weight_only) m.set_weight_only();
  return m;
}

ExpertMlp expert_mlp(const ExpertViews& v, const MoeLoadOptions& o) {
  return {expert_linear({v.gate, v.up}, o), expert_linear({v.down}, o)};
}

float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

}  // namespace

MoeLayerWeights MoeLayerWeights::load(const ModelConfig& c, const SafetensorsStore& w, int64_t layer, ThreadPool* pool,
                                      bool fp8_weight_only) {
  const MoeLayerTensors t(c, w, layer);
  const MoeLoadOptions o{&c, &w, t.layout(), pool, fp8_weight_only};
  MoeLayerWeights out;
  out.router = gate_weight(t.router(), o);
  out.experts.reserve(static_cast<size_t>(c.moe.num_experts));
  for (int64_t e = 0; e < c.moe.num_experts; ++e) out.experts.push_back(expert_mlp(t.expert(e), o));
  if (t.shared_gate() != nullptr) {
    MoeLoadOptions named = o;  // the shared expert's tensors are named in every layout
    named.layout = ExpertLayout::kPerExpert;
    out.shared = expert_mlp(t.shared(), named);
    out.shared_gate = gate_weight(*t.shared_gate(), o);
  }
  return out;
}

void torch_topk(const float* values, int64_t n, int64_t k, int32_t* ids, float* out_values, TopkScratch& q) {
  q.resize(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) q[static_cast<size_t>(j)] = {values[j], j};
  // torch's comparator: NaN ranks first, then greater values. The algorithms (not the
  // comparator) decide the order of equal values, so they must be the same ones torch calls.
  auto greater = [](const std::pair<double, int64_t>& x, const std::pair<double, int64_t>& y) {
    return (std::isnan(x.first) && !std::isnan(y.first)) || x.first > y.first;
  };
  if (k * 64 <= n) {
    std::partial_sort(q.begin(), q.begin() + k, q.end(), greater);
  } else {
    std::nth_element(q.begin(), q.begin() + (k - 1), q.end(), greater);
    std::sort(q.begin(), q.begin() + (k - 1), greater);
  }
  for (int64_t i = 0; i < k; ++i) {
    ids[i] = static_cast<int32_t>(q[static_cast<size_t>(i)].second);
    out_values[i] = static_cast<float>(q[static_cast<size_t>(i)].first);
  }
}

void moe_route(const float* logits, int64_t n, int64_t k, bool renormalize, int32_t* ids, float* weights,
               std::vector<float>& probs, TopkScratch& scratch) {
  probs.resize(static_cast<size_t>(n));
  float m = logits[0];
  for (int64_t e = 1; e < n; ++e) m = std::max(m, logits[e]);
  float sum = 0.0f;
  for (int64_t e = 0; e < n; ++e) {
    probs[static_cast<size_t>(e)] = std::exp(logits[e] - m);
    sum += probs[static_cast<size_t>(e)];
  }
  for (int64_t e = 0; e < n; ++e) probs[static_cast<size_t>(e)] /= sum;
  torch_topk(probs.data(), n, k, ids, weights, scratch);
  if (!renormalize) return;
  float total = 0.0f;
  for (int64_t i = 0; i < k; ++i) total += weights[i];
  for (int64_t i = 0; i < k; ++i) weights[i] /= total;
}

void MoeGrouping::build(const int32_t* ids, int64_t n, int64_t num_experts) {
  counts.assign(static_cast<size_t>(num_experts), 0);
  offsets.assign(static_cast<size_t>(num_experts) + 1, 0);
  sorted.resize(static_cast<size_t>(n));
  position.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ++counts[static_cast<size_t>(ids[i])];
  for (int64_t e = 0; e < num_experts; ++e) offsets[static_cast<size_t>(e) + 1] = offsets[static_cast<size_t>(e)] + counts[static_cast<size_t>(e)];
  std::vector<int32_t>& cursor = counts;  // reused as the fill cursor, restored below
  for (int64_t e = 0; e < num_experts; ++e) cursor[static_cast<size_t>(e)] = offsets[static_cast<size_t>(e)];
  for (int64_t i = 0; i < n; ++i) {
    const int32_t p = cursor[static_cast<size_t>(ids[i])]++;
    sorted[static_cast<size_t>(p)] = static_cast<int32_t>(i);
    position[static_cast<size_t>(i)] = p;
  }
  for (int64_t e = 0; e < num_experts; ++e) counts[static_cast<size_t>(e)] = offsets[static_cast<size_t>(e) + 1] - offsets[static_cast<size_t>(e)];
}

void MoeBlock::ensure_workers(int n) {
  while (static_cast<int>(workers_.size()) < n) {
    workers_.emplace_back();
    workers_.back().serial = std::make_unique<ThreadPool>(1);
  }
}

// rows entries of one expert: gather their tokens' x, gate/up, SwiGLU, down into y (rows in
// the grouping's order).
void MoeBlock::expert(ThreadPool& gemm_pool, Worker& wk, const ModelConfig& c, const ExpertMlp& e, const float* x,
                      const int32_t* entries, int64_t rows, int64_t top_k, float* y) {
  const int64_t h = c.hidden_size, inter = e.down.cols();
  auto grow = [](std::vector<float>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  };
  grow(wk.x, rows * h);
  grow(wk.gate_up, rows * 2 * inter);
  grow(wk.act, rows * inter);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(wk.x.data() + r * h, x + (entries[r] / top_k) * h, static_cast<size_t>(h) * sizeof(float));
  }
  matmul_nt(gemm_pool, wk.x.data(), rows, e.gate_up, nullptr, wk.gate_up.data());
  for (int64_t r = 0; r < rows; ++r) {
    const float* gu = wk.gate_up.data() + r * 2 * inter;
    silu_mul(gu, gu + inter, wk.act.data() + r * inter, inter);
  }
  matmul_nt(gemm_pool, wk.act.data(), rows, e.down, nullptr, y);
}

void MoeBlock::run(ThreadPool& pool, const ModelConfig& c, const MoeLayerWeights& w, const float* x, int64_t t, float* out) {
  const MoeConfig& m = c.moe;
  const int64_t h = c.hidden_size, k = m.top_k, n = t * k;
  ensure_workers(pool.size());
  logits_.resize(static_cast<size_t>(t * m.num_experts));
  ids_.resize(static_cast<size_t>(n));
  weights_.resize(static_cast<size_t>(n));
  matmul_nt(pool, x, t, w.router, nullptr, logits_.data());
  pool.parallel_for(t, 16, [&](int64_t b, int64_t e, int worker) {
    Worker& wk = workers_[static_cast<size_t>(worker)];
    for (int64_t i = b; i < e; ++i) {
      moe_route(logits_.data() + i * m.num_experts, m.num_experts, k, m.norm_topk_prob, ids_.data() + i * k,
                weights_.data() + i * k, wk.probs, wk.topk);
    }
  });
  groups_.build(ids_.data(), n, m.num_experts);
  active_.clear();
  for (int64_t e = 0; e < m.num_experts; ++e) {
    if (groups_.counts[static_cast<size_t>(e)] > 0) active_.push_back(static_cast<int32_t>(e));
  }
  // Heaviest experts first, so the last claimed work items are small.
  std::stable_sort(active_.begin(), active_.end(),
                   [&](int32_t a, int32_t b) { return groups_.counts[static_cast<size_t>(a)] > groups_.counts[static_cast<size_t>(b)]; });
  if (static_cast<int64_t>(y_.size()) < n * h) y_.resize(static_cast<size_t>(n * h));
  auto run_expert = [&](ThreadPool& gemm_pool, Worker& wk, int32_t e) {
    const int32_t first = groups_.offsets[static_cast<size_t>(e)];
    expert(gemm_pool, wk, c, w.experts[static_cast<size_t>(e)], x, groups_.sorted.data() + first,
           groups_.counts[static_cast<size_t>(e)], k, y_.data() + static_cast<int64_t>(first) * h);
  };
  if (static_cast<int>(active_.size()) >= pool.size() && pool.size() > 1) {
    // Enough experts for every thread: each runs whole experts on one thread.
    pool.parallel_for(static_cast<int64_t>(active_.size()), 1, [&](int64_t b, int64_t e, int worker) {
      Worker& wk = workers_[static_cast<size_t>(worker)];
      for (int64_t i = b; i < e; ++i) run_expert(*wk.serial, wk, active_[static_cast<size_t>(i)]);
    });
  } else {
    for (int32_t e : active_) run_expert(pool, workers_[0], e);
  }

  const bool shared = !w.shared_gate.empty();
  if (shared) {
    shared_.resize(static_cast<size_t>(t * h));
    gate_.resize(static_cast<size_t>(t));
    matmul_nt(pool, x, t, w.shared_gate, nullptr, gate_.data());
    // The shared expert sees every token: a dense MLP over all rows (entry i = token i).
    shared_rows_.resize(static_cast<size_t>(t));
    for (int64_t i = 0; i < t; ++i) shared_rows_[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    expert(pool, workers_[0], c, w.shared, x, shared_rows_.data(), t, 1, shared_.data());
  }
  // Combine in transformers' order: experts ascending, each adding w x y (rounded to f32 first).
  pool.parallel_for(t, 4, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      int32_t slot[kMaxTopK];
      const int64_t kk = std::min<int64_t>(k, kMaxTopK);
      for (int64_t j = 0; j < kk; ++j) slot[j] = static_cast<int32_t>(j);
      std::sort(slot, slot + kk, [&](int32_t a, int32_t bb) { return ids_[static_cast<size_t>(i * k + a)] < ids_[static_cast<size_t>(i * k + bb)]; });
      float* o = out + i * h;
      std::fill(o, o + h, 0.0f);
      for (int64_t j = 0; j < kk; ++j) {
        const int64_t entry = i * k + slot[j];
        const float wt = weights_[static_cast<size_t>(entry)];
        const float* yr = y_.data() + static_cast<int64_t>(groups_.position[static_cast<size_t>(entry)]) * h;
        for (int64_t d = 0; d < h; ++d) o[d] += yr[d] * wt;
      }
      if (shared) {
        const float g = sigmoid(gate_[static_cast<size_t>(i)]);
        const float* s = shared_.data() + i * h;
        for (int64_t d = 0; d < h; ++d) o[d] += g * s[d];
      }
    }
  });
}

}  // namespace cpu
}  // namespace tandem
