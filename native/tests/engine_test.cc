// C++ test binary: drives the Engine without Node (so the CUDA backend of issue 7 can run
// the same checks on a GPU machine). It writes its own tiny random Llama/Qwen3 models, then
// checks chunking, prefix reuse, batching, sampling and error codes, plus the CPU kernels
// against double-precision references (gemm_checks.h, attention_checks.h).
//
//   tandem_native_test                         self-contained checks
//   tandem_native_test --golden DIR FILE.json  also compare with a goldens fixture
//   tandem_native_test --golden-only DIR FILE.json  only that comparison
//   tandem_native_test --quick                 one model's mixed steps and sampling only
//   tandem_native_test --quick-moe             the same on a tiny Qwen3-MoE
//   tandem_native_test --fp8                   the FP8 suite only (fp8_checks.h; on simt/cuda: the
//                                              GPU backend on FP8 checkpoints against the CPU's)
//   tandem_native_test --spec                  the speculative decoding checks only
//   env TANDEM_TEST_DEVICE=cuda|simt           run the engine checks on the GPU backend
//                                              (simt: its kernels on the SIMT harness)
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../src/core/engine.h"
#include "../src/core/error.h"
#include "../src/core/json.h"
#include "../src/core/lora.h"
#include "../src/core/safetensors.h"
#include "../src/cuda/gpu_backend.h"
#include "attention_checks.h"
#include "check.h"
#include "fp8_checks.h"
#include "gemm_checks.h"
#include "kv_pool_sizing_checks.h"
#include "moe_checks.h"
#include "spec_checks.h"

using namespace tandem;

