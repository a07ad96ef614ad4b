// The GPU backends' decode paths, engine against engine: decode graphs against eager steps, and
// the fused decode step against the per-op kernels (with the fast sampler against the one-block
// one). Included inside engine_test.cc's namespace after its helpers (load, StepBuilder,
// consistency_tolerance, seq, slice).
#pragma once

// A sequence the decode-path checks step: its prompt, block table, last token and position.
struct DecodeSeq {
  std::vector<int32_t> prompt, blocks;
  int32_t last = 0, pos = 0;
};

// Prefills every sequence on each engine in turn (greedy: they sample the same tokens), leaving
// each sequence's last token and position for the decode steps.
void prefill_each(std::initializer_list<Engine*> engines, std::vector<DecodeSeq>& seqs) {
  for (Engine* e : engines) {
    StepBuilder b;
    for (const DecodeSeq& s : seqs) b.add(s.prompt, 0, s.blocks, true);
    auto r = e->step(b.in);
    for (size_t i = 0; i < seqs.size(); ++i) {
      seqs[i].last = r.tokens[i];
      seqs[i].pos = static_cast<int32_t>(seqs[i].prompt.size());
    }
  }
}

// GPU backends: decode-only steps replay a captured graph (kernel arguments fixed at capture,
// tables rewritten in place); they must give what eager steps give, across batch sizes that
// share a padded bucket, a sequence leaving the batch, and contexts that outgrow the captured
// block-table width (a new graph).
void test_decode_graphs(const std::string& dir, const char* label) {
  if (device() == "cpu") return;
  auto with = load(dir, 64, true);
  auto without = load(dir, 64, false);
  auto* gpu = dynamic_cast<GpuBackend*>(&with->backend());
  CHECK(gpu != nullptr, "graphs: not a GpuBackend");
  if (gpu == nullptr) return;
  const int32_t V = static_cast<int32_t>(with->config().vocab_size);
  std::vector<DecodeSeq> seqs = {{seq(3, 5, V), {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
                         {seq(8, 9, V), {10, 11, 12, 13, 14, 15, 16, 17, 18, 19}},
                         {seq(1, 3, V), {20, 21, 22, 23, 24, 25, 26, 27, 28, 29}}};
  prefill_each({with.get(), without.get()}, seqs);
  float worst = 0;
  int token_mismatch = 0;
  const uint64_t replays_before = gpu->graph_replays();
  // 3 sequences, then 2 (the middle one leaves), then 3 again; contexts grow past 32 tokens
  // (8 table entries of 4): the width bucket doubles and a second graph is captured.
  for (int step = 0; step < 30; ++step) {
    std::vector<size_t> active = step >= 5 && step < 12 ? std::vector<size_t>{0, 2} : std::vector<size_t>{0, 1, 2};
    StepBuilder b;
    for (size_t i : active) b.add({seqs[i].last}, seqs[i].pos, seqs[i].blocks, true);
    auto a = with->step(b.in);
    auto e = without->step(b.in);
    worst = std::max(worst, max_abs_diff(a.logits.data(), e.logits.data(), a.logits.size()));
    for (size_t j = 0; j < active.size(); ++j) {
      token_mismatch += a.tokens[j] != e.tokens[j];
      seqs[active[j]].last = e.tokens[j];
      ++seqs[active[j]].pos;
    }
  }
  const uint64_t replays = gpu->graph_replays() - replays_before;
  CHECK(replays == 30, "graphs (%s): %llu of 30 decode steps replayed a graph", label, static_cast<unsigned long long>(replays));
  CHECK(gpu->graphs_captured() >= 2 && gpu->graphs_captured() <= 4, "graphs (%s): %zu captured (want one per bucket x width)", label, gpu->graphs_captured());
  CHECK(worst < consistency_tolerance(), "graphs (%s): replayed vs eager logits max diff %g", label, worst);
  CHECK(token_mismatch == 0, "graphs (%s): %d greedy tokens differ from eager steps", label, token_mismatch);
  std::printf("decode graphs (%s): 30 steps replayed from %zu graphs, max logit diff vs eager %.2e\n", label, gpu->graphs_captured(), worst);
}

// GPU backends: the fused decode path (<= 16 rows: gpu_backend_decode.cc; MoE models: the
// attention half fused, the experts' kernels after it) against the per-op
// kernels (TANDEM_GPU_DECODE=unfused) and the fast sampler against the one-block one
// (TANDEM_GPU_SAMPLER=block), engine against engine on the same steps: every decode logit equal
// bit for bit, every token equal (greedy, and seeded temperature / top-k / top-p / min-p rows
// with a logprob), and the fused path really taken. kv_dtype fp8: both over an e4m3 pool (the
// fused QKV epilogue writes it, the fused attention reads it).
void test_decode_paths(const std::string& dir, const char* label, const std::string& kv_dtype = "auto") {
  if (device() == "cpu") return;
  // Our own GEMMs on both: with cuBLASLt the per-op path's GEMMs would be another library's sums.
  auto load_own = [&] {
    EngineOptions o;
    o.model_dir = dir;
    o.backend.device = device();
    o.backend.num_blocks = 64;
    o.backend.block_size = 4;
    o.backend.max_batch_tokens = 256;
    o.backend.max_seqs = 16;
    o.backend.gemm = "own";
    o.backend.kv_cache_dtype = kv_dtype;
    o.threads = 2;
    return Engine::load(o);
  };
  auto fused = load_own();
  ::setenv("TANDEM_GPU_DECODE", "unfused", 1);
  ::setenv("TANDEM_GPU_SAMPLER", "block", 1);
  auto plain = load_own();
  ::unsetenv("TANDEM_GPU_DECODE");
  ::unsetenv("TANDEM_GPU_SAMPLER");
  auto* gpu = dynamic_cast<GpuBackend*>(&fused->backend());
  auto* ref = dynamic_cast<GpuBackend*>(&plain->backend());
  CHECK(gpu != nullptr && ref != nullptr, "decode paths (%s): not GpuBackends", label);
  if (gpu == nullptr || ref == nullptr) return;
  const int32_t V = static_cast<int32_t>(fused->config().vocab_size);
  auto params = [](float t, int32_t k, float p, float minp, uint64_t seed) {
    SamplingParams s;
    s.temperature = t;
    s.top_k = k;
    s.top_p = p;
    s.min_p = minp;
    s.seed = seed;
    return s;
  };
  const std::vector<SamplingParams> sp = {StepBuilder::greedy(), params(0.9f, 0, 0.9f, 0.0f, 11), params(1.2f, 5, 1.0f, 0.0f, 12),
                                          params(1.0f, 0, 1.0f, 0.05f, 13)};
  std::vector<DecodeSeq> seqs;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> blocks;
    for (int b = 0; b < 12; ++b) blocks.push_back(i * 12 + b);
    seqs.push_back({seq(2 + i, 5 + 3 * i, V), blocks});
  }
  prefill_each({fused.get(), plain.get()}, seqs);
  float worst = 0;
  int token_mismatch = 0;
  const uint64_t fused_before = gpu->fused_decode_steps();
  for (int step = 0; step < 12; ++step) {
    // 4 rows, then 1, then 3: the padded buckets 4, 1 and 4.
    const std::vector<size_t> active = step < 4 ? std::vector<size_t>{0, 1, 2, 3} : step < 8 ? std::vector<size_t>{2} : std::vector<size_t>{0, 1, 3};
    StepBuilder b;
    for (size_t i : active) b.add({seqs[i].last}, seqs[i].pos, seqs[i].blocks, true, sp[i], 2);
    auto x = fused->step(b.in);
    auto y = plain->step(b.in);
    worst = std::max(worst, max_abs_diff(x.logits.data(), y.logits.data(), x.logits.size()));
    for (size_t j = 0; j < active.size(); ++j) {
      token_mismatch += x.tokens[j] != y.tokens[j];
      seqs[active[j]].last = y.tokens[j];
      ++seqs[active[j]].pos;
    }
  }
  CHECK(gpu->fused_decode_steps() - fused_before == 12, "decode paths (%s): %llu of 12 decode steps took the fused path", label,
        static_cast<unsigned long long>(gpu->fused_decode_steps() - fused_before));
  CHECK(ref->fused_decode_steps() == 0, "decode paths (%s): TANDEM_GPU_DECODE=unfused still fused", label);
  CHECK(worst == 0.0f, "decode paths (%s): fused vs per-op logits max diff %g (want bit-identical)", label, worst);
  CHECK(token_mismatch == 0, "decode paths (%s): %d tokens differ between the fast and the one-block sampler", label, token_mismatch);
  std::printf("decode paths (%s): 12 fused decode steps equal the per-op kernels bit for bit, fast sampler = one-block sampler\n", label);
}
