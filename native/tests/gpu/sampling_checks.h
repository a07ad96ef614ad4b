// The GPU sampler against the CPU sampler (tandem::Sampler, the reference), token for token
// and logprob for logprob, on the same logits, seeds and positions. One launch per vocabulary
// size (97, 1000, 5003) holds many rows, each with its own parameters and logits shape:
//  - greedy; temperature alone; top-k (1, small, around ties, half the vocabulary, vocab - 1);
//    top-p (0, small, 0.9, 0.99); min-p (small, large, above 1); combinations of all three;
//  - logits peaked, LLM-like, flat (kept sets larger than the gather buffer: bucket splits and
//    the tiled draw), quantized (many ties), ties straddling the top-k boundary, all equal
//    (the id-ordered tie scan);
//  - repetition / presence / frequency penalties over histories with repeats, prompt-only
//    and generated tokens, out-of-vocab entries; logit bias with out-of-range ids, duplicates
//    and non-finite values; masks (random, one or two allowed tokens, none allowed: token 0),
//    with penalties and bias on masked tokens;
//  - logprobs with n = -1, 0, 1, 5, 20, 64; several rows reading the same logit row; logit rows
//    strided past the vocabulary; seeds and positions above 2^32.
// Outputs start poisoned, so an unwritten one shows.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <numeric>

#include "../../src/core/backend.h"
#include "../../src/core/sampler.h"
#include "../../src/cuda/sample_inputs.h"
#include "gpu_test_util.h"

namespace tandem_test::gpu {

struct GpuSampleRow {
  tandem::SampleRow row;
  std::vector<int32_t> history;
  std::vector<int32_t> bias_ids;
  std::vector<float> bias_values;
  std::vector<uint32_t> mask;
  std::string label;
};

/** Logits of one row in a named shape. */
inline std::vector<float> sample_logits(std::mt19937& rng, int vocab, int shape) {
  std::vector<float> l;
  switch (shape) {
    case 0:  // LLM-like: a normal body with a few strong tokens
      l = random_floats(rng, static_cast<size_t>(vocab), 2.0f);
      for (int i = 0; i < 5; ++i) l[rng() % static_cast<unsigned>(vocab)] += 6.0f + static_cast<float>(i);
      break;
    case 1:  // peaked
      l = random_floats(rng, static_cast<size_t>(vocab), 5.0f);
      break;
    case 2:  // flat: most of the vocabulary carries mass
      l = random_floats(rng, static_cast<size_t>(vocab), 0.3f);
      break;
    case 3: {  // quantized: many exact ties
      l = random_floats(rng, static_cast<size_t>(vocab), 2.0f);
      for (float& x : l) x = std::round(x * 4.0f) / 4.0f;
      break;
    }
    case 4: {  // ties straddling the top-k boundaries used below (ranks ~3..60)
      l = random_floats(rng, static_cast<size_t>(vocab), 1.0f);
      std::vector<int32_t> ids(static_cast<size_t>(vocab));
      std::iota(ids.begin(), ids.end(), 0);
      std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return l[static_cast<size_t>(a)] > l[static_cast<size_t>(b)]; });
      const int hi = std::min(vocab, 64);
      for (int r = 2; r < hi; ++r) l[static_cast<size_t>(ids[static_cast<size_t>(r)])] = 3.0f - static_cast<float>(r / 8);
      break;
    }
    default:  // all equal
      l.assign(static_cast<size_t>(vocab), 0.5f);
      break;
  }
  return l;
}

/** Runs a sampler over the prepared arguments (default: KernelApi::sample, the one-block kernel). */
using SampleRunner = std::function<void(const tandem::gpu::SampleArgs&)>;

