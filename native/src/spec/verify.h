// The verify step of speculative decoding, inside Engine::step. A sequence with k drafts
// brings [last token, d1 .. dk]; the forward pass computes logits after each of them (k + 1
// rows, ForwardSeq::num_logits), and each row is sampled exactly as a plain decode would sample
// that position: penalties over the history plus the drafts before it, the same logit bias, its
// own structured-output mask row, the draw uniform(seed, position). Then:
//
//   accepted a = the first j with sampled[j] != d(j+1) (k when every draft matched)
//   returned   = sampled[0 .. a]: the accepted drafts, then the token sampled after them
//
// Why this is exact: row j's sample is what plain decoding would draw at that position given
// the accepted prefix (the same logits, up to the batch-shape rounding every step has, and the
// same uniform), so greedy output is identical, and a seeded request returns the very tokens it
// would without speculation. It is also rejection sampling with a deterministic proposal: the
// draft d is accepted with probability p(d), and on rejection the returned token is a draw from p
// with d removed and renormalised: the target distribution, position by position.
#pragma once

#include <cstdint>
#include <vector>

#include "../core/backend.h"
#include "../core/engine.h"

namespace tandem::spec {

/** Most drafts one sequence may bring to a step. */
inline constexpr int32_t kMaxVerifyDrafts = 64;

/** The accepted prefix: the first j < k with sampled[j] != drafts[j], else k. */
inline int32_t accepted_drafts(const int32_t* sampled, const int32_t* drafts, int32_t k) {
  int32_t a = 0;
  while (a < k && sampled[a] == drafts[a]) ++a;
  return a;
}

/** Where each sampled sequence's rows sit, and the histories its penalties read. */
class VerifyRows {
 public:
  struct History {
    const int32_t* tokens = nullptr;
    int32_t len = 0;
  };
  void build(const StepInput& in, const std::vector<size_t>& sampled);
  /** History of sampled sequence r at its row j: its history, then drafts d1 .. dj. */
  History history(const StepInput& in, size_t r, int32_t j) const;
  /** Accepts each sequence's drafts against its sampled rows and fills out's tokens and emitted. */
  void accept(const StepInput& in, const std::vector<size_t>& sampled, const SampledRows& rows, StepOutput& out) const;

  std::vector<int32_t> first_row;  // per sampled sequence

 private:
  std::vector<int32_t> history_at_;  // per sampled sequence: offset into history_, -1 = in.history
  std::vector<int32_t> history_offset_, history_len_;  // per sampled sequence: its own history
  std::vector<int32_t> history_;     // histories extended by drafts
};

/**
 * Device plans (GPU backend): a sequence that wants logits at several positions becomes its
 * leading tokens (no logits) plus one single-token sequence per logit row, over the same block
 * table. Single-token sequences are what the decode path (split-KV attention, CUDA graphs)
 * runs; each attends over [0, its position], which includes the earlier drafts whose K/V the
 * same step wrote first. The step plan takes such rows as one decode span (cuda/step_plan.h), whose
 * attention reads the context once for all of them. Returns `in` itself when no sequence has
 * num_logits > 1.
 */
const ForwardBatch& expand_verify(const ForwardBatch& in, ForwardBatch& scratch);

}  // namespace tandem::spec
