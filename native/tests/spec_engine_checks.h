// Speculative decoding checks, engine half: the verify step against plain decoding (greedy and
// seeded sampling return the same tokens with and without drafts, with penalties, logit bias,
// per-position masks and logprobs; a mixed batch; a rejected draft leaves nothing behind) and
// the engine's own drafters (their proposals verify to the plain output, some are accepted).
// Included inside engine_test.cc's namespace after its helpers (load, StepBuilder, seq,
// expect_error); its includes come from spec_checks.h at the top of that file.
#pragma once

using tandem::spec::DraftConfig;
using tandem::spec::DraftMethod;

/** One sequence decoded step by step on an engine, plainly or with drafts. */
struct SpecRun {
  std::vector<int32_t> tokens;  // prompt + output
  int32_t num_prompt = 0;
  std::vector<float> logprobs;  // of each output token
  int steps = 0;
  int accepted = 0;
};

struct SpecCase {
  SamplingParams sp = StepBuilder::greedy();
  bool penalties = false;
  std::vector<std::pair<int32_t, float>> bias;
  /** Allowed-token mask for the token at `position` (empty = unconstrained). */
  std::function<std::vector<uint32_t>(int64_t position)> mask;
  int32_t logprobs = -1;
};

inline void fill_seq_extras(StepInput& in, const SpecCase& c, const SpecRun& run, int32_t rows, size_t words) {
  SeqInput& s = in.seqs.back();
  if (c.penalties) {
    s.history_offset = static_cast<int32_t>(in.history.size());
    in.history.insert(in.history.end(), run.tokens.begin(), run.tokens.end());
    s.history_len = static_cast<int32_t>(run.tokens.size());
    s.num_prompt = run.num_prompt;
  }
  if (!c.bias.empty()) {
    s.bias_offset = static_cast<int32_t>(in.bias_ids.size());
    for (auto& [id, v] : c.bias) {
      in.bias_ids.push_back(id);
      in.bias_values.push_back(v);
    }
    s.bias_len = static_cast<int32_t>(c.bias.size());
  }
  if (c.mask) {
    s.mask_row = static_cast<int32_t>(in.allowed_masks.size() / words);
    for (int32_t j = 0; j < rows; ++j) {
      const auto m = c.mask(static_cast<int64_t>(run.tokens.size()) + j);
      in.allowed_masks.insert(in.allowed_masks.end(), m.begin(), m.end());
    }
  }
}

/** Decodes `n` tokens; `drafter(tokens, max)` gives the drafts of each step (none: plain decoding). */
inline SpecRun spec_decode(Engine& e, const std::vector<int32_t>& prompt, int n, const SpecCase& c,
                           const std::function<std::vector<int32_t>(const std::vector<int32_t>&, int)>& drafter,
                           const std::vector<int32_t>& blocks) {
  const size_t words = (static_cast<size_t>(e.config().vocab_size) + 31) / 32;
  SpecRun run;
  run.tokens = prompt;
  run.num_prompt = static_cast<int32_t>(prompt.size());
  int32_t computed = 0;
  while (static_cast<int>(run.tokens.size()) - run.num_prompt < n) {
    const int remaining = n - (static_cast<int>(run.tokens.size()) - run.num_prompt);
    std::vector<int32_t> step_tokens(run.tokens.begin() + computed, run.tokens.end());
    std::vector<int32_t> drafts;
    if (drafter && computed > 0) drafts = drafter(run.tokens, remaining - 1);
    step_tokens.insert(step_tokens.end(), drafts.begin(), drafts.end());
    StepBuilder b;
    b.add(step_tokens, computed, blocks, true, c.sp, c.logprobs);
    b.in.return_logits = false;
    b.in.seqs.back().num_drafts = static_cast<int32_t>(drafts.size());
    fill_seq_extras(b.in, c, run, static_cast<int32_t>(drafts.size()) + 1, words);
    auto r = e.step(b.in);
    ++run.steps;
    const int32_t emitted = r.emitted.empty() ? 1 : r.emitted[0];
    run.accepted += emitted - 1;
    computed = static_cast<int32_t>(run.tokens.size());
    for (int32_t i = 0; i < emitted && static_cast<int>(run.tokens.size()) - run.num_prompt < n; ++i) {
      run.tokens.push_back(r.tokens[static_cast<size_t>(i)]);
      run.logprobs.push_back(r.logprobs[static_cast<size_t>(i)]);
    }
    // The KV of the accepted drafts is computed; the bonus token's is not yet.
    computed += emitted - 1;
  }
  return run;
}

