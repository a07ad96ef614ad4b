// Sampler: turns one row of logits into a token, on the host. Order of operations:
//   penalties (repetition over the distinct tokens of prompt+generated as in HF: positive
//   logits divided, negative multiplied; then presence/frequency over generated tokens, once
//   per distinct token)
//   -> logit bias (OpenAI `logit_bias`: added to the logit of each listed token, in order;
//      out-of-vocabulary ids and non-finite values skipped, duplicates add up)
//   -> allowed-token mask (structured output: the rest -> -inf)
//   -> greedy if temperature <= 0 (arg max, ties to the lowest id)
//   -> temperature -> top-k -> top-p -> min-p over the order (logit desc, id asc)
//   -> one draw from uniform(seed, position): target = u * (mass of the kept tokens), and the
//      kept tokens are walked in ASCENDING ID ORDER to the first whose cumulative mass exceeds
//      it (rounding fallback: the last kept token with mass).
// Walking in id order, not in probability order, is what lets the GPU sampler
// (cuda/kernels/sampling.cuh) draw the same token without sorting the vocabulary. A row whose
// every token is masked out samples token 0. min_p above 1 acts as 1.
// The draw depends only on (seed, position), so a request samples the same tokens whether it
// runs alone or batched, chunked or not. Logprobs are of the raw model distribution
// (log-softmax of the unprocessed logits), like vLLM's default.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace tandem {

struct SamplingParams {
  float temperature = 1.0f;
  float top_p = 1.0f;
  int32_t top_k = 0;  // <= 0: off
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  uint64_t seed = 0;
};

struct SampleRequest {
  const float* logits = nullptr;  // vocab floats, not modified
  SamplingParams params;
  int64_t position = 0;           // position the sampled token will take
  const int32_t* history = nullptr;  // prompt + generated so far (may be null without penalties)
  int32_t history_len = 0;
  int32_t num_prompt = 0;
  int32_t num_top_logprobs = -1;  // -1: no logprobs; 0: only the sampled token's
  const int32_t* bias_ids = nullptr;   // logit bias: token ids (out-of-vocab ids are skipped)
  const float* bias_values = nullptr;  // ... and the value added to each one's logit
  int32_t bias_len = 0;
  // Structured output: allowed-token bitmask (bit id&31 of word id>>5), or null = all allowed.
  // Disallowed logits become -inf after bias, before greedy/top-k/top-p/min-p.
  const uint32_t* allowed = nullptr;
};

struct SampleResult {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // best first
};

/** Per-thread scratch; reuse one per worker so sampling does not allocate per token. */
class Sampler {
 public:
  explicit Sampler(int64_t vocab_size);
  SampleResult sample(const SampleRequest& req);

  /** Uniform double in [0, 1) from (seed, position); exposed for tests. */
  static double uniform(uint64_t seed, int64_t position);

 private:
  void apply_penalties(const SampleRequest& req);

  int64_t vocab_;
  std::vector<float> work_;
  std::vector<int32_t> idx_;
  std::vector<float> probs_;
  std::vector<std::pair<int32_t, float>> kept_;  // kept (id, mass), sorted by id for the draw
  std::vector<uint32_t> stamp_;
  std::vector<int32_t> count_;
  uint32_t generation_ = 0;
};

bool has_penalties(const SamplingParams& p);

}  // namespace tandem
