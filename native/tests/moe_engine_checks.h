// Mixture-of-experts engine checks: routing ties end to end (as torch.topk breaks them) and
// the loader's refusals of bad MoE configs. Included inside engine_test.cc's namespace after
// its helpers (load, StepBuilder, write_tiny_model, moe_spec, prompt_logits, expect_error).
#pragma once

// Routing ties are broken as torch.topk breaks them (cpu/moe.h): with a zero router every
// expert's probability is 1/8 and torch picks experts 6 and 5 (top-2 of 8). Changing every
// other expert leaves the logits as they were; changing expert 5 or 6 moves them.
void test_moe_ties(const std::string& root) {
  TinySpec s = moe_spec("qwen3_moe");
  s.dense_layer = -1;
  s.extra_config = ",\"num_experts\":8,\"num_experts_per_tok\":2,\"moe_intermediate_size\":16,\"norm_topk_prob\":true";
  auto zero = [](size_t) { return 0.0f; };
  auto wave = [](size_t j) { return 0.3f * std::sin(0.7f * static_cast<float>(j) + 1.0f); };
  ValueOverride base, others, chosen;
  for (int l = 0; l < s.layers; ++l) {
    const std::string block = "model.layers." + std::to_string(l) + ".mlp.";
    base[block + "gate.weight"] = zero;
    for (int e = 0; e < s.experts; ++e) {
      for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
        const std::string name = block + "experts." + std::to_string(e) + "." + proj + ".weight";
        (e == 5 || e == 6 ? chosen : others)[name] = wave;
      }
    }
  }
  others.insert(base.begin(), base.end());
  chosen.insert(base.begin(), base.end());
  write_tiny_model(root + "/ties", s, 41, {}, base);
  write_tiny_model(root + "/ties-others", s, 41, {}, others);
  write_tiny_model(root + "/ties-chosen", s, 41, {}, chosen);
  const auto prompt = seq(2, 11, s.vocab);
  const auto a = prompt_logits(root + "/ties", prompt);
  const auto b = prompt_logits(root + "/ties-others", prompt);
  const auto c = prompt_logits(root + "/ties-chosen", prompt);
  const float unchanged = max_abs_diff(a.data(), b.data(), a.size()), moved = max_abs_diff(a.data(), c.data(), a.size());
  CHECK(unchanged < 1e-6f, "moe ties: changing experts other than 6 and 5 moved the logits by %g (ties not broken as torch.topk)",
        unchanged);
  CHECK(moved > 1e-3f, "moe ties: changing experts 5 and 6 moved the logits only %g (they were not chosen)", moved);
  std::printf("moe ties: zero router -> experts 6, 5 as torch.topk (others changed: %.1e, chosen changed: %.2f)\n", unchanged, moved);
}

void test_moe_errors(const std::string& root) {
  TinySpec bad_k = moe_spec("mixtral");
  bad_k.extra_config = ",\"num_local_experts\":4,\"num_experts_per_tok\":5";
  write_tiny_model(root + "/moe-k", bad_k, 1);
  expect_error("top-k above the expert count", "config_invalid", [&] { load(root + "/moe-k"); });
  TinySpec deepseek;
  deepseek.arch = "DeepseekV3ForCausalLM";
  write_tiny_model(root + "/deepseek", deepseek, 1);
  expect_error("DeepSeek (MLA, grouped top-k)", "config_invalid", [&] { load(root + "/deepseek"); });
  TinySpec missing = moe_spec("qwen2_moe");
  write_tiny_model(root + "/moe-missing", missing, 1, {{"model.layers.1.mlp.experts.3.up_proj.weight", {16, 31}}});
  expect_error("an expert's shape", "config_invalid", [&] { load(root + "/moe-missing"); });
  auto e = load(root + "/moe-" + std::string("ok"), 8);
  EmbedInput in;
  in.tokens = {1, 2, 3};
  in.lengths = {3};
  expect_error("embeddings from a MoE model", "unavailable", [&] { e->embed(in); });
  // The CPU backend names the model; a GPU backend has no LoRA kernels at all (the binding's
  // loadLora names the model first on every backend).
  expect_error("a LoRA adapter on a MoE model", device() == "cpu" ? "invalid_argument" : "unavailable",
               [&] { e->backend().set_lora(0, std::make_shared<LoraAdapter>()); });
  CHECK(!e->supports_lora(), "a MoE model must not claim LoRA support (its card says supportsLora)");
}
