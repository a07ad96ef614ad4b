// Host side of the GPU sampler: turns the backend's SampleRows into the flat, device-ready
// arrays SampleArgs points at (kernel_api.h). Header-only, so it needs no build change.
//   rows       one SampleRowDesc per row (params, seed/position split in 32-bit halves)
//   penalties  per row with penalties (has_penalties and a history): its distinct in-vocab
//              history tokens with their counts among the generated ones; prompt-only tokens
//              are listed only when the repetition penalty is on (presence/frequency skip them)
//   bias       each row's (id, value) pairs copied as given (the kernel skips bad ones)
//   masks      each masked row's ceil(vocab / 32) words
//   top_stride max num_top_logprobs (>= 0), clamped to kSampleMaxTopLogprobs
// Buffers are reused across calls; O(history) per row with a vocab-sized stamp array (no
// per-token allocation once the vectors have grown).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "../core/backend.h"
#include "../core/sampler.h"
#include "kernel_api.h"

namespace tandem::gpu {

/**
 * Most top logprobs a row returns on the GPU (the kernel's gather buffer holds at least this
 * many entries on every target); larger requests are clamped here. The OpenAI frontend caps
 * top_logprobs at 20.
 */
inline constexpr int32_t kSampleMaxTopLogprobs = 256;

struct SampleInputs {
  std::vector<SampleRowDesc> rows;
  std::vector<PenaltyEntry> penalties;
  std::vector<int32_t> bias_ids;
  std::vector<float> bias_values;
  std::vector<uint32_t> masks;
  int32_t top_stride = 0;

  /** Rebuilds every array from `rows_in` (n rows of a vocab-sized model). */
  void build(const SampleRow* rows_in, size_t n, int vocab) {
    rows.clear();
    penalties.clear();
    bias_ids.clear();
    bias_values.clear();
    masks.clear();
    top_stride = 0;
    const size_t words = (static_cast<size_t>(vocab) + 31) / 32;
    for (size_t r = 0; r < n; ++r) {
      const SampleRow& s = rows_in[r];
      const SamplingParams& p = s.params;
      SampleRowDesc d;
      d.logit_row = s.logit_row;
      d.top_k = p.top_k;
      d.temperature = p.temperature;
      d.top_p = p.top_p;
      d.min_p = p.min_p;
      d.presence = p.presence_penalty;
      d.frequency = p.frequency_penalty;
      d.repetition = p.repetition_penalty;
      d.seed_lo = static_cast<uint32_t>(p.seed);
      d.seed_hi = static_cast<uint32_t>(p.seed >> 32);
      const uint64_t pos = static_cast<uint64_t>(s.position);
      d.position_lo = static_cast<uint32_t>(pos);
      d.position_hi = static_cast<uint32_t>(pos >> 32);
      d.penalty_offset = static_cast<int32_t>(penalties.size());
      if (has_penalties(p) && s.history != nullptr && s.history_len > 0) add_penalties(s, vocab);
      d.penalty_len = static_cast<int32_t>(penalties.size()) - d.penalty_offset;
      d.bias_offset = static_cast<int32_t>(bias_ids.size());
      d.bias_len = 0;
      if (s.bias_len > 0 && s.bias_ids != nullptr && s.bias_values != nullptr) {
        bias_ids.insert(bias_ids.end(), s.bias_ids, s.bias_ids + s.bias_len);
        bias_values.insert(bias_values.end(), s.bias_values, s.bias_values + s.bias_len);
        d.bias_len = s.bias_len;
      }
      d.mask_offset = -1;
      if (s.allowed != nullptr) {
        d.mask_offset = static_cast<int32_t>(masks.size());
        masks.insert(masks.end(), s.allowed, s.allowed + words);
      }
      d.num_top = s.num_top_logprobs < 0 ? -1 : std::min(s.num_top_logprobs, kSampleMaxTopLogprobs);
      top_stride = std::max(top_stride, d.num_top);
      rows.push_back(d);
    }
  }

 private:
  // stamp_[tok] == generation_: tok already has an entry, at slot_[tok].
  std::vector<uint32_t> stamp_;
  std::vector<int32_t> slot_;
  uint32_t generation_ = 0;

  void add_penalties(const SampleRow& s, int vocab) {
    if (stamp_.size() != static_cast<size_t>(vocab)) {
      stamp_.assign(static_cast<size_t>(vocab), 0);
      slot_.assign(static_cast<size_t>(vocab), 0);
      generation_ = 0;
    }
    if (++generation_ == 0) {
      std::fill(stamp_.begin(), stamp_.end(), 0);
      generation_ = 1;
    }
    const int32_t num_prompt = std::clamp(s.num_prompt, 0, s.history_len);
    // Without the repetition penalty only generated tokens matter.
    const int32_t first = s.params.repetition_penalty != 1.0f ? 0 : num_prompt;
    for (int32_t i = first; i < s.history_len; ++i) {
      const int32_t tok = s.history[i];
      if (tok < 0 || tok >= vocab) continue;
      const size_t t = static_cast<size_t>(tok);
      if (stamp_[t] != generation_) {
        stamp_[t] = generation_;
        slot_[t] = static_cast<int32_t>(penalties.size());
        penalties.push_back(PenaltyEntry{tok, 0});
      }
      if (i >= num_prompt) ++penalties[static_cast<size_t>(slot_[t])].generated;
    }
  }
};

}  // namespace tandem::gpu
