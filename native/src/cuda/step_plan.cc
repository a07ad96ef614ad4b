#include "step_plan.h"

#include <algorithm>
#include <cstring>

namespace tandem::gpu {
namespace {

int64_t round4(int64_t n) { return (n + 3) / 4 * 4; }

}  // namespace

int32_t choose_decode_splits(int32_t num_decode, int32_t num_kv_heads, int32_t max_kv_len, int32_t sm_count,
                             int32_t max_splits) {
  if (num_decode <= 0) return 1;
  const int64_t blocks = static_cast<int64_t>(num_decode) * std::max(1, num_kv_heads);
  int64_t splits = (2 * static_cast<int64_t>(std::max(1, sm_count)) + blocks - 1) / blocks;
  splits = std::min<int64_t>(splits, std::max(1, max_splits));
  splits = std::min<int64_t>(splits, std::max<int64_t>(1, (max_kv_len + kAttentionChunk - 1) / kAttentionChunk));
  return static_cast<int32_t>(std::max<int64_t>(1, splits));
}

int32_t span_bucket(int32_t max_span, int32_t span_tokens) {
  int32_t b = 1;
  while (b < max_span) b *= 2;
  return std::max(max_span, std::min(b, std::max(1, span_tokens)));
}

void plan_step(const ForwardBatch& batch, const PlanOptions& o, StepPlan& p) {
  const int32_t real_seqs = static_cast<int32_t>(batch.seqs.size());
  bool decode_only = real_seqs > 0;
  for (const ForwardSeq& s : batch.seqs) decode_only &= s.num_tokens == 1 && s.want_logits;
  const int32_t num_seqs = o.pad_to > 0 ? std::max(o.pad_to, real_seqs) : real_seqs;
  const int32_t num_tokens = batch.num_tokens + (num_seqs - real_seqs);

  int64_t table_entries = 0;
  int32_t prefill_items = 0, decode = 0, logit_rows = 0, max_kv = 0;
  for (const ForwardSeq& s : batch.seqs) {
    const int32_t needed = (s.start_pos + s.num_tokens + o.block_size - 1) / o.block_size;
    table_entries += o.table_width > 0 ? o.table_width : needed;
    if (s.num_tokens == 1) {
      ++decode;
      max_kv = std::max(max_kv, s.start_pos + 1);
    } else {
      prefill_items += (s.num_tokens + o.tile_tokens - 1) / o.tile_tokens;
    }
    logit_rows += s.want_logits;
  }
  if (o.table_width > 0) table_entries += static_cast<int64_t>(num_seqs - real_seqs) * o.table_width;
  // Padded sequences want logits too (decode-only graphs compute every row); they are not sampled.
  if (num_seqs > real_seqs) logit_rows += num_seqs - real_seqs;

  StepLayout& L = p.layout;
  int64_t at = 0;
  L.tokens = at;
  at += round4(num_tokens);
  L.positions = at;
  at += round4(num_tokens);
  L.slots = at;
  at += round4(num_tokens);
  L.seqs = at;
  at += 4 * static_cast<int64_t>(num_seqs);
  L.block_tables = at;
  at += round4(table_entries);
  L.prefill_items = at;
  at += 4 * static_cast<int64_t>(prefill_items);
  L.decode_seqs = at;
  at += round4(num_seqs);  // padded decode entries included when padding
  L.logit_rows = at;
  at += round4(logit_rows);
  L.decode_spans = at;
  at += round4(num_seqs);
  L.total = at;

  p.num_tokens = num_tokens;
  p.num_seqs = num_seqs;
  p.num_logit_rows = logit_rows;
  p.num_prefill_items = prefill_items;
  p.num_decode = decode + (num_seqs - real_seqs);
  p.max_kv_len = max_kv;
  p.decode_only = decode_only;
  p.image.assign(static_cast<size_t>(L.total), 0);
  int32_t* img = p.image.data();

  int32_t table_at = 0, item_at = 0, decode_at = 0, logit_at = 0;
  int32_t span_lead = -1, spans = 0, max_span = 1;  // the open span's leading decode entry
  const ForwardSeq* prev = nullptr;                 // the sequence planned just before
  for (int32_t i = 0; i < real_seqs; ++i) {
    const ForwardSeq& s = batch.seqs[static_cast<size_t>(i)];
    const int32_t needed = (s.start_pos + s.num_tokens + o.block_size - 1) / o.block_size;
    for (int32_t k = 0; k < s.num_tokens; ++k) {
      const int32_t row = s.token_offset + k, pos = s.start_pos + k;
      img[L.tokens + row] = batch.tokens[row];
      img[L.positions + row] = pos;
      img[L.slots + row] = s.block_table[pos / o.block_size] * o.block_size + pos % o.block_size;
    }
    SeqDesc d;
    d.token_offset = s.token_offset;
    d.num_tokens = s.num_tokens;
    d.start_pos = s.start_pos;
    d.table_offset = table_at;
    std::memcpy(img + L.seqs + 4 * i, &d, sizeof(d));
    std::memcpy(img + L.block_tables + table_at, s.block_table, sizeof(int32_t) * static_cast<size_t>(needed));
    table_at += o.table_width > 0 ? o.table_width : needed;
    if (s.num_tokens == 1) {
      // The span goes on while this row is the previous one's next token over the same table.
      int32_t* lead = span_lead >= 0 ? img + L.decode_spans + span_lead : nullptr;
      const bool extends = lead != nullptr && prev != nullptr && prev->num_tokens == 1 &&
                           s.block_table == prev->block_table && s.start_pos == prev->start_pos + 1 &&
                           s.token_offset == prev->token_offset + 1 && *lead < o.span_tokens;
      if (extends) {
        max_span = std::max(max_span, ++*lead);
        img[L.decode_spans + decode_at] = 0;
      } else {
        span_lead = decode_at;
        img[L.decode_spans + decode_at] = 1;
        ++spans;
      }
      img[L.decode_seqs + decode_at++] = i;
    } else {
      span_lead = -1;
      for (int32_t first = 0; first < s.num_tokens; first += o.tile_tokens) {
        PrefillItem it;
        it.seq = i;
        it.first = first;
        it.count = std::min(o.tile_tokens, s.num_tokens - first);
        std::memcpy(img + L.prefill_items + 4 * item_at++, &it, sizeof(it));
      }
    }
    if (s.want_logits) img[L.logit_rows + logit_at++] = s.token_offset + s.num_tokens - 1;
    prev = &s;
  }
  // Padding: one activation row each, slot -1 (the pool is not written). They run as decode
  // sequences at position 0 over table entry 0, so a graph's grid has a fixed size; what they
  // read and compute lands in their own rows only, which are never sampled.
  for (int32_t i = real_seqs; i < num_seqs; ++i) {
    const int32_t row = batch.num_tokens + (i - real_seqs);
    img[L.tokens + row] = 0;
    img[L.positions + row] = 0;
    img[L.slots + row] = -1;
    SeqDesc d;
    d.token_offset = row;
    d.num_tokens = 0;
    d.start_pos = 0;
    d.table_offset = table_at;
    std::memcpy(img + L.seqs + 4 * i, &d, sizeof(d));
    table_at += o.table_width;
    img[L.decode_spans + decode_at] = 1;
    img[L.decode_seqs + decode_at++] = i;
    img[L.logit_rows + logit_at++] = row;
  }
  p.num_spans = spans;
  p.max_span = max_span;
  // Splits fill the device with the spans' blocks: the rows inside a span run in their leader's.
  p.num_splits = o.force_splits > 0 ? o.force_splits
                                    : choose_decode_splits(spans, o.num_kv_heads, max_kv, o.sm_count, o.max_splits);
}

}  // namespace tandem::gpu