inline void check_sampling_vocab(Gpu& g, int vocab, uint32_t seed, int& rows_checked, const SampleRunner& runner = nullptr,
                                 const char* name = "sampling") {
  std::mt19937 rng(seed);
  std::mt19937_64 rng64(seed * 7919ull + 1);
  const int shapes = 6;
  const int logit_rows = 3 * shapes;
  const int64_t stride = vocab + 13;
  std::vector<float> logits(static_cast<size_t>(logit_rows * stride), NAN);
  std::vector<int> shape_of(static_cast<size_t>(logit_rows));
  for (int r = 0; r < logit_rows; ++r) {
    shape_of[static_cast<size_t>(r)] = r % shapes;
    auto l = sample_logits(rng, vocab, r % shapes);
    std::copy(l.begin(), l.end(), logits.begin() + r * stride);
  }

  // Parameter sets (temperature, top_k, top_p, min_p); each meets every logits shape.
  struct P {
    float t;
    int32_t k;
    float p, minp;
  };
  const std::vector<P> params = {
      {0.0f, 0, 1.0f, 0.0f},   {1.0f, 0, 1.0f, 0.0f},   {0.7f, 1, 1.0f, 0.0f},  {1.0f, 5, 1.0f, 0.0f},
      {1.3f, 50, 1.0f, 0.0f},  {1.0f, 0, 0.9f, 0.0f},   {0.8f, 0, 0.5f, 0.0f},  {1.0f, 0, 0.99f, 0.0f},
      {1.0f, 0, 0.0f, 0.0f},   {1.0f, 0, 1.0f, 0.05f},  {2.0f, 0, 1.0f, 0.3f},  {1.0f, 0, 1.0f, 1.5f},
      {1.3f, 40, 0.9f, 0.02f}, {0.9f, 10, 0.7f, 0.0f},  {1.0f, 0, 0.95f, 0.01f}, {1.0f, vocab / 2, 0.97f, 0.0f},
      {1.0f, vocab - 1, 1.0f, 0.0f}, {1.0f, vocab + 5, 0.8f, 0.0f}, {5.0f, 3, 1.0f, 0.0f}, {0.05f, 0, 0.9f, 0.0f},
  };
  const std::vector<int32_t> tops = {-1, 0, 1, 5, 20, 64};

  std::vector<GpuSampleRow> cases;
  auto add = [&](int logit_row, const P& p, const std::string& label) -> GpuSampleRow& {
    GpuSampleRow c;
    c.row.logit_row = logit_row;
    c.row.params.temperature = p.t;
    c.row.params.top_k = p.k;
    c.row.params.top_p = p.p;
    c.row.params.min_p = p.minp;
    c.row.params.seed = rng64();
    c.row.position = static_cast<int64_t>(rng64() >> (rng() % 2 == 0 ? 1 : 40));
    c.row.num_top_logprobs = tops[cases.size() % tops.size()];
    c.label = label;
    cases.push_back(std::move(c));
    return cases.back();
  };
  for (int r = 0; r < logit_rows; ++r) {
    for (size_t pi = 0; pi < params.size(); ++pi) {
      if ((r + static_cast<int>(pi)) % 3 != 0 && shape_of[static_cast<size_t>(r)] != 2) continue;  // a third of the grid, all of the flat rows
      add(r, params[pi], "params " + std::to_string(pi));
    }
  }
  // Penalties, bias and masks on top of a few parameter sets. Histories draw from the row's
  // 40 best tokens (so penalties change the outcome) plus repeats of a few others and
  // out-of-vocab entries; the first half is the prompt.
  for (int j = 0; j < 48; ++j) {
    const int r = j % logit_rows;
    P pj = params[static_cast<size_t>(j) % params.size()];
    if (j % 6 == 0) pj = params[0];  // greedy: a penalty on a top token moves the arg max
    GpuSampleRow& c = add(r, pj, "processed " + std::to_string(j));
    if (j % 2 == 0 || j % 9 == 1) {
      auto& sp = c.row.params;
      sp.repetition_penalty = j % 4 == 0 ? 1.3f : 1.0f;
      sp.presence_penalty = j % 3 == 0 ? 1.5f : 0.0f;
      sp.frequency_penalty = j % 5 == 0 ? 0.0f : 0.7f;
      if (j % 9 == 1) sp.repetition_penalty = 0.8f;  // < 1 raises repeated tokens
      const float* row_logits = logits.data() + r * stride;
      std::vector<int32_t> best(static_cast<size_t>(vocab));
      std::iota(best.begin(), best.end(), 0);
      std::stable_sort(best.begin(), best.end(), [&](int32_t x, int32_t y) { return row_logits[x] > row_logits[y]; });
      const int len = 6 + static_cast<int>(rng() % 40);
      for (int i = 0; i < len; ++i) {
        int32_t tok;
        if (i % 11 == 7) {
          tok = vocab + 3;
        } else if (i % 3 == 2) {
          tok = static_cast<int32_t>(rng() % 5);  // repeats
        } else {
          tok = best[rng() % static_cast<unsigned>(std::min(vocab, 40))];
        }
        c.history.push_back(tok);
      }
      // The best token once in the prompt only, the second once generated only.
      c.history.insert(c.history.begin(), best[0]);
      if (vocab > 1) c.history.push_back(best[1]);
      c.row.num_prompt = static_cast<int32_t>(c.history.size() / 2);
    }
    if (j % 3 != 2) {
      const int nb = 1 + static_cast<int>(rng() % 6);
      for (int i = 0; i < nb; ++i) {
        c.bias_ids.push_back(static_cast<int32_t>(rng() % static_cast<unsigned>(vocab)));
        c.bias_values.push_back(static_cast<float>(static_cast<int>(rng() % 21) - 10));
      }
      c.bias_ids.push_back(c.bias_ids[0]);  // duplicate: adds up
      c.bias_values.push_back(2.5f);
      c.bias_ids.push_back(vocab);  // out of range
      c.bias_values.push_back(100.0f);
      c.bias_ids.push_back(-3);
      c.bias_values.push_back(100.0f);
      c.bias_ids.push_back(1);
      c.bias_values.push_back(INFINITY);  // non-finite: skipped
    }
    if (j % 4 == 1 || j % 4 == 2) {
      const size_t words = (static_cast<size_t>(vocab) + 31) / 32;
      c.mask.assign(words, 0);
      if (j % 8 == 1) {
        for (int i = 0; i < vocab; ++i) {
          if (rng() % 3 != 0) c.mask[static_cast<size_t>(i) / 32] |= 1u << (i % 32);
        }
      } else if (j % 8 == 2) {
        const int a = static_cast<int>(rng() % static_cast<unsigned>(vocab));
        c.mask[static_cast<size_t>(a) / 32] |= 1u << (a % 32);
      } else if (j % 8 == 5) {
        for (int a : {static_cast<int>(rng() % static_cast<unsigned>(vocab)), vocab - 1}) c.mask[static_cast<size_t>(a) / 32] |= 1u << (a % 32);
      }  // j % 8 == 6: nothing allowed
    }
  }

  std::vector<tandem::SampleRow> rows;
  for (auto& c : cases) {
    c.row.history = c.history.empty() ? nullptr : c.history.data();
    c.row.history_len = static_cast<int32_t>(c.history.size());
    c.row.bias_ids = c.bias_ids.empty() ? nullptr : c.bias_ids.data();
    c.row.bias_values = c.bias_values.empty() ? nullptr : c.bias_values.data();
    c.row.bias_len = static_cast<int32_t>(c.bias_ids.size());
    c.row.allowed = c.mask.empty() ? nullptr : c.mask.data();
    rows.push_back(c.row);
  }

  // CPU reference.
  tandem::Sampler cpu(vocab);
  std::vector<tandem::SampleResult> want;
  for (const auto& r : rows) {
    tandem::SampleRequest q;
    q.logits = logits.data() + r.logit_row * stride;
    q.params = r.params;
    q.position = r.position;
    q.history = r.history;
    q.history_len = r.history_len;
    q.num_prompt = r.num_prompt;
    q.num_top_logprobs = r.num_top_logprobs;
    q.bias_ids = r.bias_ids;
    q.bias_values = r.bias_values;
    q.bias_len = r.bias_len;
    q.allowed = r.allowed;
    want.push_back(cpu.sample(q));
  }

  // Device.
  tandem::gpu::SampleInputs in;
  in.build(rows.data(), rows.size(), vocab);
  auto nonempty = [](auto v) {
    if (v.empty()) v.resize(1);
    return v;
  };
  const int n = static_cast<int>(rows.size());
  DeviceArray<float> d_logits(*g.device, logits);
  DeviceArray<tandem::gpu::SampleRowDesc> d_rows(*g.device, in.rows);
  DeviceArray<tandem::gpu::PenaltyEntry> d_pen(*g.device, nonempty(in.penalties));
  DeviceArray<int32_t> d_bias_ids(*g.device, nonempty(in.bias_ids));
  DeviceArray<float> d_bias_values(*g.device, nonempty(in.bias_values));
  DeviceArray<uint32_t> d_masks(*g.device, nonempty(in.masks));
  DeviceArray<float> d_work(*g.device, static_cast<size_t>(n) * static_cast<size_t>(vocab));
  const int ts = in.top_stride;
  DeviceArray<int32_t> d_tokens(*g.device, static_cast<size_t>(n));
  DeviceArray<float> d_logprobs(*g.device, static_cast<size_t>(n));
  DeviceArray<int32_t> d_top_ids(*g.device, static_cast<size_t>(std::max(1, n * ts)));
  DeviceArray<float> d_top_lp(*g.device, static_cast<size_t>(std::max(1, n * ts)));
  d_work.poison();
  d_tokens.poison(0x7F);
  d_logprobs.poison(0x00);
  d_top_ids.poison(0x7F);
  d_top_lp.poison(0x00);
  tandem::gpu::SampleArgs a;
  a.logits = d_logits.get();
  a.logit_stride = stride;
  a.vocab = vocab;
  a.rows = d_rows.get();
  a.num_rows = n;
  a.penalties = d_pen.get();
  a.bias_ids = d_bias_ids.get();
  a.bias_values = d_bias_values.get();
  a.masks = d_masks.get();
  a.work = d_work.get();
  a.top_stride = ts;
  a.out_tokens = d_tokens.get();
  a.out_logprobs = d_logprobs.get();
  a.out_top_ids = d_top_ids.get();
  a.out_top_logprobs = d_top_lp.get();
  if (runner) {
    runner(a);
  } else {
    g.kernels->sample(a, g.stream());
  }
  g.device->synchronize();
  const auto tokens = d_tokens.download();
  const auto logprobs = d_logprobs.download();
  const auto top_ids = d_top_ids.download();
  const auto top_lp = d_top_lp.download();

  auto close = [](float got, float want_v) { return std::fabs(got - want_v) <= 1e-5f * std::max(1.0f, std::fabs(want_v)); };
  for (int i = 0; i < n; ++i) {
    const auto& c = cases[static_cast<size_t>(i)];
    const auto& wv = want[static_cast<size_t>(i)];
    const auto& sp = c.row.params;
    const char* what = c.label.c_str();
    CHECK(tokens[static_cast<size_t>(i)] == wv.token,
          "%s vocab %d row %d (%s, shape %d, t=%g k=%d p=%g min_p=%g): token %d, CPU %d", name, vocab, i, what,
          shape_of[static_cast<size_t>(c.row.logit_row)], sp.temperature, sp.top_k, sp.top_p, sp.min_p, tokens[static_cast<size_t>(i)],
          wv.token);
    if (c.row.num_top_logprobs < 0) {
      CHECK(std::isnan(logprobs[static_cast<size_t>(i)]), "%s vocab %d row %d: logprob %g, not asked", name, vocab, i,
            logprobs[static_cast<size_t>(i)]);
    } else if (tokens[static_cast<size_t>(i)] == wv.token) {
      CHECK(close(logprobs[static_cast<size_t>(i)], wv.logprob), "%s vocab %d row %d: logprob %.8g, CPU %.8g", name, vocab, i,
            logprobs[static_cast<size_t>(i)], wv.logprob);
    }
    const int k = static_cast<int>(wv.top.size());
    for (int j = 0; j < ts; ++j) {
      const size_t at = static_cast<size_t>(i) * static_cast<size_t>(ts) + static_cast<size_t>(j);
      if (j < k) {
        CHECK(top_ids[at] == wv.top[static_cast<size_t>(j)].first && close(top_lp[at], wv.top[static_cast<size_t>(j)].second),
              "%s vocab %d row %d: top %d is (%d, %.8g), CPU (%d, %.8g)", name, vocab, i, j, top_ids[at], top_lp[at],
              wv.top[static_cast<size_t>(j)].first, wv.top[static_cast<size_t>(j)].second);
      } else {
        CHECK(top_ids[at] == -1 && std::isnan(top_lp[at]), "%s vocab %d row %d: padding %d is (%d, %g)", name, vocab, i, j,
              top_ids[at], top_lp[at]);
      }
    }
  }
  rows_checked += n;
}

