#include "lora_sgmv.h"

#include <algorithm>

#include "../core/thread_pool.h"

namespace tandem {
namespace cpu {
namespace {

// Eight independent partial sums so the compiler vectorizes without reassociating.
inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  }
  float s = 0;
  for (; i < n; ++i) s += a[i] * b[i];
  return s + ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

}  // namespace

void sgmv_shrink_expand(ThreadPool& pool, const std::vector<LoraSegment>& segments, int64_t layer, LoraTarget target,
                        const float* x, int64_t x_stride, int64_t in_features, float* out, int64_t out_stride,
                        int64_t col_offset, int64_t out_features, std::vector<float>& scratch) {
  const int ti = static_cast<int>(target);
  // Flatten the tokens the target applies to, with their factor, so both halves split evenly.
  struct Row {
    int64_t token;
    const LoraFactor* f;
    int32_t rank;
    float scale;
  };
  std::vector<Row> rows;
  int32_t max_rank = 0;
  for (const LoraSegment& s : segments) {
    const LoraFactor& f = s.adapter->layers[static_cast<size_t>(layer)][ti];
    if (f.empty()) continue;
    max_rank = std::max(max_rank, s.adapter->rank);
    for (int64_t i = s.begin; i < s.end; ++i) rows.push_back({i, &f, s.adapter->rank, s.adapter->scale});
  }
  if (rows.empty()) return;
  const int64_t n = static_cast<int64_t>(rows.size());
  if (static_cast<int64_t>(scratch.size()) < n * max_rank) scratch.resize(static_cast<size_t>(n * max_rank));
  float* t = scratch.data();
  // Shrink: rank dots of length in_features per token (scale folded in here, not per output).
  pool.parallel_for(n * max_rank, std::max<int64_t>(1, 4096 / in_features), [&](int64_t b, int64_t e, int) {
    for (int64_t idx = b; idx < e; ++idx) {
      const Row& r = rows[static_cast<size_t>(idx / max_rank)];
      const int64_t k = idx % max_rank;
      t[idx] = k < r.rank ? r.scale * dot(x + r.token * x_stride, r.f->a.data() + k * in_features, in_features) : 0.0f;
    }
  });
  // Expand: per token, out_row += Σ_k t[k] · Bᵀ[k], contiguous axpys over a chunk of columns.
  constexpr int64_t kCols = 512;
  const int64_t chunks = (out_features + kCols - 1) / kCols;
  pool.parallel_for(n * chunks, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t idx = b; idx < e; ++idx) {
      const int64_t ri = idx / chunks;
      const int64_t j0 = (idx % chunks) * kCols;
      const int64_t j1 = std::min(out_features, j0 + kCols);
      const Row& r = rows[static_cast<size_t>(ri)];
      float* o = out + r.token * out_stride + col_offset;
      const float* tr = t + ri * max_rank;
      for (int32_t k = 0; k < r.rank; ++k) {
        const float c = tr[k];
        const float* bk = r.f->bt.data() + static_cast<int64_t>(k) * out_features;
        for (int64_t j = j0; j < j1; ++j) o[j] += c * bk[j];
      }
    }
  });
}

}  // namespace cpu
}  // namespace tandem
