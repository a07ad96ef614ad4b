#include "ngram_drafter.h"

#include <algorithm>
#include <cmath>

namespace tandem::spec {

uint64_t NgramDrafter::key_of(const int32_t* tokens, int32_t n) {
  uint64_t h = FlatMap::mix(0x9E3779B97F4A7C15ull + static_cast<uint64_t>(n));
  for (int32_t i = 0; i < n; ++i) h = FlatMap::mix(h ^ static_cast<uint32_t>(tokens[i]));
  return h >> 1;  // FlatMap keys stay below 2^63
}

// Positions [0, L - 1) are indexed: the last token's n-grams go in only once a later token
// follows, so a lookup of the current suffix never finds itself.
bool NgramDrafter::index(SequenceState& base, int64_t budget) const {
  State& s = static_cast<State&>(base);
  const int64_t target = static_cast<int64_t>(s.tokens.size()) - 1;
  const int64_t end = std::min(target, s.indexed + budget);
  for (int64_t i = s.indexed; i < end; ++i) {
    for (int32_t n = config_.ngram_min; n <= config_.ngram_max && n <= i + 1; ++n) {
      s.last_end.put(key_of(s.tokens.data() + i - n + 1, n), static_cast<int32_t>(i));
    }
  }
  s.indexed = std::max(s.indexed, end);
  return s.indexed >= target;
}

void NgramDrafter::draft(const SequenceState& base, DraftQuery& q) const {
  const State& s = static_cast<const State&>(base);
  const int64_t L = static_cast<int64_t>(s.tokens.size());
  const int32_t* t = s.tokens.data();
  for (int32_t n = std::min<int64_t>(config_.ngram_max, L - 1); n >= config_.ngram_min; --n) {
    const int32_t* suffix = t + L - n;
    const int64_t j = s.last_end.get(key_of(suffix, n));
    if (j < n - 1 || j >= L - 1 || !std::equal(suffix, suffix + n, t + j - n + 1)) continue;  // absent, or a collision
    // What followed position j; past the end, the drafts themselves (period L - 1 - j).
    for (int32_t i = 1; i <= q.max_drafts; ++i) {
      const int64_t at = j + i;
      q.drafts.push_back(at < L ? t[at] : q.drafts[static_cast<size_t>(at - L)]);
      q.scores.push_back(NAN);
    }
    return;
  }
}

}  // namespace tandem::spec
