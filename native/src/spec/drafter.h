// Drafter: proposes tokens that continue a sequence, for the engine to verify in its next step
// (speculative decoding). One interface; the implementations are model-free:
//   NgramDrafter   prompt lookup: the last n tokens (n from ngram_max down to ngram_min) are
//                  found earlier in the prompt + output, and what followed them is proposed
//   SuffixDrafter  suffix decoding: a suffix tree per request over its prompt + output and a
//                  global one over recent outputs; the most frequent continuation is proposed
//                  while its estimated probability stays above a floor
// A draft model or an EAGLE head would implement the same interface: propose() takes the whole
// batch at once, on the step's native thread, after sampling.
//
// Threads: begin() and end() come from the JS thread at any time; they only queue. propose()
// runs on the engine's step thread (steps are serialized): it applies the queued begins and ends,
// appends each sequence's new tokens, and drafts. So drafting never runs on the event loop, and
// its time per step is bounded: a sequence indexes at most `index_budget` tokens per step (a long
// prompt is indexed over several steps and drafts only once it is caught up).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tandem {
class ThreadPool;
}

namespace tandem::spec {

enum class DraftMethod : int32_t { kNgram = 1, kSuffix = 2 };

struct DraftConfig {
  DraftMethod method = DraftMethod::kNgram;
  int32_t max_drafts = 5;       // --num-speculative-tokens: the most one query may ask for
  int32_t ngram_min = 2;        // --prompt-lookup-min
  int32_t ngram_max = 5;        // --prompt-lookup-max
  int32_t suffix_max_depth = 24;          // longest suffix kept per tree path (match + drafts)
  float suffix_max_spec_factor = 1.0f;    // drafts <= factor x match length
  float suffix_min_token_prob = 0.1f;     // stop where the path's estimated probability falls below
  int64_t suffix_cache_tokens = 1 << 20;  // the global tree's bound, in output tokens (two halves)
  int64_t index_budget = 16384;           // tokens indexed per sequence per step
};

/** Checks a config, throwing NativeError(invalid_argument) naming the field. */
void check_draft_config(const DraftConfig& config);

/** One sequence of a propose() call. */
struct DraftQuery {
  int64_t key = 0;                        // the caller's sequence id (begin's key)
  const int32_t* new_tokens = nullptr;    // tokens appended since begin() or its last query
  int32_t num_new = 0;
  int64_t expected_len = 0;               // its length after the new tokens (a mismatch stops its drafts)
  int32_t max_drafts = 0;                 // <= DraftConfig::max_drafts
  // Results.
  std::vector<int32_t> drafts;
  std::vector<float> scores;              // per draft: estimated P(accepted | the ones before), NaN = no estimate
};

struct DrafterStats {
  int64_t sequences = 0;        // sequences with state
  int64_t indexed_tokens = 0;   // tokens held in per-sequence indexes
  int64_t shared_tokens = 0;    // tokens in shared state (the suffix drafter's global tree)
  int64_t bytes = 0;            // memory held, approximately
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual const char* name() const = 0;
  /** A sequence's tokens so far (prompt, prior outputs); copied. Any thread. */
  virtual void begin(int64_t key, const int32_t* tokens, int32_t n) = 0;
  /** The sequence ended; `finished`: it completed (its output may feed shared state). Any thread. */
  virtual void end(int64_t key, bool finished) = 0;
  /** Appends each query's new tokens and drafts; queries of unknown keys get none. Step thread. */
  virtual void propose(std::vector<DraftQuery>& queries, ThreadPool* pool) = 0;
  virtual DrafterStats stats() const = 0;
};

std::unique_ptr<Drafter> make_drafter(const DraftConfig& config);

/** "ngram" / "suffix" -> method; throws invalid_argument otherwise. */
DraftMethod parse_draft_method(const std::string& name);

}  // namespace tandem::spec
