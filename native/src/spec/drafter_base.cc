#include "drafter_base.h"

#include <algorithm>

#include "../core/error.h"
#include "../core/thread_pool.h"
#include "ngram_drafter.h"
#include "suffix_drafter.h"

namespace tandem::spec {

void check_draft_config(const DraftConfig& c) {
  auto bad = [](const std::string& what) { throw NativeError(ErrorCode::kInvalidArgument, "speculative: " + what); };
  if (c.max_drafts < 1 || c.max_drafts > 64) bad("numSpeculativeTokens must be in [1, 64]");
  if (c.ngram_min < 1 || c.ngram_max < c.ngram_min || c.ngram_max > 64) {
    bad("promptLookupMin/Max must satisfy 1 <= min <= max <= 64");
  }
  if (c.suffix_max_depth < 2 || c.suffix_max_depth > 256) bad("suffixMaxDepth must be in [2, 256]");
  if (!(c.suffix_max_spec_factor > 0.0f)) bad("suffixMaxSpecFactor must be > 0");
  if (!(c.suffix_min_token_prob >= 0.0f && c.suffix_min_token_prob <= 1.0f)) bad("suffixMinTokenProb must be in [0, 1]");
  if (c.suffix_cache_tokens < 0) bad("suffixCacheTokens must be >= 0");
  if (c.index_budget < 1) bad("indexBudget must be >= 1");
}

DraftMethod parse_draft_method(const std::string& name) {
  if (name == "ngram") return DraftMethod::kNgram;
  if (name == "suffix") return DraftMethod::kSuffix;
  throw NativeError(ErrorCode::kInvalidArgument, "speculative: method must be 'ngram' or 'suffix', not '" + name + "'");
}

std::unique_ptr<Drafter> make_drafter(const DraftConfig& config) {
  check_draft_config(config);
  if (config.method == DraftMethod::kSuffix) return std::make_unique<SuffixDrafter>(config);
  return std::make_unique<NgramDrafter>(config);
}

void DrafterBase::begin(int64_t key, const int32_t* tokens, int32_t n) {
  Pending p;
  p.is_begin = true;
  p.key = key;
  p.tokens.assign(tokens, tokens + std::max(0, n));
  std::lock_guard<std::mutex> lock(mu_);
  pending_.push_back(std::move(p));
}

void DrafterBase::end(int64_t key, bool finished) {
  Pending p;
  p.key = key;
  p.finished = finished;
  std::lock_guard<std::mutex> lock(mu_);
  pending_.push_back(std::move(p));
}

void DrafterBase::apply_pending() {
  std::deque<Pending> ops;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ops.swap(pending_);
  }
  for (Pending& p : ops) {
    if (p.is_begin) {
      auto state = new_state();
      state->tokens = std::move(p.tokens);
      state->num_begin = static_cast<int64_t>(state->tokens.size());
      states_[p.key] = std::move(state);
      continue;
    }
    auto it = states_.find(p.key);
    if (it == states_.end()) continue;
    ended(*it->second, p.finished && !it->second->broken);
    states_.erase(it);
  }
}

void DrafterBase::propose(std::vector<DraftQuery>& queries, ThreadPool* pool) {
  apply_pending();
  maintain();
  work_.clear();
  work_query_.clear();
  for (size_t i = 0; i < queries.size(); ++i) {
    DraftQuery& q = queries[i];
    q.drafts.clear();
    q.scores.clear();
    auto it = states_.find(q.key);
    if (it == states_.end()) continue;
    SequenceState& s = *it->second;
    if (s.broken) continue;
    // The caller's view of the sequence must be ours plus the new tokens; anything else (a
    // step whose tokens we never saw) would make every later draft wrong.
    if (static_cast<int64_t>(s.tokens.size()) + q.num_new != q.expected_len) {
      s.broken = true;
      continue;
    }
    s.tokens.insert(s.tokens.end(), q.new_tokens, q.new_tokens + q.num_new);
    if (q.max_drafts <= 0) continue;
    work_.push_back(&s);
    work_query_.push_back(static_cast<int32_t>(i));
  }
  auto run = [&](int64_t b, int64_t e, int) {
    for (int64_t w = b; w < e; ++w) {
      SequenceState& s = *work_[static_cast<size_t>(w)];
      DraftQuery& q = queries[static_cast<size_t>(work_query_[static_cast<size_t>(w)])];
      // A long prompt is indexed over several steps; drafts start once it is caught up.
      if (!index(s, config_.index_budget)) continue;
      q.max_drafts = std::min(q.max_drafts, config_.max_drafts);
      draft(s, q);
    }
  };
  const int64_t n = static_cast<int64_t>(work_.size());
  if (pool != nullptr && n > 1) {
    pool->parallel_for(n, 1, run);
  } else if (n > 0) {
    run(0, n, 0);
  }
  int64_t indexed = 0, bytes = 0;
  for (const auto& [key, s] : states_) {
    indexed += s->indexed;
    bytes += s->bytes();
  }
  const auto [shared_tokens, shared_bytes] = shared_size();
  stat_sequences_.store(static_cast<int64_t>(states_.size()), std::memory_order_relaxed);
  stat_indexed_.store(indexed, std::memory_order_relaxed);
  stat_bytes_.store(bytes + shared_bytes, std::memory_order_relaxed);
  stat_shared_tokens_.store(shared_tokens, std::memory_order_relaxed);
}

DrafterStats DrafterBase::stats() const {
  DrafterStats s;
  s.sequences = stat_sequences_.load(std::memory_order_relaxed);
  s.indexed_tokens = stat_indexed_.load(std::memory_order_relaxed);
  s.shared_tokens = stat_shared_tokens_.load(std::memory_order_relaxed);
  s.bytes = stat_bytes_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace tandem::spec
