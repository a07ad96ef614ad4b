// The CPU MoE pieces against independent references: torch.topk's tie order (values recorded
// from torch 1.13's CPU kernel), routing (softmax, renormalization) against a double-precision
// computation, and the token grouping's invariants.
#pragma once

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "../src/cpu/moe.h"
#include "check.h"

namespace tandem_test {

struct TopkCase {
  int n, k, pattern;  // pattern 0: all equal; 1: pairs of equal values rising; 2: ones at 1, n-2, n-1, 0.5 at 0
  std::vector<int32_t> want;
};

/** softmax(pattern) as torch.softmax computes it closely enough that equal logits stay equal. */
inline std::vector<float> topk_pattern(int n, int pattern) {
  std::vector<float> x(static_cast<size_t>(n), 0.0f);
  if (pattern == 1) {
    for (int i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i / 2);
  } else if (pattern == 2) {
    x[static_cast<size_t>(n - 1)] = x[static_cast<size_t>(n - 2)] = x[1] = 1.0f;
    x[0] = 0.5f;
  }
  float m = x[0], s = 0;
  for (float v : x) m = std::max(m, v);
  for (float& v : x) s += (v = std::exp(v - m));
  for (float& v : x) v /= s;
  return x;
}

inline void test_torch_topk() {
  // /usr/bin/python3 -c "import torch; print(torch.topk(torch.softmax(x, -1), k).indices)" for
  // each pattern (torch 1.13, CPU): equal values come out in the order libstdc++'s
  // nth_element + sort (k * 64 > n) or partial_sort (k * 64 <= n) leave them.
  const std::vector<TopkCase> cases = {
      {8, 2, 0, {6, 5}},
      {8, 2, 1, {7, 6}},
      {8, 2, 2, {1, 7}},
      {16, 4, 0, {10, 11, 12, 9}},
      {16, 4, 1, {15, 14, 12, 13}},
      {16, 4, 2, {1, 15, 14, 0}},
      {128, 8, 0, {84, 87, 86, 85, 82, 81, 88, 83}},
      {128, 8, 1, {127, 126, 125, 124, 123, 122, 120, 121}},
      {128, 8, 2, {1, 127, 126, 0, 85, 87, 86, 81}},
      {128, 2, 0, {0, 1}},
      {128, 2, 1, {127, 126}},
      {128, 2, 2, {126, 1}},
      {60, 4, 0, {39, 40, 41, 38}},
      {60, 4, 1, {59, 58, 57, 56}},
      {60, 4, 2, {1, 59, 58, 0}},
      {4, 2, 0, {2, 3}},
  };
  tandem::cpu::TopkScratch scratch;
  for (const TopkCase& c : cases) {
    const std::vector<float> p = topk_pattern(c.n, c.pattern);
    std::vector<int32_t> ids(static_cast<size_t>(c.k));
    std::vector<float> vals(static_cast<size_t>(c.k));
    tandem::cpu::torch_topk(p.data(), c.n, c.k, ids.data(), vals.data(), scratch);
    CHECK(ids == c.want, "torch_topk n=%d k=%d pattern %d: got %d,%d... want %d,%d...", c.n, c.k, c.pattern, ids[0],
          ids[1], c.want[0], c.want[1]);
  }
}

inline void test_moe_route_and_grouping() {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  tandem::cpu::TopkScratch scratch;
  std::vector<float> probs;
  const int n = 16, k = 4;
  double worst = 0;
  for (int renorm = 0; renorm < 2; ++renorm) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> logits(n);
      for (float& v : logits) v = normal(rng);
      int32_t ids[k];
      float w[k];
      tandem::cpu::moe_route(logits.data(), n, k, renorm != 0, ids, w, probs, scratch);
      double m = -1e300, s = 0;
      for (float v : logits) m = std::max(m, static_cast<double>(v));
      for (float v : logits) s += std::exp(v - m);
      double chosen = 0;
      for (int j = 0; j < k; ++j) chosen += std::exp(logits[static_cast<size_t>(ids[j])] - m) / s;
      for (int j = 0; j < k; ++j) {
        const double p = std::exp(logits[static_cast<size_t>(ids[j])] - m) / s;
        worst = std::max(worst, std::fabs((renorm ? p / chosen : p) - w[j]));
        if (j > 0) CHECK(w[j] <= w[j - 1], "moe_route: weights not in descending order");
      }
      // The k chosen are the k largest: every other logit is at most the smallest chosen.
      float smallest = logits[static_cast<size_t>(ids[k - 1])];
      for (int e = 0; e < n; ++e) {
        bool chosen_e = false;
        for (int j = 0; j < k; ++j) chosen_e |= ids[j] == e;
        if (!chosen_e) CHECK(logits[static_cast<size_t>(e)] <= smallest, "moe_route: expert %d beats a chosen one", e);
      }
    }
  }
  CHECK(worst < 1e-6, "moe_route: weights differ from a double softmax by %g", worst);

  // Grouping: every entry exactly once, experts' runs contiguous in ascending entry order; an
  // expert with no entries has an empty run; one with all of them holds everything.
  for (int variant = 0; variant < 3; ++variant) {
    const int experts = 8, entries = 40;
    std::vector<int32_t> ids(entries);
    for (int i = 0; i < entries; ++i) ids[static_cast<size_t>(i)] = variant == 2 ? 3 : (i * 5 + variant) % 7;  // expert 7 empty
    tandem::cpu::MoeGrouping g;
    g.build(ids.data(), entries, experts);
    int bad = 0;
    std::vector<int> seen(entries, 0);
    for (int e = 0; e < experts; ++e) {
      for (int32_t p = g.offsets[static_cast<size_t>(e)]; p < g.offsets[static_cast<size_t>(e) + 1]; ++p) {
        const int32_t entry = g.sorted[static_cast<size_t>(p)];
        ++seen[static_cast<size_t>(entry)];
        bad += ids[static_cast<size_t>(entry)] != e || g.position[static_cast<size_t>(entry)] != p;
        if (p > g.offsets[static_cast<size_t>(e)]) bad += g.sorted[static_cast<size_t>(p - 1)] >= entry;
      }
    }
    for (int v : seen) bad += v != 1;
    CHECK(bad == 0, "moe grouping variant %d: %d inconsistencies", variant, bad);
    CHECK(g.counts[7] == 0 && (variant != 2 || g.counts[3] == entries), "moe grouping variant %d: counts", variant);
  }
  std::printf("moe: torch.topk tie order (16 recorded cases), routing vs double softmax (max %.1e), grouping checked\n", worst);
}

}  // namespace tandem_test
