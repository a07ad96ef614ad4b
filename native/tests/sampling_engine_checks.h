// Sampling on the engine: seeded temperature / top-k / top-p / min-p with logprobs, greedy,
// repetition penalty, logit bias and structured-output masks (given with the step or deferred),
// on the backend under test. Included inside engine_test.cc's namespace after its helpers
// (load, StepBuilder, seq).
#pragma once

void test_sampling(const std::string& dir) {
  auto e = load(dir);
  const auto prompt = seq(5, 6, static_cast<int32_t>(e->config().vocab_size));
  SamplingParams sp;
  sp.temperature = 1.5f;
  sp.top_k = 20;
  sp.top_p = 0.9f;
  sp.min_p = 0.01f;
  sp.seed = 1234;
  auto run = [&](uint64_t seed) {
    SamplingParams p = sp;
    p.seed = seed;
    std::vector<int32_t> out;
    StepBuilder b;
    b.add(prompt, 0, {0, 1}, true, p, 3);
    auto r = e->step(b.in);
    out.push_back(r.tokens[0]);
    CHECK(std::isfinite(r.logprobs[0]) && r.logprobs[0] <= 0, "logprob %g", r.logprobs[0]);
    CHECK(r.top_stride == 3 && r.top_logprobs[0] >= r.top_logprobs[1], "top logprobs sorted");
    for (int i = 0; i < 7; ++i) {
      StepBuilder d;
      d.add({out.back()}, static_cast<int32_t>(prompt.size()) + i, {0, 1, 2, 3}, true, p);
      out.push_back(e->step(d.in).tokens[0]);
    }
    return out;
  };
  auto a = run(1234), b = run(1234), c = run(99);
  CHECK(a == b, "same seed gives different tokens");
  CHECK(a != c, "different seeds gave identical 8-token samples");

  // Greedy picks the arg max; a huge repetition penalty moves it off a repeated token.
  StepBuilder g;
  g.add(prompt, 0, {0, 1}, true);
  auto gr = e->step(g.in);
  size_t argmax = 0;
  for (size_t i = 1; i < gr.logits.size(); ++i) if (gr.logits[i] > gr.logits[argmax]) argmax = i;
  CHECK(static_cast<size_t>(gr.tokens[0]) == argmax, "greedy is not argmax");
  StepBuilder pen;
  SamplingParams pp = StepBuilder::greedy();
  pp.repetition_penalty = 1e6f;
  pen.add(prompt, 0, {0, 1}, true, pp);
  std::vector<int32_t> hist = prompt;
  hist.push_back(gr.tokens[0]);
  pen.in.history = hist;
  pen.in.seqs[0].history_len = static_cast<int32_t>(hist.size());
  pen.in.seqs[0].num_prompt = static_cast<int32_t>(prompt.size());
  CHECK(e->step(pen.in).tokens[0] != gr.tokens[0], "repetition penalty ignored");

  // Logit bias (OpenAI semantics, added before sampling): +100 on the least likely token forces
  // it under greedy; -100 on the arg max bans it; an out-of-vocab id is skipped, not a crash.
  size_t argmin = 0;
  for (size_t i = 1; i < gr.logits.size(); ++i) if (gr.logits[i] < gr.logits[argmin]) argmin = i;
  auto biased = [&](std::vector<std::pair<int32_t, float>> bias) {
    StepBuilder bb;
    bb.add(prompt, 0, {0, 1}, true);
    for (auto& [id, v] : bias) {
      bb.in.bias_ids.push_back(id);
      bb.in.bias_values.push_back(v);
    }
    bb.in.seqs[0].bias_len = static_cast<int32_t>(bias.size());
    return e->step(bb.in).tokens[0];
  };
  CHECK(static_cast<size_t>(biased({{static_cast<int32_t>(argmin), 100.0f}})) == argmin, "+100 bias did not force the token");
  CHECK(static_cast<size_t>(biased({{static_cast<int32_t>(argmax), -100.0f}})) != argmax, "-100 bias did not ban the token");
  CHECK(static_cast<size_t>(biased({{1 << 30, 100.0f}, {-5, 100.0f}})) == argmax, "out-of-vocab bias ids changed greedy");

  // Structured-output mask: greedy takes the best allowed logit; hot sampling draws only
  // allowed tokens; deferred masks (supplied while the forward runs) behave the same.
  const size_t vocab = gr.logits.size();
  const size_t words = (vocab + 31) / 32;
  const std::vector<int32_t> allowed = {static_cast<int32_t>(argmin), static_cast<int32_t>((argmax + 7) % vocab)};
  std::vector<uint32_t> mask(words, 0);
  for (int32_t id : allowed) mask[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
  const int32_t best_allowed = gr.logits[static_cast<size_t>(allowed[0])] >= gr.logits[static_cast<size_t>(allowed[1])] ? allowed[0] : allowed[1];
  StepBuilder mg;
  mg.add(prompt, 0, {0, 1}, true);
  mg.in.allowed_masks = mask;
  mg.in.seqs[0].mask_row = 0;
  CHECK(e->step(mg.in).tokens[0] == best_allowed, "masked greedy is not the best allowed token");
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    SamplingParams hot = sp;
    hot.seed = seed;
    StepBuilder mh;
    mh.add(prompt, 0, {0, 1}, true, hot);
    mh.in.allowed_masks = mask;
    mh.in.seqs[0].mask_row = 0;
    const int32_t t = e->step(mh.in).tokens[0];
    CHECK(t == allowed[0] || t == allowed[1], "masked sampling drew token %d outside the mask", t);
  }
  StepBuilder md;
  md.add(prompt, 0, {0, 1}, true);
  md.in.deferred_masks = std::make_shared<DeferredMasks>();
  auto gate = md.in.deferred_masks;
  std::thread supplier([gate, mask] { gate->supply({0}, mask); });
  CHECK(e->step(md.in).tokens[0] == best_allowed, "deferred mask not applied");
  supplier.join();
}