namespace {

using tandem_test::g_checks;
using tandem_test::g_failures;

std::string device() {
  const char* d = std::getenv("TANDEM_TEST_DEVICE");
  return d != nullptr ? d : "cpu";
}

#include "tiny_model.h"

std::unique_ptr<Engine> load(const std::string& dir, int64_t blocks = 64, bool graphs = true, const std::string& dev = device()) {
  EngineOptions o;
  o.model_dir = dir;
  o.backend.device = dev;
  o.backend.num_blocks = blocks;
  o.backend.block_size = 4;
  o.backend.max_batch_tokens = 256;
  o.backend.max_seqs = 16;
  o.backend.cuda_graphs = graphs;
  o.threads = 2;
  return Engine::load(o);
}

/** Logits agree to this much between two ways of computing the same rows (batching, chunking). */
float consistency_tolerance() {
  // bf16 backends round activations between kernels, and a GEMM's rows may take a different
  // kernel (few rows vs tensor cores) depending on how many rows share the step.
  return device() == "cpu" ? 1e-4f : 3e-2f;
}

// Builder for one step; block tables are given explicitly so tests control block sharing.
struct StepBuilder {
  StepInput in;
  StepBuilder& add(const std::vector<int32_t>& toks, int32_t start, const std::vector<int32_t>& blocks, bool sample,
                   SamplingParams sp = greedy(), int32_t logprobs = -1) {
    SeqInput s;
    s.token_offset = static_cast<int32_t>(in.tokens.size());
    s.num_tokens = static_cast<int32_t>(toks.size());
    s.start_pos = start;
    s.block_offset = static_cast<int32_t>(in.block_tables.size());
    s.num_blocks = static_cast<int32_t>(blocks.size());
    s.sample = sample;
    s.sampling = sp;
    s.num_top_logprobs = logprobs;
    in.tokens.insert(in.tokens.end(), toks.begin(), toks.end());
    in.block_tables.insert(in.block_tables.end(), blocks.begin(), blocks.end());
    in.seqs.push_back(s);
    in.return_logits = true;
    return *this;
  }
  static SamplingParams greedy() {
    SamplingParams p;
    p.temperature = 0;
    return p;
  }
};

float max_abs_diff(const float* a, const float* b, size_t n) {
  float m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

std::vector<int32_t> seq(int32_t from, int32_t n, int32_t mod) {
  std::vector<int32_t> v;
  for (int32_t i = 0; i < n; ++i) v.push_back((from + i * 7) % mod);
  return v;
}

std::vector<int32_t> slice(const std::vector<int32_t>& v, size_t b, size_t e) {
  return std::vector<int32_t>(v.begin() + static_cast<int64_t>(b), v.begin() + static_cast<int64_t>(e));
}

void test_consistency(const std::string& dir, const char* label) {
  auto e = load(dir);
  const size_t V = static_cast<size_t>(e->config().vocab_size);
  const auto prompt = seq(3, 13, static_cast<int32_t>(V));
  const std::vector<int32_t> blocks_a{0, 1, 2, 3};

  StepBuilder full;
  full.add(prompt, 0, blocks_a, true);
  auto ref = e->step(full.in);
  CHECK(ref.logits.size() == V, "%s: logits size %zu", label, ref.logits.size());

  // Chunked prefill 5 + 5 + 3 into other blocks.
  const std::vector<int32_t> blocks_b{4, 5, 6, 7};
  StepBuilder c1, c2, c3;
  c1.add(slice(prompt, 0, 5), 0, {4, 5}, false);
  e->step(c1.in);
  c2.add(slice(prompt, 5, 10), 5, {4, 5, 6}, false);
  e->step(c2.in);
  c3.add(slice(prompt, 10, 13), 10, blocks_b, true);
  auto chunked = e->step(c3.in);
  const float tol = consistency_tolerance();
  float d = max_abs_diff(ref.logits.data(), chunked.logits.data(), V);
  CHECK(d < tol, "%s: chunked vs unchunked max diff %g", label, d);
  CHECK(chunked.tokens[0] == ref.tokens[0], "%s: chunked token differs", label);

  // Prefix hit: reuse blocks 0,1 (8 tokens) computed by the first run, compute the rest only.
  StepBuilder hit;
  hit.add(slice(prompt, 8, 13), 8, {0, 1, 8, 9}, true);
  auto prefix = e->step(hit.in);
  d = max_abs_diff(ref.logits.data(), prefix.logits.data(), V);
  CHECK(d < tol, "%s: prefix-hit vs full max diff %g", label, d);

  // Mixed batch: a decode of the first sequence + a fresh prefill + a non-sampling chunk.
  auto other = seq(11, 9, static_cast<int32_t>(V));
  StepBuilder alone;
  alone.add(other, 0, {10, 11, 12}, true);
  auto other_alone = e->step(alone.in);
  StepBuilder mixed;
  mixed.add({ref.tokens[0]}, 13, blocks_a, true);
  mixed.add(other, 0, {13, 14, 15}, true);
  mixed.add(slice(prompt, 0, 6), 0, {16, 17}, false);
  auto m = e->step(mixed.in);
  CHECK(m.tokens.size() == 2, "%s: mixed batch sampled %zu", label, m.tokens.size());
  d = max_abs_diff(other_alone.logits.data(), m.logits.data() + V, V);
  CHECK(d < tol, "%s: mixed vs alone max diff %g", label, d);
  StepBuilder dec_alone;
  dec_alone.add({ref.tokens[0]}, 13, blocks_b, true);  // chunked copy of the same sequence
  auto da = e->step(dec_alone.in);
  d = max_abs_diff(da.logits.data(), m.logits.data(), V);
  CHECK(d < tol, "%s: decode in batch vs alone max diff %g", label, d);
}

template <typename F>
void expect_error(const char* label, const char* code, F&& fn) {
  try {
    fn();
    CHECK(false, "%s: no error raised", label);
  } catch (const NativeError& err) {
    CHECK(std::strcmp(err.code_name(), code) == 0, "%s: code %s (%s), wanted %s", label, err.code_name(), err.what(), code);
  }
}

// Engine::embed: the last-token pooled vector (unnormalized) is the final-norm hidden state the
// lm_head reads, so with tied embeddings E . v must equal step()'s logits; a batch split over
// several passes by a 6-block pool equals its sequences one by one; normalization gives unit
// vectors; mean pooling of one token equals last-token pooling.
void test_embed(const std::string& dir, const char* label) {
  auto e = load(dir, 6);
  const int64_t V = e->config().vocab_size, H = e->config().hidden_size;
  const float tol = consistency_tolerance();
  const auto prompt = seq(5, 11, static_cast<int32_t>(V));
  StepBuilder b;
  b.add(prompt, 0, {0, 1, 2}, true);
  auto logits = e->step(b.in).logits;
  EmbedInput one;
  one.tokens = prompt;
  one.lengths = {static_cast<int32_t>(prompt.size())};
  one.pooling = Pooling::kLast;
  one.normalize = false;
  auto v = e->embed(one).vectors;
  auto store = SafetensorsStore::open_dir(dir);
  const TensorView& t = store->require("model.embed_tokens.weight", {V, H});
  std::vector<float> emb(static_cast<size_t>(V * H));
  convert_to_f32(t, emb.data());
  float worst = 0;
  for (int64_t r = 0; r < V; ++r) {
    double dot = 0;
    for (int64_t j = 0; j < H; ++j) dot += static_cast<double>(emb[static_cast<size_t>(r * H + j)]) * v[static_cast<size_t>(j)];
    worst = std::max(worst, std::fabs(static_cast<float>(dot) - logits[static_cast<size_t>(r)]));
  }
  CHECK(worst < tol * 10, "%s embed: E . last-token vector vs step logits differ by %g", label, worst);

  // 9 + 4 + 11 + 1 tokens need 3 + 1 + 3 + 1 blocks of 4: more than the pool's 6, so two passes.
  EmbedInput batch;
  batch.pooling = Pooling::kMean;
  const std::vector<std::vector<int32_t>> seqs{seq(1, 9, static_cast<int32_t>(V)), seq(2, 4, static_cast<int32_t>(V)), prompt, {7}};
  for (const auto& s : seqs) {
    batch.tokens.insert(batch.tokens.end(), s.begin(), s.end());
    batch.lengths.push_back(static_cast<int32_t>(s.size()));
  }
  auto all = e->embed(batch);
  CHECK(all.dim == H && all.vectors.size() == seqs.size() * static_cast<size_t>(H), "%s embed: output shape", label);
  for (size_t i = 0; i < seqs.size(); ++i) {
    EmbedInput single;
    single.tokens = seqs[i];
    single.lengths = {static_cast<int32_t>(seqs[i].size())};
    single.pooling = Pooling::kMean;
    auto alone = e->embed(single).vectors;
    const float d = max_abs_diff(all.vectors.data() + i * static_cast<size_t>(H), alone.data(), static_cast<size_t>(H));
    CHECK(d < tol, "%s embed: sequence %zu in a batch differs from alone by %g", label, i, d);
    double norm = 0;
    for (float x : alone) norm += static_cast<double>(x) * x;
    CHECK(std::fabs(std::sqrt(norm) - 1.0) < 1e-5, "%s embed: norm %g", label, std::sqrt(norm));
  }
  EmbedInput last1 = batch;
  last1.tokens = {7};
  last1.lengths = {1};
  EmbedInput mean1 = last1;
  last1.pooling = Pooling::kLast;
  const float d1 = max_abs_diff(e->embed(last1).vectors.data(), e->embed(mean1).vectors.data(), static_cast<size_t>(H));
  CHECK(d1 < 1e-6f, "%s embed: one token, mean vs last differ by %g", label, d1);
  bool refused = false;
  try {
    EmbedInput bad = last1;
    bad.tokens = {static_cast<int32_t>(V)};
    e->embed(bad);
  } catch (const NativeError& err) {
    refused = err.code() == ErrorCode::kInvalidArgument;
  }
  CHECK(refused, "%s embed: a token outside the vocabulary is refused", label);

  // Cancel is asked before every pass: the two-pass batch answering "stop" at the second ask
  // runs one pass, then fails 'cancelled'; the engine serves the next call as before.
  int asks = 0;
  EmbedInput stop = batch;
  stop.cancelled = [&asks] { return ++asks == 2; };
  expect_error("embed cancelled between passes", "cancelled", [&] { e->embed(stop); });
  CHECK(asks == 2, "%s embed: cancel asked %d times before stopping, wanted 2 (once per pass)", label, asks);
  const auto again = e->embed(batch);
  CHECK(max_abs_diff(again.vectors.data(), all.vectors.data(), all.vectors.size()) < tol, "%s embed: a call after a cancel differs", label);
}

void test_errors(const std::string& root) {
  expect_error("missing dir", "not_found", [&] { load(root + "/does-not-exist"); });
  TinySpec bad;
  bad.extra_config = ",\"sliding_window\":4096";
  bad.arch = "MistralForCausalLM";
  write_tiny_model(root + "/sw", bad, 1);
  expect_error("sliding window", "config_invalid", [&] { load(root + "/sw"); });
  TinySpec moe;
  moe.extra_config = ",\"num_local_experts\":8";
  write_tiny_model(root + "/moe", moe, 1);
  expect_error("moe", "config_invalid", [&] { load(root + "/moe"); });
  TinySpec rope;
  rope.extra_config = ",\"rope_scaling\":{\"rope_type\":\"dynamic\",\"factor\":4.0}";
  write_tiny_model(root + "/rope", rope, 1);
  expect_error("rope type", "config_invalid", [&] { load(root + "/rope"); });
  write_tiny_model(root + "/shape", TinySpec{}, 1, {{"model.layers.1.mlp.up_proj.weight", {64, 31}}});
  expect_error("shape mismatch", "config_invalid", [&] { load(root + "/shape"); });
  write_tiny_model(root + "/ok", TinySpec{}, 1);
  auto e = load(root + "/ok", 8);
  StepBuilder b;
  b.add({1, 2, 3}, 0, {9}, true);
  expect_error("block out of range", "invalid_argument", [&] { e->step(b.in); });
  StepBuilder short_table;
  short_table.add({1, 2, 3, 4, 5}, 0, {0}, true);
  expect_error("short block table", "invalid_argument", [&] { e->step(short_table.in); });
}

/** Tiny mixtures of experts of the three families (config fields and per-expert tensors). */
TinySpec moe_spec(const std::string& family) {
  TinySpec s;
  if (family == "qwen3_moe") {  // a dense layer between sparse ones, 8 experts, top-2 renormalized
    s.arch = "Qwen3MoeForCausalLM";
    s.tie = s.qk_norm = true;
    s.head_dim = 16;
    s.layers = 3;
    s.experts = 8;
    s.expert_inter = 16;
    s.dense_layer = 1;
    s.extra_config = ",\"num_experts\":8,\"num_experts_per_tok\":2,\"moe_intermediate_size\":16,\"norm_topk_prob\":true,\"mlp_only_layers\":[1]";
  } else if (family == "mixtral") {  // 4 experts of intermediate_size, top-2, always renormalized
    s.arch = "MixtralForCausalLM";
    s.mixtral = true;
    s.experts = 4;
    s.expert_inter = s.inter;
    s.extra_config = ",\"num_local_experts\":4,\"num_experts_per_tok\":2";
  } else {  // qwen2_moe: top-4 of 8 not renormalized, plus a gated shared expert
    s.arch = "Qwen2MoeForCausalLM";
    s.qkv_bias = true;
    s.experts = 8;
    s.expert_inter = 16;
    s.shared = 32;
    s.extra_config = ",\"num_experts\":8,\"num_experts_per_tok\":4,\"moe_intermediate_size\":16,\"shared_expert_intermediate_size\":32";
  }
  return s;
}

/** Last-position logits of one prompt on a fresh engine. */
std::vector<float> prompt_logits(const std::string& dir, const std::vector<int32_t>& prompt) {
  auto e = load(dir);
  StepBuilder b;
  b.add(prompt, 0, {0, 1, 2, 3, 4, 5}, true);
  return e->step(b.in).logits;
}

#include "moe_engine_checks.h"
#include "golden_checks.h"

// A step that fails between its forward and its sample (masks supplied for the wrong number of
// sequences) leaves its forward undrained. The next forward must drain it before it resets the
// layer progress (a late mark would announce an old layer as the new forward's), and compute
// what it computes on a fresh engine.
void test_undrained_forward(const std::string& dir) {
  if (device() == "cpu") return;
  auto e = load(dir, 64, false);
  auto fresh = load(dir, 64, false);
  auto* gpu = dynamic_cast<GpuBackend*>(&e->backend());
  CHECK(gpu != nullptr, "undrained: not a GpuBackend");
  if (gpu == nullptr) return;
  const int32_t V = static_cast<int32_t>(e->config().vocab_size);
  const size_t words = static_cast<size_t>((V + 31) / 32);
  StepBuilder bad;
  bad.add(seq(3, 6, V), 0, {0, 1}, true);
  bad.in.deferred_masks = std::make_shared<DeferredMasks>();
  bad.in.deferred_masks->supply({0, 0}, std::vector<uint32_t>(words, ~0u));  // two rows for one sequence
  std::string code;
  try {
    e->step(bad.in);
  } catch (const NativeError& err) {
    code = err.code_name();
  }
  CHECK(code == "invalid_argument", "undrained: the bad masks fail the step (got '%s')", code.c_str());
  CHECK(gpu->undrained_forwards() == 0, "undrained: counted before the next forward");
  StepBuilder good;
  good.add(seq(4, 7, V), 0, {2, 3}, true);
  const auto got = e->step(good.in);
  const auto want = fresh->step(good.in);
  CHECK(gpu->undrained_forwards() == 1, "undrained: the next forward drained %llu forwards (want 1)",
        static_cast<unsigned long long>(gpu->undrained_forwards()));
  CHECK(e->layer_progress()[1] == e->config().num_layers, "undrained: layer progress %lld after the step",
        static_cast<long long>(e->layer_progress()[1]));
  CHECK(got.tokens == want.tokens && max_abs_diff(got.logits.data(), want.logits.data(), got.logits.size()) == 0,
        "undrained: the next step differs from a fresh engine's");
}

// Embedding pooling is one host implementation for both backends: where their hidden states
// are equal, their vectors are equal bit for bit. A model whose decoder layers are all zeros
// leaves the residual stream equal to the token embeddings, which are bf16-exact, so the CPU
// backend (f32) and the GPU backend (bf16 table) start pooling from the same floats.
void test_pooling_across_backends(const std::string& root) {
  TinySpec s;
  s.zero_layers = true;
  s.bf16_exact = true;
  const std::string dir = root + "/zero-layers";
  write_tiny_model(dir, s, 13);
  auto cpu = load(dir, 16, false, "cpu");
  auto simt = load(dir, 16, false, "simt");
  const int32_t V = static_cast<int32_t>(cpu->config().vocab_size);
  EmbedInput in;
  const std::vector<std::vector<int32_t>> seqs{seq(2, 9, V), {5}, seq(3, 14, V)};
  for (const auto& q : seqs) {
    in.tokens.insert(in.tokens.end(), q.begin(), q.end());
    in.lengths.push_back(static_cast<int32_t>(q.size()));
  }
  for (Pooling pooling : {Pooling::kLast, Pooling::kMean}) {
    for (bool normalize : {false, true}) {
      in.pooling = pooling;
      in.normalize = normalize;
      const auto a = cpu->embed(in).vectors, b = simt->embed(in).vectors;
      size_t differ = 0;
      for (size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
      CHECK(a.size() == b.size() && differ == 0, "pooling %s%s: %zu of %zu cpu and simt values differ (max %g)",
            pooling == Pooling::kLast ? "last" : "mean", normalize ? ", normalized" : "", differ, a.size(),
            max_abs_diff(a.data(), b.data(), std::min(a.size(), b.size())));
    }
  }
}

#include "spec_engine_checks.h"
#include "decode_engine_checks.h"
#include "sampling_engine_checks.h"

}  // namespace

int main(int argc, char** argv) {
  char tmpl[] = "/tmp/tandem-native-test-XXXXXX";
  std::string root = ::mkdtemp(tmpl);
  // --quick: one model's chunked, prefix-hit and mixed steps plus sampling (compute-sanitizer runs this).
  const bool quick = argc == 2 && std::string(argv[1]) == "--quick";
  // --quick-moe: the same for a Qwen3-MoE model (compute-sanitizer on the MoE kernels, scripts/device/moe-check.sh).
  const bool quick_moe = argc == 2 && std::string(argv[1]) == "--quick-moe";
  // --fp8: the FP8 suite alone (the GPU backend on FP8 checkpoints against the CPU backend).
  const bool fp8_only = argc == 2 && std::string(argv[1]) == "--fp8";
  // --spec: the speculative decoding checks only (scripts/device/spec-check.sh runs them on a GPU).
  const bool spec_only = argc == 2 && std::string(argv[1]) == "--spec";
  // --golden-only DIR FILE: one fixture without the suite (on simt the suite takes a minute per run).
  const bool golden_only = argc == 4 && std::string(argv[1]) == "--golden-only";
  auto finish = [&root]() {
    std::string cleanup = "rm -rf '" + root + "'";
    if (std::system(cleanup.c_str()) != 0) std::fprintf(stderr, "warning: could not remove %s\n", root.c_str());
    std::printf("%d checks, %d failures\n", g_checks, g_failures);
    return g_failures == 0 ? 0 : 1;
  };
  try {
    if (golden_only) {
      test_golden(argv[2], argv[3]);
      return finish();
    }
    if (spec_only) {
      TinySpec llama;
      write_tiny_model(root + "/llama", llama, 7);
      test_speculative(root);
      return finish();
    }
    if (fp8_only) {
      if (device() == "cpu") {
        tandem_test::test_fp8(root);
      } else {
        tandem_test::test_fp8_gpu_backend(root, device());
      }
      return finish();
    }
    if (quick || quick_moe) {
      const std::string dir = root + (quick_moe ? "/qwen3_moe" : "/llama");
      write_tiny_model(dir, quick_moe ? moe_spec("qwen3_moe") : TinySpec{}, 7);
      test_consistency(dir, quick_moe ? "qwen3_moe" : "llama");
      test_sampling(dir);
      return finish();
    }
    tandem_test::test_gemm_shapes();
    tandem_test::test_paged_attention();
    tandem_test::test_kv_pool_sizing();
    TinySpec llama;
    write_tiny_model(root + "/llama", llama, 7);
    test_consistency(root + "/llama", "llama");
    TinySpec qwen3;
    qwen3.arch = "Qwen3ForCausalLM";
    qwen3.tie = true;
    qwen3.qk_norm = true;
    qwen3.head_dim = 16;
    write_tiny_model(root + "/qwen3", qwen3, 8);
    test_consistency(root + "/qwen3", "qwen3");
    test_decode_paths(root + "/qwen3", "qwen3");
    test_embed(root + "/qwen3", "qwen3");
    TinySpec qwen2;
    qwen2.arch = "Qwen2ForCausalLM";
    qwen2.tie = true;
    qwen2.qkv_bias = true;
    write_tiny_model(root + "/qwen2", qwen2, 9);
    test_consistency(root + "/qwen2", "qwen2");
    test_decode_paths(root + "/qwen2", "qwen2");
    test_decode_paths(root + "/qwen2", "qwen2, e4m3 KV", "fp8");
    test_sampling(root + "/llama");
    test_decode_graphs(root + "/llama", "llama");
    test_undrained_forward(root + "/llama");
    test_pooling_across_backends(root);
    test_speculative(root);
    test_errors(root);
    tandem_test::test_torch_topk();
    tandem_test::test_moe_route_and_grouping();
    for (const char* family : {"qwen3_moe", "mixtral", "qwen2_moe"}) {
      write_tiny_model(root + "/" + family, moe_spec(family), 17);
      test_consistency(root + "/" + family, family);
    }
    // MoE decode steps are captured too (the router, the expert grouping and the grouped GEMMs).
    test_decode_graphs(root + "/qwen3_moe", "qwen3_moe");
    test_decode_paths(root + "/qwen3_moe", "qwen3_moe");
    test_decode_paths(root + "/qwen2_moe", "qwen2_moe");
    write_tiny_model(root + "/moe-ok", moe_spec("qwen3_moe"), 3);
    test_moe_ties(root);
    test_moe_errors(root);
    if (device() == "cpu") tandem_test::test_fp8(root);
    if (argc == 4 && std::string(argv[1]) == "--golden") test_golden(argv[2], argv[3]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL: uncaught exception: %s\n", e.what());
    ++g_failures;
  }
  return finish();
}
