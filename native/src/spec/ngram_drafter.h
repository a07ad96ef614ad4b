// NgramDrafter: prompt lookup (vLLM's "ngram" method). The last n tokens of the sequence, for
// n from ngram_max down to ngram_min, are looked up among earlier positions of its prompt +
// output; the tokens that followed the most recent earlier occurrence are proposed.
//
// Cost: an index from hash(n-gram) to the most recent position it ended at, grown as tokens
// arrive (ngram_max - ngram_min + 1 inserts per token), so a step's lookup is O(ngram_max) per n
// whatever the prompt's length; vLLM's rescan of the whole sequence every step is what made its
// n-gram drafting expensive for long prompts.
//
// Worked example (n = 2..3): tokens [5 6 7 8 | 5 6 7], last 3 = [5 6 7] ended at position 2
// before, so the drafts are tokens 3.. = [8 5 6 ...]; past the known end they wrap around the
// period the match implies (here 4: position 7 repeats position 3), which is what continues a
// greedy cycle.
#pragma once

#include "drafter_base.h"
#include "flat_map.h"

namespace tandem::spec {

class NgramDrafter final : public DrafterBase {
 public:
  explicit NgramDrafter(const DraftConfig& config) : DrafterBase(config) {}
  const char* name() const override { return "ngram"; }

 protected:
  struct State : SequenceState {
    FlatMap last_end;  // hash(n, n-gram) -> most recent position it ended at
    int64_t bytes() const override { return SequenceState::bytes() + static_cast<int64_t>(last_end.bytes()); }
  };
  std::unique_ptr<SequenceState> new_state() const override { return std::make_unique<State>(); }
  bool index(SequenceState& state, int64_t budget) const override;
  void draft(const SequenceState& state, DraftQuery& q) const override;

 private:
  static uint64_t key_of(const int32_t* tokens, int32_t n);
};

}  // namespace tandem::spec