/** SampleInputs: penalty entries, offsets and the clamp of top logprobs. */
inline void check_sample_inputs() {
  const int vocab = 100;
  std::vector<int32_t> h = {5, 7, 5, 200, -1, 9, 5, 7, 9, 9};  // prompt: 5 7 5 200 -1; generated: 9 5 7 9 9
  std::vector<int32_t> bias_ids = {1, 2};
  std::vector<float> bias_values = {0.5f, -1.0f};
  std::vector<uint32_t> mask(4, 0xffffffffu);
  std::vector<tandem::SampleRow> rows(3);
  rows[0].params.repetition_penalty = 1.2f;
  rows[0].history = h.data();
  rows[0].history_len = static_cast<int32_t>(h.size());
  rows[0].num_prompt = 5;
  rows[0].num_top_logprobs = 3;
  rows[1].params.presence_penalty = 0.5f;  // no repetition: prompt-only tokens are left out
  rows[1].history = h.data();
  rows[1].history_len = static_cast<int32_t>(h.size());
  rows[1].num_prompt = 5;
  rows[1].bias_ids = bias_ids.data();
  rows[1].bias_values = bias_values.data();
  rows[1].bias_len = 2;
  rows[1].num_top_logprobs = 1000;
  rows[2].history = h.data();  // no penalties: no entries
  rows[2].history_len = static_cast<int32_t>(h.size());
  rows[2].allowed = mask.data();
  rows[2].params.seed = 0x123456789abcdefull;
  rows[2].position = (int64_t{5} << 32) + 7;
  tandem::gpu::SampleInputs in;
  for (int pass = 0; pass < 2; ++pass) {  // a second build reuses the buffers
    in.build(rows.data(), rows.size(), vocab);
    auto entry = [&](int r, int32_t tok) {
      const auto& d = in.rows[static_cast<size_t>(r)];
      for (int32_t i = 0; i < d.penalty_len; ++i) {
        if (in.penalties[static_cast<size_t>(d.penalty_offset + i)].token == tok) return in.penalties[static_cast<size_t>(d.penalty_offset + i)].generated;
      }
      return -1;
    };
    CHECK(in.rows[0].penalty_len == 3 && entry(0, 5) == 1 && entry(0, 7) == 1 && entry(0, 9) == 3, "sample inputs: repetition entries");
    CHECK(in.rows[1].penalty_len == 3 && entry(1, 9) == 3 && entry(1, 5) == 1 && entry(1, 7) == 1, "sample inputs: presence entries");
    CHECK(in.rows[2].penalty_len == 0 && in.rows[2].mask_offset == 0 && in.masks.size() == 4, "sample inputs: mask row");
    CHECK(in.rows[1].bias_offset == 0 && in.rows[1].bias_len == 2 && in.bias_ids.size() == 2, "sample inputs: bias");
    CHECK(in.rows[2].seed_lo == 0x89abcdefu && in.rows[2].seed_hi == 0x01234567u && in.rows[2].position_hi == 5 &&
              in.rows[2].position_lo == 7,
          "sample inputs: seed/position halves");
    CHECK(in.top_stride == tandem::gpu::kSampleMaxTopLogprobs && in.rows[1].num_top == tandem::gpu::kSampleMaxTopLogprobs &&
              in.rows[2].num_top == -1,
          "sample inputs: top stride %d", in.top_stride);
  }
}

inline void test_sampling(Gpu& g) {
  const auto t0 = std::chrono::steady_clock::now();
  check_sample_inputs();
  int rows = 0;
  uint32_t seed = 4242;
  for (int vocab : {97, 1000, 5003}) check_sampling_vocab(g, vocab, seed++, rows);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("gpu sampling: %d rows (vocab 97, 1000, 5003) checked against the CPU sampler on %s in %.1f s\n", rows, g.name.c_str(), s);
}

}  // namespace tandem_test::gpu
