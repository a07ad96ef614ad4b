// StepPlan: the host half of a GPU step (FlashInfer's plan/run split). From a ForwardBatch it
// derives every per-step table the kernels read (token ids, positions, pool slots, sequence
// descriptors, block tables, prefill tiles, decode sequences, logit rows) and packs them into
// one int32 image, so a step costs one host-to-device copy. Pure: no device, no allocation
// beyond its own vectors (reused between steps).
//
// Padding for CUDA graphs: a decode-only batch of n sequences can be planned at a padded size
// p >= n, with every block table padded to a fixed width, so the same graph replays for any
// n <= p. Padded rows get token 0, position 0 and slot -1 (nothing is written to the pool);
// their outputs stay in their own rows, and their logits are never sampled.
//
// Decode spans: a speculative verify step arrives expanded (spec::expand_verify) as one
// single-token sequence per drafted position, consecutive rows and positions over one block
// table. Planned as a span, their attention runs in the same blocks, which read each K/V chunk
// once for all of the span's rows (multi-query decode attention) instead of once per row.
#pragma once

#include <cstdint>
#include <vector>

#include "../core/backend.h"
#include "kernel_api.h"

namespace tandem::gpu {

/** Offsets (in int32 elements, each a multiple of 4) of the tables inside the packed image. */
struct StepLayout {
  int64_t tokens = 0, positions = 0, slots = 0, seqs = 0, block_tables = 0, prefill_items = 0, decode_seqs = 0,
          logit_rows = 0, decode_spans = 0, total = 0;
};

struct StepPlan {
  int32_t num_tokens = 0;     // rows of the activations (padded rows included)
  int32_t num_seqs = 0;
  int32_t num_logit_rows = 0; // rows the lm_head computes (padded rows included)
  int32_t num_prefill_items = 0;
  int32_t num_decode = 0;
  int32_t num_splits = 1;
  int32_t max_kv_len = 0;     // longest context among decode sequences
  int32_t num_spans = 0;      // the real decode entries' spans (padding not counted): num_decode without verify rows
  int32_t max_span = 1;       // a bound on every span (the backend rounds it up for a graph's launch)
  bool decode_only = false;   // every sequence has one new token and wants logits
  StepLayout layout;
  std::vector<int32_t> image;  // the packed tables, layout.total elements
};

struct PlanOptions {
  int32_t block_size = 16;
  int32_t tile_tokens = 1;      // attention_tile_tokens(group, head_dim)
  int32_t num_kv_heads = 1;
  int32_t sm_count = 1;         // the device's multiprocessors: decode splits fill them
  int32_t max_splits = 16;
  int32_t pad_to = 0;           // decode-only graphs: plan as this many sequences (>= the batch)
  int32_t table_width = 0;      // graphs: every block table padded to this many entries (fixed addresses)
  int32_t force_splits = 0;     // > 0: use this split count (graph keys fix it)
  int32_t span_tokens = 1;      // most rows of one decode span: attention_tile_tokens(group, head_dim); 1: no spans
};

/** A span bound a graph is captured for: the next power of two, at most `span_tokens`. */
int32_t span_bucket(int32_t max_span, int32_t span_tokens);

/**
 * Decode splits: enough blocks to fill the device twice, each split at least one key chunk
 * (kAttentionChunk, 32 keys), at most max_splits. A block walks its keys one chunk after another,
 * so at batch 1 the splits are what spreads a short context over the SMs (measured on an H200:
 * 64-key splits left a 0.5B model's decode attention at 17 us a layer). Worked example: 2
 * sequences x 2 KV heads on 132 SMs with 4096-token contexts: ceil(264 / 4) = 66, capped at 16
 * by max_splits: 16 splits of 256 keys.
 */
int32_t choose_decode_splits(int32_t num_decode, int32_t num_kv_heads, int32_t max_kv_len, int32_t sm_count, int32_t max_splits);

/** Fills `plan` (reusing its storage) for `batch`. */
void plan_step(const ForwardBatch& batch, const PlanOptions& options, StepPlan& plan);

}  // namespace tandem::gpu
