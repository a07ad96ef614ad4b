// DrafterBase: what every model-free drafter shares. Per-sequence state keyed by the caller's
// id, begin()/end() queued under a mutex and applied on the step thread, the length check that
// stops drafting for a sequence whose tokens this side did not see, the per-step index budget,
// and propose() threaded over the batch. A drafter supplies its state (new_state), how it
// indexes (index) and how it drafts (draft).
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "drafter.h"

namespace tandem::spec {

struct SequenceState {
  virtual ~SequenceState() = default;
  std::vector<int32_t> tokens;  // prompt + output, as the drafter saw them
  int64_t num_begin = 0;        // tokens given at begin(): the rest is output
  int64_t indexed = 0;          // tokens [0, indexed) are in the state's index (the drafter's meaning)
  bool broken = false;          // a length mismatch: no more drafts for this sequence
  virtual int64_t bytes() const { return static_cast<int64_t>(tokens.capacity() * sizeof(int32_t)); }
};

class DrafterBase : public Drafter {
 public:
  explicit DrafterBase(const DraftConfig& config) : config_(config) {}
  void begin(int64_t key, const int32_t* tokens, int32_t n) override;
  void end(int64_t key, bool finished) override;
  void propose(std::vector<DraftQuery>& queries, ThreadPool* pool) override;
  DrafterStats stats() const override;

 protected:
  virtual std::unique_ptr<SequenceState> new_state() const = 0;
  /**
   * Indexes state.tokens from state.indexed, at most `budget` tokens; true once the index is
   * caught up (what drafting needs). A long prompt is indexed over several steps.
   */
  virtual bool index(SequenceState& state, int64_t budget) const = 0;
  /** Drafts up to q.max_drafts after state.tokens (fully indexed) into q.drafts / q.scores. */
  virtual void draft(const SequenceState& state, DraftQuery& q) const = 0;
  /** A sequence ended (on the step thread, before its state is dropped). */
  virtual void ended(SequenceState& /*state*/, bool /*finished*/) {}
  /** Once per propose(), before drafting: shared upkeep (the suffix drafter's global tree). */
  virtual void maintain() {}
  /** Tokens and bytes of shared state, for stats(). */
  virtual std::pair<int64_t, int64_t> shared_size() const { return {0, 0}; }

  const DraftConfig config_;

 private:
  struct Pending {
    bool is_begin = false;
    int64_t key = 0;
    bool finished = false;
    std::vector<int32_t> tokens;
  };
  void apply_pending();

  std::mutex mu_;  // pending_ only
  std::deque<Pending> pending_;
  // Touched only on the step thread (propose), so drafting needs no lock.
  std::unordered_map<int64_t, std::unique_ptr<SequenceState>> states_;
  std::vector<SequenceState*> work_;
  std::vector<int32_t> work_query_;
  std::atomic<int64_t> stat_sequences_{0}, stat_indexed_{0}, stat_bytes_{0}, stat_shared_tokens_{0}, stat_shared_bytes_{0};
};

}  // namespace tandem::spec
