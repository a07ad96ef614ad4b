#include "sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace tandem {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

bool has_penalties(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}

Sampler::Sampler(int64_t vocab_size)
    : vocab_(vocab_size),
      work_(static_cast<size_t>(vocab_size)),
      idx_(static_cast<size_t>(vocab_size)),
      probs_(static_cast<size_t>(vocab_size)),
      kept_(static_cast<size_t>(vocab_size)),
      stamp_(static_cast<size_t>(vocab_size), 0),
      count_(static_cast<size_t>(vocab_size), 0) {}

double Sampler::uniform(uint64_t seed, int64_t position) {
  uint64_t x = splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(position));
  return static_cast<double>(x >> 11) * (1.0 / 9007199254740992.0);
}

void Sampler::apply_penalties(const SampleRequest& req) {
  const SamplingParams& p = req.params;
  // A fresh stamp marks "seen in this request" without clearing vocab-sized arrays.
  if (++generation_ == 0) {
    std::fill(stamp_.begin(), stamp_.end(), 0);
    generation_ = 1;
  }
  if (p.repetition_penalty != 1.0f) {
    for (int32_t i = 0; i < req.history_len; ++i) {
      const int32_t tok = req.history[i];
      if (tok < 0 || tok >= vocab_ || stamp_[static_cast<size_t>(tok)] == generation_) continue;
      stamp_[static_cast<size_t>(tok)] = generation_;
      float& l = work_[static_cast<size_t>(tok)];
      l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
    }
    if (++generation_ == 0) {
      std::fill(stamp_.begin(), stamp_.end(), 0);
      generation_ = 1;
    }
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    for (int32_t i = req.num_prompt; i < req.history_len; ++i) {
      const int32_t tok = req.history[i];
      if (tok < 0 || tok >= vocab_) continue;
      if (stamp_[static_cast<size_t>(tok)] != generation_) {
        stamp_[static_cast<size_t>(tok)] = generation_;
        count_[static_cast<size_t>(tok)] = 0;
      }
      ++count_[static_cast<size_t>(tok)];
    }
    for (int32_t i = req.num_prompt; i < req.history_len; ++i) {
      const int32_t tok = req.history[i];
      if (tok < 0 || tok >= vocab_ || count_[static_cast<size_t>(tok)] == 0) continue;
      work_[static_cast<size_t>(tok)] -=
          p.frequency_penalty * static_cast<float>(count_[static_cast<size_t>(tok)]) + p.presence_penalty;
      count_[static_cast<size_t>(tok)] = 0;  // apply once per distinct token
    }
  }
}

