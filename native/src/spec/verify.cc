#include "verify.h"

#include <algorithm>
#include <cmath>

namespace tandem::spec {

void VerifyRows::build(const StepInput& in, const std::vector<size_t>& sampled) {
  first_row.assign(sampled.size(), 0);
  history_at_.assign(sampled.size(), -1);
  history_offset_.assign(sampled.size(), 0);
  history_len_.assign(sampled.size(), 0);
  history_.clear();
  int32_t row = 0;
  for (size_t r = 0; r < sampled.size(); ++r) {
    const SeqInput& s = in.seqs[sampled[r]];
    first_row[r] = row;
    row += s.num_drafts + 1;
    history_offset_[r] = s.history_offset;
    history_len_[r] = s.history_len;
    if (s.num_drafts == 0 || s.history_len == 0) continue;
    history_at_[r] = static_cast<int32_t>(history_.size());
    const int32_t* h = in.history.data() + s.history_offset;
    history_.insert(history_.end(), h, h + s.history_len);
    const int32_t* drafts = in.tokens.data() + s.token_offset + s.num_tokens - s.num_drafts;
    history_.insert(history_.end(), drafts, drafts + s.num_drafts);
  }
}

VerifyRows::History VerifyRows::history(const StepInput& in, size_t r, int32_t j) const {
  History h;
  h.len = history_len_[r] + j;
  h.tokens = history_at_[r] < 0 ? in.history.data() + history_offset_[r] : history_.data() + history_at_[r];
  return h;
}

void VerifyRows::accept(const StepInput& in, const std::vector<size_t>& sampled, const SampledRows& rows, StepOutput& out) const {
  const int32_t stride = rows.top_stride;
  out.top_stride = stride;
  out.emitted.assign(sampled.size(), 1);
  out.tokens.clear();
  out.logprobs.clear();
  out.top_ids.clear();
  out.top_logprobs.clear();
  for (size_t r = 0; r < sampled.size(); ++r) {
    const SeqInput& s = in.seqs[sampled[r]];
    const int32_t first = first_row[r];
    const int32_t* drafts = in.tokens.data() + s.token_offset + s.num_tokens - s.num_drafts;
    const int32_t a = accepted_drafts(rows.tokens.data() + first, drafts, s.num_drafts);
    out.emitted[r] = a + 1;
    for (int32_t j = first; j <= first + a; ++j) {
      out.tokens.push_back(rows.tokens[static_cast<size_t>(j)]);
      out.logprobs.push_back(rows.logprobs[static_cast<size_t>(j)]);
      const auto b = static_cast<int64_t>(j) * stride;
      out.top_ids.insert(out.top_ids.end(), rows.top_ids.begin() + b, rows.top_ids.begin() + b + stride);
      out.top_logprobs.insert(out.top_logprobs.end(), rows.top_logprobs.begin() + b, rows.top_logprobs.begin() + b + stride);
    }
  }
}

const ForwardBatch& expand_verify(const ForwardBatch& in, ForwardBatch& scratch) {
  bool any = false;
  for (const ForwardSeq& s : in.seqs) any |= s.want_logits && s.num_logits > 1;
  if (!any) return in;
  scratch.tokens = in.tokens;
  scratch.num_tokens = in.num_tokens;
  scratch.num_logit_rows = in.num_logit_rows;
  scratch.seqs.clear();
  for (const ForwardSeq& s : in.seqs) {
    const int32_t rows = s.want_logits ? std::min(s.num_logits, s.num_tokens) : 0;
    if (rows <= 1) {
      scratch.seqs.push_back(s);
      continue;
    }
    const int32_t lead = s.num_tokens - rows;
    if (lead > 0) {
      ForwardSeq head = s;
      head.num_tokens = lead;
      head.want_logits = false;
      head.num_logits = 1;
      scratch.seqs.push_back(head);
    }
    for (int32_t j = 0; j < rows; ++j) {
      ForwardSeq one = s;
      one.token_offset = s.token_offset + lead + j;
      one.num_tokens = 1;
      one.start_pos = s.start_pos + lead + j;
      one.num_logits = 1;
      scratch.seqs.push_back(one);
    }
  }
  return scratch;
}

}  // namespace tandem::spec
