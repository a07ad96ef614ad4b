// SuffixDrafter: suffix decoding (vLLM's "suffix" method, from Snowflake's Arctic Inference).
// Two kinds of suffix tree (suffix_tree.h):
//   per request  its prompt + output, fed as tokens arrive (index budget per step);
//   global       the outputs of recently finished requests, bounded by suffix_cache_tokens:
//                two generations of half the bound each; when the newer one fills, the older
//                one is dropped whole (no per-node removal, and memory stays bounded).
// Each step the longest useful match is looked up in both, and the path that promises more
// accepted tokens is proposed, as long as its estimated probability stays above
// suffix_min_token_prob and it is at most suffix_max_spec_factor x the match's length.
#pragma once

#include <deque>
#include <memory>

#include "drafter_base.h"
#include "suffix_tree.h"

namespace tandem::spec {

class SuffixDrafter final : public DrafterBase {
 public:
  explicit SuffixDrafter(const DraftConfig& config);
  const char* name() const override { return "suffix"; }

 protected:
  struct State : SequenceState {
    explicit State(int32_t depth) : tree(depth) { tree.add_sequence(); }
    SuffixTree tree;
    int64_t bytes() const override { return SequenceState::bytes() + tree.bytes(); }
  };
  std::unique_ptr<SequenceState> new_state() const override { return std::make_unique<State>(config_.suffix_max_depth); }
  bool index(SequenceState& state, int64_t budget) const override;
  void draft(const SequenceState& state, DraftQuery& q) const override;
  void ended(SequenceState& state, bool finished) override;
  void maintain() override;
  std::pair<int64_t, int64_t> shared_size() const override;

 private:
  // The global trees: [0] newer (filling), [1] older (read only); either may be null.
  std::unique_ptr<SuffixTree> global_[2];
  struct Output {
    std::vector<int32_t> tokens;
    size_t next = 0;  // tokens inserted so far
    int32_t seq = -1;
  };
  std::deque<Output> outputs_;  // finished outputs waiting to enter the global tree
};

}  // namespace tandem::spec
