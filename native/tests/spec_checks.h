// Speculative decoding checks, drafter half (native/src/spec/): the n-gram and suffix drafters
// against hand-worked examples, bounded indexing and memory, and the suffix tree's counts against
// a brute-force count over random sequences.
// The engine half is spec_engine_checks.h (it uses engine_test.cc's helpers).
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "check.h"

#include "../src/spec/drafter.h"
#include "../src/spec/ngram_drafter.h"
#include "../src/spec/suffix_tree.h"
#include "../src/spec/verify.h"

namespace spec_test {

using tandem::spec::DraftConfig;
using tandem::spec::DraftMethod;
using tandem::spec::DraftQuery;
using tandem::spec::SuffixTree;

inline std::vector<int32_t> drafts_for(tandem::spec::Drafter& d, int64_t key, const std::vector<int32_t>& fresh, int64_t expected_len,
                                       int32_t max, std::vector<float>* scores = nullptr) {
  std::vector<DraftQuery> q(1);
  q[0].key = key;
  q[0].new_tokens = fresh.data();
  q[0].num_new = static_cast<int32_t>(fresh.size());
  q[0].expected_len = expected_len;
  q[0].max_drafts = max;
  d.propose(q, nullptr);
  if (scores != nullptr) *scores = q[0].scores;
  return q[0].drafts;
}

inline void test_ngram_drafter() {
  DraftConfig c;
  c.method = DraftMethod::kNgram;
  c.ngram_min = 2;
  c.ngram_max = 3;
  c.max_drafts = 6;
  auto d = tandem::spec::make_drafter(c);
  // The header's worked example: [5 6 7 8 | 5 6 7] -> the last 3 ended at position 2, so
  // [8 5 6 7 ...]; past the known end the period (4) repeats.
  const std::vector<int32_t> prompt{5, 6, 7, 8, 5, 6};
  d->begin(1, prompt.data(), static_cast<int32_t>(prompt.size()));
  auto got = drafts_for(*d, 1, {7}, 7, 6);
  CHECK((got == std::vector<int32_t>{8, 5, 6, 7, 8, 5}), "ngram: worked example drafted %zu tokens, first %d", got.size(),
        got.empty() ? -1 : got[0]);
  // The longest n wins: [1 2 9 | 3 2 9 | 1 2 9] ends with "1 2 9" (n = 3 -> after position 2: 3)
  // and "2 9" (n = 2 -> the most recent, position 5: 1).
  d->begin(2, std::vector<int32_t>{1, 2, 9, 3, 2, 9, 1, 2}.data(), 8);
  got = drafts_for(*d, 2, {9}, 9, 1);
  CHECK(got == std::vector<int32_t>{3}, "ngram: longest match did not win (%d)", got.empty() ? -1 : got[0]);
  // Below ngram_min (a single repeated token) nothing is proposed; the current suffix never matches itself.
  d->begin(3, std::vector<int32_t>{4, 8, 1}.data(), 3);
  CHECK(drafts_for(*d, 3, {8}, 4, 4).empty(), "ngram: proposed from a 1-gram below ngram_min");
  // A length the drafter did not see stops its drafts for good.
  CHECK(drafts_for(*d, 1, {8}, 99, 4).empty(), "ngram: drafted after a length mismatch");
  CHECK(drafts_for(*d, 1, {5}, 100, 4).empty(), "ngram: drafted again after a mismatch");
  // An ended sequence and an unknown key get nothing.
  d->end(2, true);
  CHECK(drafts_for(*d, 2, {3}, 10, 4).empty(), "ngram: drafted for an ended sequence");
  // Bounded indexing: a 40-token prompt at budget 16 drafts only once indexed (third step).
  c.index_budget = 16;
  auto slow = tandem::spec::make_drafter(c);
  std::vector<int32_t> long_prompt;
  for (int i = 0; i < 40; ++i) long_prompt.push_back(i % 10);
  slow->begin(7, long_prompt.data(), 40);
  CHECK(drafts_for(*slow, 7, {0}, 41, 3).empty(), "ngram: drafted before its index caught up (step 1)");
  CHECK(drafts_for(*slow, 7, {1}, 42, 3).empty(), "ngram: drafted before its index caught up (step 2)");
  got = drafts_for(*slow, 7, {2}, 43, 3);
  CHECK((got == std::vector<int32_t>{3, 4, 5}), "ngram: no drafts once the index caught up (%zu)", got.size());
}

inline void test_suffix_tree() {
  // Counts against brute force over random sequences of a small alphabet (many repeats,
  // splits inside edges, leaves growing in place), several sequences per tree.
  std::mt19937 rng(5);
  for (int trial = 0; trial < 60; ++trial) {
    const int depth = 2 + trial % 7;
    const int alphabet = 2 + trial % 4;
    SuffixTree t(depth);
    const int seqs = 1 + trial % 3;
    for (int s = 0; s < seqs; ++s) {
      const int32_t id = t.add_sequence();
      const int len = 1 + static_cast<int>(rng() % 40);
      for (int i = 0; i < len; ++i) t.append(id, static_cast<int32_t>(rng() % alphabet));
      if (trial % 2 == 0) t.close_sequence(id);
    }
    CHECK(t.check_invariants(), "suffix tree: counts disagree with brute force (trial %d, depth %d)", trial, depth);
  }
  // The header's worked example.
  SuffixTree t(4);
  const int32_t s = t.add_sequence();
  for (int32_t tok : {1, 2, 3, 1, 2, 4}) t.append(s, tok);
  CHECK(t.check_invariants(), "suffix tree: worked example counts");
  SuffixTree::Path p;
  const std::vector<int32_t> ctx{9, 1, 2};
  t.speculate(ctx.data(), 3, 4, 1.0f, 0.0f, false, p);
  CHECK(p.match_len == 2 && p.tokens.size() == 2 && p.tokens[0] == 3 && std::fabs(p.probs[0] - 0.5f) < 1e-6f,
        "suffix tree: 'a b' should continue with 3 at p 1/2 (match %d, %zu tokens)", p.match_len, p.tokens.size());
  // Own occurrence excluded: context = the sequence's own end "1 2 4": only the earlier ... 2 -> 3.
  SuffixTree own(4);
  const int32_t o = own.add_sequence();
  for (int32_t tok : {1, 2, 3, 1, 2}) own.append(o, tok);
  const std::vector<int32_t> self_ctx{1, 2, 3, 1, 2};
  own.speculate(self_ctx.data(), 5, 3, 1.0f, 0.1f, true, p);
  CHECK(!p.tokens.empty() && p.tokens[0] == 3 && p.probs[0] == 1.0f, "suffix tree: own occurrence not excluded");
  // The probability floor shortens the draft: four continuations of "7" at 1/4 each stop at 0.3.
  SuffixTree wide(4);
  const int32_t w = wide.add_sequence();
  for (int32_t tok : {7, 1, 7, 2, 7, 3, 7, 4}) wide.append(w, tok);
  const std::vector<int32_t> seven{7};
  wide.speculate(seven.data(), 1, 4, 4.0f, 0.3f, false, p);
  CHECK(p.tokens.empty(), "suffix tree: drafted past the probability floor");
}

inline void test_suffix_drafter() {
  DraftConfig c;
  c.method = DraftMethod::kSuffix;
  c.max_drafts = 8;
  c.suffix_max_depth = 8;
  c.suffix_min_token_prob = 0.5f;
  c.suffix_max_spec_factor = 2.0f;
  auto d = tandem::spec::make_drafter(c);
  // Per request: the prompt repeats "10 11 12 13"; after "10 11" the drafter proposes "12 13 ...".
  const std::vector<int32_t> prompt{10, 11, 12, 13, 50, 10, 11, 12, 13, 51, 10};
  d->begin(1, prompt.data(), static_cast<int32_t>(prompt.size()));
  std::vector<float> scores;
  auto got = drafts_for(*d, 1, {11}, 12, 8, &scores);
  CHECK(got.size() >= 2 && got[0] == 12 && got[1] == 13, "suffix: per-request continuation (%zu drafts)", got.size());
  CHECK(!scores.empty() && scores[0] > 0.5f && scores[0] <= 1.0f, "suffix: scores are probabilities");
  // Global: a finished request's output teaches another request its continuation.
  d->begin(2, std::vector<int32_t>{1, 2}.data(), 2);
  drafts_for(*d, 2, {30, 31, 32, 33, 34}, 7, 0);
  d->end(2, true);
  d->begin(3, std::vector<int32_t>{99, 98}.data(), 2);
  drafts_for(*d, 3, {}, 2, 0);  // applies the end and fills the global tree
  got = drafts_for(*d, 3, {30, 31}, 4, 8);
  CHECK(got.size() >= 2 && got[0] == 32 && got[1] == 33, "suffix: global tree did not continue another request's output (%zu)", got.size());
  CHECK(d->stats().shared_tokens == 5, "suffix: global tree holds %lld tokens, expected 5", static_cast<long long>(d->stats().shared_tokens));
  // Bounded: a cache of 8 tokens keeps at most two halves of 4.
  c.suffix_cache_tokens = 8;
  auto small = tandem::spec::make_drafter(c);
  for (int r = 0; r < 6; ++r) {
    small->begin(r, std::vector<int32_t>{1}.data(), 1);
    drafts_for(*small, r, {2, 3, 4, 5, 6}, 6, 0);
    small->end(r, true);
  }
  small->begin(100, std::vector<int32_t>{1}.data(), 1);
  drafts_for(*small, 100, {}, 1, 0);
  CHECK(small->stats().shared_tokens <= 10, "suffix: global tree grew past its bound (%lld)", static_cast<long long>(small->stats().shared_tokens));
}

inline void test_expand_verify() {
  // A prefill chunk (no logits), a decode, a verify of 3 drafts, and a 5-token sequence with
  // logits at its last 2: the device plan's sequences after expansion.
  const int32_t table[] = {4, 5, 6};
  tandem::ForwardBatch b;
  b.num_tokens = 4 + 1 + 4 + 5;
  auto add = [&](int32_t off, int32_t n, int32_t start, bool logits, int32_t rows) {
    tandem::ForwardSeq f;
    f.token_offset = off;
    f.num_tokens = n;
    f.start_pos = start;
    f.block_table = table;
    f.num_blocks = 3;
    f.want_logits = logits;
    f.num_logits = rows;
    b.seqs.push_back(f);
  };
  add(0, 4, 0, false, 1);
  add(4, 1, 7, true, 1);
  add(5, 4, 10, true, 4);
  add(9, 5, 20, true, 2);
  b.num_logit_rows = 1 + 4 + 2;
  tandem::ForwardBatch scratch;
  const tandem::ForwardBatch& e = tandem::spec::expand_verify(b, scratch);
  // prefill, decode, 4 verify rows, then the lead (3 tokens, no logits) and 2 single rows.
  std::vector<std::vector<int32_t>> got;
  for (const auto& f : e.seqs) got.push_back({f.token_offset, f.num_tokens, f.start_pos, f.want_logits ? 1 : 0});
  const std::vector<std::vector<int32_t>> want = {{0, 4, 0, 0}, {4, 1, 7, 1}, {5, 1, 10, 1}, {6, 1, 11, 1}, {7, 1, 12, 1}, {8, 1, 13, 1},
                                                  {9, 3, 20, 0}, {12, 1, 23, 1}, {13, 1, 24, 1}};
  CHECK(got == want, "expand_verify: %zu sequences", got.size());
  CHECK(e.num_logit_rows == 7 && e.num_tokens == 14, "expand_verify: rows %d tokens %d", e.num_logit_rows, e.num_tokens);
  tandem::ForwardBatch plain;
  plain.seqs = {b.seqs[0], b.seqs[1]};
  CHECK(&tandem::spec::expand_verify(plain, scratch) == &plain, "expand_verify: a batch without verify rows is not copied");
}

}  // namespace spec_test