inline void test_verify_step(const std::string& dir, const char* label) {
  auto e = load(dir, 96);
  const int32_t V = e->config().vocab_size;
  const size_t words = (static_cast<size_t>(V) + 31) / 32;
  std::vector<int32_t> blocks;
  for (int32_t i = 0; i < 96; ++i) blocks.push_back(i);
  const auto prompt = seq(11, 9, V);
  const int n = 40;

  SpecCase hot;
  hot.sp.temperature = 1.3f;
  hot.sp.top_k = 24;
  hot.sp.top_p = 0.92f;
  hot.sp.min_p = 0.02f;
  hot.sp.seed = 4242;
  SpecCase pen = hot;
  pen.penalties = true;
  pen.sp.repetition_penalty = 1.3f;
  pen.sp.presence_penalty = 0.4f;
  pen.sp.frequency_penalty = 0.3f;
  SpecCase biased;
  biased.bias = {{3, 4.0f}, {7, -100.0f}, {V + 5, 50.0f}};
  SpecCase masked;  // a different allowed set at even and odd positions: each row must read its own
  masked.mask = [words, V](int64_t pos) {
    std::vector<uint32_t> m(words, 0);
    for (int32_t id = 0; id < V; ++id) {
      if ((id + pos) % 3 != 0) m[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
    }
    return m;
  };
  SpecCase logp;
  logp.logprobs = 2;
  const std::pair<const char*, SpecCase> cases[] = {{"greedy", SpecCase{}}, {"seeded sampling", hot}, {"penalties", pen},
                                                    {"logit bias", biased}, {"masks", masked}, {"logprobs", logp}};
  auto* gpu = dynamic_cast<GpuBackend*>(&e->backend());
  const uint64_t spans_before = gpu != nullptr ? gpu->span_forwards() : 0;
  for (const auto& [name, c] : cases) {
    const SpecRun plain = spec_decode(*e, prompt, n, c, nullptr, blocks);
    // An oracle that knows the plain output but gets every third draft wrong, k up to 5.
    int call = 0;
    auto oracle = [&](const std::vector<int32_t>& toks, int max) {
      std::vector<int32_t> d;
      const size_t at = toks.size();
      const int k = std::min(max, 1 + (call++ % 5));
      for (int i = 0; i < k && at + static_cast<size_t>(i) < plain.tokens.size(); ++i) {
        const int32_t right = plain.tokens[at + static_cast<size_t>(i)];
        d.push_back((at + static_cast<size_t>(i)) % 3 == 0 ? (right + 1) % V : right);
      }
      return d;
    };
    const SpecRun spec = spec_decode(*e, prompt, n, c, oracle, blocks);
    CHECK(spec.tokens == plain.tokens, "%s verify %s: output differs from plain decoding", label, name);
    CHECK(spec.steps < plain.steps && spec.accepted > 0, "%s verify %s: %d steps vs %d plain, %d accepted", label, name,
          spec.steps, plain.steps, spec.accepted);
    if (c.logprobs >= 0) {
      float worst = 0;
      for (size_t i = 0; i < plain.logprobs.size(); ++i) worst = std::max(worst, std::fabs(plain.logprobs[i] - spec.logprobs[i]));
      CHECK(worst <= consistency_tolerance() * 10, "%s verify logprobs differ by %g", label, worst);
    }
    // Wrong drafts only (every draft off by one): the output still equals plain decoding, one token a step.
    auto wrong = [&](const std::vector<int32_t>& toks, int max) {
      std::vector<int32_t> d;
      for (int i = 0; i < std::min(max, 4) && toks.size() + static_cast<size_t>(i) < plain.tokens.size(); ++i) {
        d.push_back((plain.tokens[toks.size() + static_cast<size_t>(i)] + 1) % V);
      }
      return d;
    };
    const SpecRun rejected = spec_decode(*e, prompt, n, c, wrong, blocks);
    CHECK(rejected.tokens == plain.tokens && rejected.accepted == 0, "%s verify %s: rejected drafts changed the output", label, name);
  }
  // GPU backends: those verify steps' rows attended as decode spans (step_plan.h), one block per
  // (sequence, KV head, split) for all of a step's drafts, and still equal plain decoding.
  if (gpu != nullptr) {
    CHECK(gpu->span_forwards() > spans_before, "%s: no verify step attended as a decode span", label);
  }

  // A verify sequence in a batch with a prefill and a plain decode: each as it is alone.
  {
    const auto other = seq(2, 6, V);
    StepBuilder alone_a, alone_b, both;
    alone_a.add(prompt, 0, {0, 1, 2}, true);
    const int32_t first = e->step(alone_a.in).tokens[0];
    const SpecRun plain = spec_decode(*e, prompt, 6, SpecCase{}, nullptr, blocks);
    // Verify [first, d1, d2] with d1 right, d2 wrong, beside a fresh prefill of `other`.
    StepBuilder v;
    v.add({first, plain.tokens[prompt.size() + 1], (plain.tokens[prompt.size() + 2] + 1) % V}, static_cast<int32_t>(prompt.size()),
          {0, 1, 2, 3}, true);
    v.in.seqs.back().num_drafts = 2;
    v.add(other, 0, {10, 11}, true);
    auto mixed = e->step(v.in);
    CHECK(mixed.emitted.size() == 2 && mixed.emitted[0] == 2 && mixed.emitted[1] == 1, "%s mixed verify: emitted %d/%d", label,
          mixed.emitted.empty() ? -1 : mixed.emitted[0], mixed.emitted.size() > 1 ? mixed.emitted[1] : -1);
    CHECK(mixed.tokens.size() == 3 && mixed.tokens[0] == plain.tokens[prompt.size() + 1] && mixed.tokens[1] == plain.tokens[prompt.size() + 2],
          "%s mixed verify: tokens differ from plain decoding", label);
    alone_b.add(other, 0, {12, 13}, true);
    CHECK(mixed.tokens.size() == 3 && mixed.tokens[2] == e->step(alone_b.in).tokens[0], "%s mixed verify: the prefill beside it changed", label);
    // The rejected draft's KV slot (position prompt + 2) is rewritten by the next step before it is read.
    StepBuilder next;
    next.add({mixed.tokens[1]}, static_cast<int32_t>(prompt.size()) + 2, {0, 1, 2, 3}, true);
    CHECK(e->step(next.in).tokens[0] == plain.tokens[prompt.size() + 3], "%s: the step after a rejection read the rejected KV", label);
  }

  // Bad inputs: drafts on an unsampled sequence, as many drafts as tokens.
  StepBuilder bad;
  bad.add({1, 2, 3}, 0, {0}, false);
  bad.in.seqs.back().num_drafts = 1;
  expect_error("drafts without sampling", "invalid_argument", [&] { e->step(bad.in); });
  StepBuilder bad2;
  bad2.add({1, 2}, 0, {0}, true);
  bad2.in.seqs.back().num_drafts = 2;
  expect_error("drafts = tokens", "invalid_argument", [&] { e->step(bad2.in); });
}

/** The engine's own drafter: its proposals verify to the plain output, and some are accepted. */
inline void test_engine_drafter(const std::string& dir, DraftMethod method, const char* label) {
  auto e = load(dir, 96);
  const int32_t V = e->config().vocab_size;
  std::vector<int32_t> blocks;
  for (int32_t i = 0; i < 96; ++i) blocks.push_back(i);
  // A prompt that repeats itself, so the model's continuation has something to copy (greedy
  // random models also fall into cycles, which the drafters then predict).
  std::vector<int32_t> prompt;
  for (int r = 0; r < 3; ++r) for (int i = 0; i < 7; ++i) prompt.push_back((5 + i * 11) % V);
  const int n = 60;
  const SpecRun plain = spec_decode(*e, prompt, n, SpecCase{}, nullptr, blocks);

  DraftConfig c;
  c.method = method;
  c.max_drafts = 6;
  e->set_drafter(tandem::spec::make_drafter(c));
  e->drafter()->begin(77, prompt.data(), static_cast<int32_t>(prompt.size()));
  std::vector<int32_t> next_drafts;
  auto from_engine = [&](const std::vector<int32_t>&, int max) {
    std::vector<int32_t> d(next_drafts.begin(), next_drafts.begin() + std::min<size_t>(next_drafts.size(), static_cast<size_t>(std::max(0, max))));
    return d;
  };
  // spec_decode with the engine's proposals: each step asks for the next ones.
  SpecRun run;
  run.tokens = prompt;
  run.num_prompt = static_cast<int32_t>(prompt.size());
  int32_t computed = 0;
  int drafted = 0;
  int drafted_after_pause = 0;  // proposals after a step that asked for none
  while (static_cast<int>(run.tokens.size()) - run.num_prompt < n) {
    const int remaining = n - (static_cast<int>(run.tokens.size()) - run.num_prompt);
    std::vector<int32_t> toks(run.tokens.begin() + computed, run.tokens.end());
    const std::vector<int32_t> drafts = computed > 0 ? from_engine(run.tokens, remaining - 1) : std::vector<int32_t>{};
    drafted += static_cast<int>(drafts.size());
    toks.insert(toks.end(), drafts.begin(), drafts.end());
    StepBuilder b;
    b.add(toks, computed, blocks, true);
    b.in.return_logits = false;
    b.in.seqs.back().num_drafts = static_cast<int32_t>(drafts.size());
    // Every third step asks for no drafts: the drafter must still follow the sequence's tokens.
    const bool ask = run.steps % 3 != 2;
    b.in.seqs.back().propose_drafts = ask ? 6 : 0;
    b.in.seqs.back().draft_key = 77;
    auto r = e->step(b.in);
    if (!ask) CHECK(r.draft_counts[0] == 0, "%s drafter: proposed when asked for none", label);
    if (ask && run.steps > 3) drafted_after_pause += r.draft_counts[0];
    ++run.steps;
    const int32_t emitted = r.emitted[0];
    run.accepted += emitted - 1;
    computed = static_cast<int32_t>(run.tokens.size()) + emitted - 1;
    for (int32_t i = 0; i < emitted; ++i) run.tokens.push_back(r.tokens[static_cast<size_t>(i)]);
    next_drafts.assign(r.drafts.begin(), r.drafts.begin() + r.draft_counts[0]);
  }
  run.tokens.resize(plain.tokens.size());
  CHECK(run.tokens == plain.tokens, "%s drafter: output differs from plain decoding", label);
  CHECK(drafted > 0 && run.accepted > 0 && run.steps < plain.steps, "%s drafter: %d drafted, %d accepted, %d steps vs %d", label,
        drafted, run.accepted, run.steps, plain.steps);
  CHECK(drafted_after_pause > 0, "%s drafter: no proposals after a step that asked for none (it lost the sequence)", label);
  std::printf("%s drafter: %d steps for %d tokens (plain %d), %d of %d drafts accepted\n", label, run.steps, n, plain.steps, run.accepted,
              drafted);
  e->drafter()->end(77, true);
}

/**
 * Two-sample chi-square homogeneity of two token samples over the same vocabulary: bins with an
 * expected count under 5 in either sample are pooled into one. Returns the upper-tail
 * probability (Wilson-Hilferty's normal approximation of the chi-square distribution).
 */
inline double chi_square_p(const std::vector<int32_t>& a, const std::vector<int32_t>& b, int32_t vocab, double* stat_out = nullptr) {
  std::vector<double> ca(static_cast<size_t>(vocab) + 1, 0), cb(static_cast<size_t>(vocab) + 1, 0);
  for (int32_t t : a) ca[static_cast<size_t>(t)] += 1;
  for (int32_t t : b) cb[static_cast<size_t>(t)] += 1;
  const double na = static_cast<double>(a.size()), nb = static_cast<double>(b.size());
  std::vector<double> oa, ob;
  double pool_a = 0, pool_b = 0;
  for (int32_t t = 0; t < vocab; ++t) {
    const double tot = ca[static_cast<size_t>(t)] + cb[static_cast<size_t>(t)];
    if (tot * std::min(na, nb) / (na + nb) < 5) {
      pool_a += ca[static_cast<size_t>(t)];
      pool_b += cb[static_cast<size_t>(t)];
    } else {
      oa.push_back(ca[static_cast<size_t>(t)]);
      ob.push_back(cb[static_cast<size_t>(t)]);
    }
  }
  if (pool_a + pool_b > 0) {
    oa.push_back(pool_a);
    ob.push_back(pool_b);
  }
  double stat = 0;
  for (size_t i = 0; i < oa.size(); ++i) {
    const double tot = oa[i] + ob[i];
    const double ea = tot * na / (na + nb), eb = tot * nb / (na + nb);
    if (ea > 0) stat += (oa[i] - ea) * (oa[i] - ea) / ea;
    if (eb > 0) stat += (ob[i] - eb) * (ob[i] - eb) / eb;
  }
  if (stat_out != nullptr) *stat_out = stat;
  const double df = std::max<double>(1, static_cast<double>(oa.size()) - 1);
  const double z = (std::cbrt(stat / df) - (1 - 2 / (9 * df))) / std::sqrt(2 / (9 * df));
  return 0.5 * std::erfc(z / std::sqrt(2.0));
}

/**
 * temperature > 0: the token sampled after a draft has the target distribution. 4000 seeds (1500
 * on SIMT) run plainly and as many other seeds verify a draft at the second output position (the
 * most likely token there: accepted in about one seed of seven on the tiny model); their second
 * tokens' distributions agree under a chi-square test (p > 0.001). The same test rejects two
 * planted bugs: an engine that always accepts the draft, and the subtler one that, on a
 * rejection, samples from the target p instead of the residual (p without the draft,
 * renormalised), so the draft comes out p_d + (1 − p_d)·p_d of the time instead of p_d.
 */
inline void test_verify_distribution(const std::string& dir) {
  auto e = load(dir, 8);
  const int32_t V = e->config().vocab_size;
  const auto prompt = seq(4, 5, V);
  SamplingParams hot;
  hot.temperature = 1.0f;
  // The draft: the most likely second token after the plain greedy first one.
  StepBuilder g;
  g.add(prompt, 0, {0, 1}, true);
  const int32_t first_greedy = e->step(g.in).tokens[0];
  StepBuilder g2;
  g2.add({first_greedy}, static_cast<int32_t>(prompt.size()), {0, 1}, true);
  const int32_t draft = e->step(g2.in).tokens[0];

  // Fewer samples on the SIMT harness (each step runs the kernels on host fibers); still far
  // more than the always-accept bug needs to fail.
  const int n = device() == "simt" ? 1500 : 4000;
  std::vector<int32_t> plain_second, spec_second;
  std::vector<bool> spec_accepted;
  int accepted = 0;
  for (int i = 0; i < 2 * n; ++i) {
    SamplingParams sp = hot;
    sp.seed = static_cast<uint64_t>(1000 + i);
    StepBuilder a;
    a.add(prompt, 0, {0, 1}, true, sp);
    a.in.return_logits = false;
    const int32_t first = e->step(a.in).tokens[0];
    StepBuilder b;
    const bool speculate = i >= n;
    b.add(speculate ? std::vector<int32_t>{first, draft} : std::vector<int32_t>{first}, static_cast<int32_t>(prompt.size()), {0, 1}, true, sp);
    b.in.return_logits = false;
    if (speculate) b.in.seqs.back().num_drafts = 1;
    auto r = e->step(b.in);
    (speculate ? spec_second : plain_second).push_back(r.tokens[0]);
    if (speculate) spec_accepted.push_back(r.emitted[0] == 2);
    if (speculate && r.emitted[0] == 2) ++accepted;
  }
  double stat = 0;
  const double p = chi_square_p(plain_second, spec_second, V, &stat);
  CHECK(p > 1e-3, "verify distribution: chi-square %.1f, p %.2e: sampling after a draft changed the distribution", stat, p);
  CHECK(accepted > n / 10 && accepted < n - n / 10, "verify distribution: the draft was accepted %d of %d times (both branches must be exercised)", accepted, n);
  // The planted bug: accepting every draft makes every second token the draft.
  const std::vector<int32_t> always(spec_second.size(), draft);
  double bug_stat = 0;
  const double bug_p = chi_square_p(plain_second, always, V, &bug_stat);
  CHECK(bug_p < 1e-9, "verify distribution: an always-accept engine passed (chi-square %.1f, p %.2e)", bug_stat, bug_p);
  // The residual bug, from this run's own draws: each accepted draft stays, each rejection takes
  // a sample of p instead (the plain samples in reverse order: an iid draw of p; sharing values
  // with the sample it is compared against only makes it harder to tell apart).
  std::vector<int32_t> from_p(spec_second.size());
  for (size_t j = 0; j < from_p.size(); ++j) from_p[j] = spec_accepted[j] ? draft : plain_second[plain_second.size() - 1 - j];
  double residual_stat = 0;
  const double residual_p = chi_square_p(plain_second, from_p, V, &residual_stat);
  // Caught at the threshold the engine passes (p > 1e-3): p 3e-14 on the CPU, 4e-5 on SIMT's 1500.
  CHECK(residual_p < 1e-3, "verify distribution: an engine sampling p (not the residual) on rejection passed (chi-square %.1f, p %.2e)", residual_stat,
        residual_p);
  std::printf("verify distribution: draft accepted %d / %d, chi-square %.1f (p %.3f); always-accept %.0f (p %.1e); p on rejection %.0f (p %.1e)\n",
              accepted, n, stat, p, bug_stat, bug_p, residual_stat, residual_p);
}

inline void test_speculative(const std::string& root) {
  spec_test::test_ngram_drafter();
  spec_test::test_suffix_tree();
  spec_test::test_suffix_drafter();
  spec_test::test_expand_verify();
  test_verify_step(root + "/llama", "llama");
  test_verify_distribution(root + "/llama");
  test_engine_drafter(root + "/llama", DraftMethod::kNgram, "ngram");
  test_engine_drafter(root + "/llama", DraftMethod::kSuffix, "suffix");
}
