#include "suffix_drafter.h"

#include <algorithm>

namespace tandem::spec {

SuffixDrafter::SuffixDrafter(const DraftConfig& config) : DrafterBase(config) {}

bool SuffixDrafter::index(SequenceState& base, int64_t budget) const {
  State& s = static_cast<State&>(base);
  const int64_t end = std::min(static_cast<int64_t>(s.tokens.size()), s.indexed + budget);
  for (int64_t i = s.indexed; i < end; ++i) s.tree.append(0, s.tokens[static_cast<size_t>(i)]);
  s.indexed = end;
  return s.indexed == static_cast<int64_t>(s.tokens.size());
}

void SuffixDrafter::draft(const SequenceState& base, DraftQuery& q) const {
  const State& s = static_cast<const State&>(base);
  const int64_t n = static_cast<int64_t>(s.tokens.size());
  const int32_t* ctx = s.tokens.data();
  SuffixTree::Path best, path;
  s.tree.speculate(ctx, n, q.max_drafts, config_.suffix_max_spec_factor, config_.suffix_min_token_prob, true, best);
  for (const auto& g : global_) {
    if (g == nullptr) continue;
    g->speculate(ctx, n, q.max_drafts, config_.suffix_max_spec_factor, config_.suffix_min_token_prob, false, path);
    if (path.score > best.score) best = path;
  }
  q.drafts = best.tokens;
  q.scores = best.probs;
}

void SuffixDrafter::ended(SequenceState& base, bool finished) {
  if (!finished || config_.suffix_cache_tokens <= 0) return;
  State& s = static_cast<State&>(base);
  if (static_cast<int64_t>(s.tokens.size()) <= s.num_begin) return;
  Output out;
  out.tokens.assign(s.tokens.begin() + s.num_begin, s.tokens.end());
  outputs_.push_back(std::move(out));
  // Waiting outputs are bounded like the tree: the oldest are dropped unread.
  int64_t waiting = 0;
  for (const Output& o : outputs_) waiting += static_cast<int64_t>(o.tokens.size() - o.next);
  while (waiting > config_.suffix_cache_tokens && outputs_.size() > 1) {
    waiting -= static_cast<int64_t>(outputs_.front().tokens.size() - outputs_.front().next);
    if (outputs_.front().seq >= 0 && global_[0] != nullptr) global_[0]->close_sequence(outputs_.front().seq);
    outputs_.pop_front();
  }
}

void SuffixDrafter::maintain() {
  int64_t budget = config_.index_budget;
  const int64_t half = std::max<int64_t>(1, config_.suffix_cache_tokens / 2);
  while (budget > 0 && !outputs_.empty()) {
    if (global_[0] == nullptr || global_[0]->num_tokens() >= half) {
      // The newer generation is full: it becomes the older one, the older one goes.
      if (global_[0] != nullptr && outputs_.front().seq >= 0) {
        global_[0]->close_sequence(outputs_.front().seq);
        outputs_.front().seq = -1;  // restart this output in the fresh tree
        outputs_.front().next = 0;
      }
      global_[1] = std::move(global_[0]);
      global_[0] = std::make_unique<SuffixTree>(config_.suffix_max_depth);
    }
    Output& o = outputs_.front();
    if (o.seq < 0) o.seq = global_[0]->add_sequence();
    const size_t end = std::min(o.tokens.size(), o.next + static_cast<size_t>(budget));
    for (size_t i = o.next; i < end; ++i) global_[0]->append(o.seq, o.tokens[i]);
    budget -= static_cast<int64_t>(end - o.next);
    o.next = end;
    if (o.next == o.tokens.size()) {
      global_[0]->close_sequence(o.seq);
      outputs_.pop_front();
    }
  }
}

std::pair<int64_t, int64_t> SuffixDrafter::shared_size() const {
  int64_t tokens = 0, bytes = 0;
  for (const auto& g : global_) {
    if (g == nullptr) continue;
    tokens += g->num_tokens();
    bytes += g->bytes();
  }
  for (const Output& o : outputs_) bytes += static_cast<int64_t>(o.tokens.capacity() * sizeof(int32_t));
  return {tokens, bytes};
}

}  // namespace tandem::spec