SampleResult Sampler::sample(const SampleRequest& req) {
  const SamplingParams& p = req.params;
  const size_t v = static_cast<size_t>(vocab_);
  std::memcpy(work_.data(), req.logits, v * sizeof(float));
  if (has_penalties(p) && req.history != nullptr) apply_penalties(req);
  for (int32_t i = 0; i < req.bias_len; ++i) {
    const int32_t tok = req.bias_ids[i];
    if (tok >= 0 && tok < vocab_ && std::isfinite(req.bias_values[i])) work_[static_cast<size_t>(tok)] += req.bias_values[i];
  }
  if (req.allowed != nullptr) {
    for (size_t w = 0; w * 32 < v; ++w) {
      const uint32_t bits = req.allowed[w];
      if (bits == 0xffffffffu) continue;
      const size_t end = std::min(v, w * 32 + 32);
      for (size_t i = w * 32; i < end; ++i) {
        if (((bits >> (i & 31)) & 1u) == 0) work_[i] = -INFINITY;
      }
    }
  }

  SampleResult out;
  if (p.temperature <= 0.0f) {
    out.token = static_cast<int32_t>(std::max_element(work_.begin(), work_.end()) - work_.begin());
  } else if (*std::max_element(work_.begin(), work_.end()) == -INFINITY) {
    out.token = 0;  // every token masked out: nothing to draw (greedy gives 0 too)
  } else {
    const float inv_t = 1.0f / p.temperature;
    size_t n = v;
    std::iota(idx_.begin(), idx_.end(), 0);
    auto by_logit_desc = [&](int32_t a, int32_t b) {
      return work_[static_cast<size_t>(a)] > work_[static_cast<size_t>(b)] ||
             (work_[static_cast<size_t>(a)] == work_[static_cast<size_t>(b)] && a < b);
    };
    bool id_order = true;  // idx_[0, n) ascending
    if (p.top_k > 0 && static_cast<size_t>(p.top_k) < n) {
      std::nth_element(idx_.begin(), idx_.begin() + p.top_k, idx_.begin() + static_cast<int64_t>(n), by_logit_desc);
      n = static_cast<size_t>(p.top_k);
      id_order = false;
    }
    const bool need_sorted = p.top_p < 1.0f;
    if (need_sorted) {
      std::sort(idx_.begin(), idx_.begin() + static_cast<int64_t>(n), by_logit_desc);
      id_order = false;
    }
    float max_l = -INFINITY;
    for (size_t i = 0; i < n; ++i) max_l = std::max(max_l, work_[static_cast<size_t>(idx_[i])]);
    double total = 0;
    for (size_t i = 0; i < n; ++i) {
      float e = std::exp((work_[static_cast<size_t>(idx_[i])] - max_l) * inv_t);
      probs_[i] = e;
      total += e;
    }
    if (need_sorted) {
      // Smallest prefix (by probability) whose mass reaches top_p; always at least one token.
      double cum = 0;
      size_t keep = 0;
      while (keep < n) {
        cum += probs_[keep] / total;
        ++keep;
        if (cum >= p.top_p) break;
      }
      n = keep;
    }
    if (p.min_p > 0.0f) {
      // The top token's probability is exp(0)/total, so the threshold is min_p in exp units;
      // min_p above 1 acts as 1 (the top token always stays).
      float max_e = 0;
      for (size_t i = 0; i < n; ++i) max_e = std::max(max_e, probs_[i]);
      const float threshold = std::min(p.min_p, 1.0f) * max_e;
      size_t w = 0;
      for (size_t i = 0; i < n; ++i) {
        if (probs_[i] >= threshold) {
          idx_[w] = idx_[i];
          probs_[w] = probs_[i];
          ++w;
        }
      }
      n = w;
    }
    // The draw walks the kept tokens in ascending id order (what a GPU scans without sorting
    // the vocabulary): the first whose cumulative mass exceeds target, else (rounding) the
    // last one with mass. A kept token without mass is never drawn.
    const float* e_by_id = probs_.data();
    size_t walk = n;
    if (!id_order) {
      if (n * 16 <= v) {
        // Few kept tokens: sort them by id.
        for (size_t i = 0; i < n; ++i) kept_[i] = {idx_[i], probs_[i]};
        std::sort(kept_.begin(), kept_.begin() + static_cast<int64_t>(n),
                  [](const std::pair<int32_t, float>& a, const std::pair<int32_t, float>& b) { return a.first < b.first; });
        for (size_t i = 0; i < n; ++i) {
          idx_[i] = kept_[i].first;
          probs_[i] = kept_[i].second;
        }
      } else {
        // Many: scatter their mass over the vocabulary (work_ is no longer needed) and walk
        // every id; the others add exact zeros, so the sums are those of the sorted walk.
        std::fill(work_.begin(), work_.end(), 0.0f);
        for (size_t i = 0; i < n; ++i) work_[static_cast<size_t>(idx_[i])] = probs_[i];
        std::iota(idx_.begin(), idx_.end(), 0);
        e_by_id = work_.data();
        walk = v;
      }
    }
    double mass = 0;
    for (size_t i = 0; i < walk; ++i) mass += e_by_id[i];
    const double target = uniform(p.seed, req.position) * mass;
    out.token = 0;  // no kept token with mass (only with NaN inputs)
    for (size_t i = walk; i-- > 0;) {
      if (e_by_id[i] > 0) {
        out.token = idx_[i];
        break;
      }
    }
    double cum = 0;
    for (size_t i = 0; i < walk; ++i) {
      cum += e_by_id[i];
      if (target < cum) {
        out.token = idx_[i];
        break;
      }
    }
  }

  if (req.num_top_logprobs >= 0) {
    const float* raw = req.logits;
    float max_l = -INFINITY;
    for (size_t i = 0; i < v; ++i) max_l = std::max(max_l, raw[i]);
    double sum = 0;
    for (size_t i = 0; i < v; ++i) sum += std::exp(static_cast<double>(raw[i] - max_l));
    const float log_z = max_l + static_cast<float>(std::log(sum));
    out.logprob = raw[out.token] - log_z;
    const size_t k = std::min<size_t>(static_cast<size_t>(req.num_top_logprobs), v);
    if (k > 0) {
      std::iota(idx_.begin(), idx_.end(), 0);
      std::partial_sort(idx_.begin(), idx_.begin() + static_cast<int64_t>(k), idx_.end(), [&](int32_t a, int32_t b) {
        return raw[a] > raw[b] || (raw[a] == raw[b] && a < b);
      });
      out.top.reserve(k);
      for (size_t i = 0; i < k; ++i) out.top.emplace_back(idx_[i], raw[idx_[i]] - log_z);
    }
  }
  return out;
}

}  // namespace tandem
