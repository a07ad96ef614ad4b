// tandem_moe_bench: the mixture-of-experts GPU benchmark (issue 36), for scripts/device/moe-check.sh.
//
//   tandem_moe_bench [--device cuda|simt] [--shape qwen3-30b-a3b|tiny-moe] [--bandwidth-gbs N]
//                    [--steps N] [--quantization fp8] --json FILE
//
// --quantization fp8: the same random model quantized at load (experts e4m3 per row, read by the
// grouped GEMMs as such; attention and dense layers the dense FP8 path): the bytes a decode step
// reads count one byte per quantized weight, so its roofline share compares with the bf16 run's.
//
// The model is built in memory, not read from disk: random bf16 weights (about 61 GB for the
// Qwen3-30B-A3B shape: 48 layers, hidden 2048, 128 experts, top-8, expert width 768, vocabulary
// 151,936) would not fit a GPU machine's disk beside everything else. Every tensor views a
// window of one random host buffer (norms view a buffer of ones); each still becomes its own
// device allocation, so the GPU reads as many distinct bytes as the real model.
//
// Measured, each after a warm-up, with CUDA graphs for decode:
//   decode b1     ms per step and tok/s; the bytes a step must read (attention weights, the
//                 router and the 8 chosen experts of every layer, the LM head, the KV read) and
//                 the share of the HBM roofline (--bandwidth-gbs, from tandem_gpu_bench bandwidth)
//   decode b64    the same, with the distinct experts each layer ran (the bytes read follow them)
//   prefill 2k    one 2048-token prompt: ms, tok/s, and TFLOP/s counted on active FLOPs
//                 (2 x active non-embedding parameters per token, plus attention); as planned,
//                 then with the grouped GEMMs forced onto 8-row tiles (the decode path), 64-row
//                 tiles and 128-row tiles (GpuBackend::force_moe_gemm), then as planned
//                 again: the side-by-side rows behind gpu_backend_moe.cc's thresholds
// The JSON also records the grouped GEMMs' tile choice per shape (GpuBackend::description).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../../native/src/core/json.h"
#include "../../native/src/core/model_config.h"
#include "../../native/src/core/quant_config.h"
#include "../../native/src/core/safetensors.h"
#include "../../native/src/core/thread_pool.h"
#include "../../native/src/cuda/bf16.h"
#include "../../native/src/cuda/device.h"
#include "../../native/src/cuda/gpu_backend.h"
#include "../../native/src/cuda/kernel_api.h"
#include "../../native/src/cuda/moe_api.h"

using namespace tandem;

namespace {

std::string arg(int argc, char** argv, const std::string& flag, const std::string& fallback = "") {
  for (int i = 1; i + 1 < argc; ++i) {
    if (flag == argv[i]) return argv[i + 1];
  }
  return fallback;
}

std::string shape_config(const std::string& shape) {
  if (shape == "qwen3-30b-a3b") {
    return R"({"architectures":["Qwen3MoeForCausalLM"],"model_type":"qwen3_moe","vocab_size":151936,"hidden_size":2048,
      "intermediate_size":6144,"num_hidden_layers":48,"num_attention_heads":32,"num_key_value_heads":4,"head_dim":128,
      "max_position_embeddings":40960,"rope_theta":1000000.0,"rms_norm_eps":1e-6,"tie_word_embeddings":false,
      "num_experts":128,"num_experts_per_tok":8,"moe_intermediate_size":768,"norm_topk_prob":true,
      "decoder_sparse_step":1,"mlp_only_layers":[],"hidden_act":"silu","eos_token_id":151645})";
  }
  if (shape == "tiny-moe") {  // the SIMT dry run
    return R"({"architectures":["Qwen3MoeForCausalLM"],"model_type":"qwen3_moe","vocab_size":512,"hidden_size":64,
      "intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":32,
      "max_position_embeddings":4096,"rope_theta":1000000.0,"rms_norm_eps":1e-6,"tie_word_embeddings":false,
      "num_experts":16,"num_experts_per_tok":4,"moe_intermediate_size":32,"norm_topk_prob":true,
      "decoder_sparse_step":1,"mlp_only_layers":[],"hidden_act":"silu","eos_token_id":2})";
  }
  throw std::runtime_error("unknown shape '" + shape + "' (qwen3-30b-a3b, tiny-moe)");
}

/** Every tensor the config implies, with its shape (the names the loader reads). */
std::vector<std::pair<std::string, std::vector<int64_t>>> tensor_shapes(const ModelConfig& c) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> t;
  const int64_t h = c.hidden_size;
  t.push_back({"model.embed_tokens.weight", {c.vocab_size, h}});
  t.push_back({"model.norm.weight", {h}});
  if (!c.tie_word_embeddings) t.push_back({"lm_head.weight", {c.vocab_size, h}});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    auto p = [&](const std::string& s) { return "model.layers." + std::to_string(l) + "." + s; };
    t.push_back({p("input_layernorm.weight"), {h}});
    t.push_back({p("post_attention_layernorm.weight"), {h}});
    t.push_back({p("self_attn.q_proj.weight"), {c.q_dim(), h}});
    t.push_back({p("self_attn.k_proj.weight"), {c.kv_dim(), h}});
    t.push_back({p("self_attn.v_proj.weight"), {c.kv_dim(), h}});
    t.push_back({p("self_attn.o_proj.weight"), {h, c.q_dim()}});
    t.push_back({p("self_attn.q_norm.weight"), {c.head_dim}});
    t.push_back({p("self_attn.k_norm.weight"), {c.head_dim}});
    const int64_t e_count = c.moe.num_experts, inter = c.moe.expert_intermediate;
    t.push_back({p("mlp.gate.weight"), {e_count, h}});
    for (int64_t e = 0; e < e_count; ++e) {
      const std::string x = "mlp.experts." + std::to_string(e) + ".";
      t.push_back({p(x + "gate_proj.weight"), {inter, h}});
      t.push_back({p(x + "up_proj.weight"), {inter, h}});
      t.push_back({p(x + "down_proj.weight"), {h, inter}});
    }
  }
  return t;
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Bench {
  GpuBackend& gpu;
  const ModelConfig& c;
  int32_t next_block = 0;
  struct Seq {
    std::vector<int32_t> blocks;
    int32_t pos = 0, last = 0;
  };

  std::vector<int32_t> take_blocks(int32_t n) {
    std::vector<int32_t> b;
    for (int32_t i = 0; i < n; ++i) b.push_back(next_block++);
    return b;
  }

  /** One forward over seqs (each its tokens), greedy sample of every sequence's last token. */
  std::vector<int32_t> step(std::vector<Seq*>& seqs, const std::vector<std::vector<int32_t>>& tokens) {
    ForwardBatch batch;
    std::vector<int32_t> flat;
    for (const auto& t : tokens) flat.insert(flat.end(), t.begin(), t.end());
    batch.tokens = flat.data();
    batch.num_tokens = static_cast<int32_t>(flat.size());
    int32_t at = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      ForwardSeq s;
      s.token_offset = at;
      s.num_tokens = static_cast<int32_t>(tokens[i].size());
      s.start_pos = seqs[i]->pos;
      s.block_table = seqs[i]->blocks.data();
      s.num_blocks = static_cast<int32_t>(seqs[i]->blocks.size());
      s.want_logits = true;
      batch.seqs.push_back(s);
      at += s.num_tokens;
    }
    batch.num_logit_rows = static_cast<int32_t>(seqs.size());
    gpu.forward(batch);
    std::vector<SampleRow> rows(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) {
      rows[i].logit_row = static_cast<int32_t>(i);
      rows[i].params.temperature = 0;
      rows[i].position = seqs[i]->pos + static_cast<int64_t>(tokens[i].size());
    }
    SampledRows out;
    gpu.sample(rows, out);
    for (size_t i = 0; i < seqs.size(); ++i) {
      seqs[i]->pos += static_cast<int32_t>(tokens[i].size());
      seqs[i]->last = out.tokens[i];
    }
    return out.tokens;
  }
};

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string device = arg(argc, argv, "--device", "cuda");
    const std::string shape = arg(argc, argv, "--shape", device == "simt" ? "tiny-moe" : "qwen3-30b-a3b");
    const std::string json_path = arg(argc, argv, "--json");
    const double bandwidth_gbs = std::stod(arg(argc, argv, "--bandwidth-gbs", "0"));
    const int steps = std::stoi(arg(argc, argv, "--steps", device == "simt" ? "3" : "64"));
    ModelConfig c = ModelConfig::from_json(Json::parse(shape_config(shape), shape), shape);
    const std::string quantization = arg(argc, argv, "--quantization", "none");
    if (quantization != "none" && quantization != "fp8") throw std::invalid_argument("--quantization must be none or fp8");
    const bool fp8 = quantization == "fp8";
    if (fp8) apply_quantization_option(c.quant, "fp8");

    // Host data: one random window for every matrix, ones for every vector (norms).
    const auto shapes = tensor_shapes(c);
    size_t largest = 0;
    for (const auto& [name, s] : shapes) {
      size_t n = 1;
      for (int64_t d : s) n *= static_cast<size_t>(d);
      largest = std::max(largest, n);
    }
    const size_t window = largest + (size_t{1} << 20);
    std::vector<uint16_t> random(window), ones(static_cast<size_t>(std::max(c.hidden_size, c.head_dim)));
    {
      std::mt19937 rng(7);
      std::normal_distribution<float> normal(0.0f, 0.02f);
      for (auto& v : random) v = gpu::float_to_bf16_bits(normal(rng));
      for (auto& v : ones) v = gpu::float_to_bf16_bits(1.0f);
    }
    std::vector<TensorView> views;
    size_t salt = 0;
    for (const auto& [name, s] : shapes) {
      TensorView v;
      v.name = name;
      v.dtype = DType::kBF16;
      v.shape = s;
      size_t n = v.num_elements();
      if (s.size() == 1) {
        v.data = reinterpret_cast<const uint8_t*>(ones.data());
      } else {
        const size_t offset = ((salt++ * 104729) % (window - n + 1)) & ~size_t{7};
        v.data = reinterpret_cast<const uint8_t*>(random.data() + offset);
      }
      views.push_back(std::move(v));
    }
    auto store = SafetensorsStore::from_views(std::move(views));

    BackendOptions o;
    o.device = device;
    o.block_size = 16;
    o.num_blocks = device == "simt" ? 128 : 2048;
    o.max_batch_tokens = device == "simt" ? 256 : 2048;
    o.max_seqs = 64;
    ThreadPool pool(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    const double t_load = now_s();
    std::unique_ptr<gpu::Device> dev = device == "simt" ? gpu::make_simt_device() : gpu::make_cuda_device(0);
    std::unique_ptr<gpu::KernelApi> kernels = device == "simt" ? gpu::make_simt_kernels() : gpu::make_cuda_kernels();
    GpuBackend gpu(c, *store, o, pool, std::move(dev), std::move(kernels));
    const double load_s = now_s() - t_load;
    std::printf("loaded %s on %s in %.1f s: %s\n", shape.c_str(), device.c_str(), load_s, gpu.description().c_str());

    const ParamCounts params = count_params(c);
    const MoeConfig& m = c.moe;
    const double h = static_cast<double>(c.hidden_size);
    const double weight_bytes = fp8 ? 1.0 : 2.0;  // the router, embeddings and LM head stay bf16
    const double attn_bytes = weight_bytes * static_cast<double>(c.num_layers) * (h * (c.q_dim() + 2 * c.kv_dim()) + c.q_dim() * h);
    const double router_bytes = 2.0 * static_cast<double>(c.num_layers) * m.num_experts * h;
    const double expert_bytes = weight_bytes * 3.0 * h * static_cast<double>(m.expert_intermediate);
    const double head_bytes = 2.0 * static_cast<double>(c.vocab_size) * h;
    const double kv_token_bytes = 2.0 * 2.0 * static_cast<double>(c.num_layers) * static_cast<double>(c.kv_dim());
    Bench b{gpu, c};
    const int prompt = device == "simt" ? 8 : 128;
    std::mt19937 rng(3);
    auto prompt_tokens = [&](int n) {
      std::vector<int32_t> t(static_cast<size_t>(n));
      for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(c.vocab_size));
      return t;
    };
    auto blocks_for = [&](int tokens) { return (tokens + 15) / 16; };

    // The JSON so far goes to --json after every measurement ("complete": false), so a run cut
    // short by its step's timeout (scripts/device/run-all.sh) still leaves what it measured.
    std::ostringstream js;
    auto flush = [&](bool complete) {
      const std::string text = js.str() + ",\"complete\":" + (complete ? "true" : "false") + "}";
      if (!json_path.empty()) std::ofstream(json_path) << text << "\n";
      return text;
    };
    js << "{\"shape\":\"" << shape << "\",\"device\":\"" << device << "\",\"quantization\":\"" << quantization << "\",\"load_seconds\":" << load_s
       << ",\"params_total\":" << params.total << ",\"params_active\":" << params.active;
    auto decode_bench = [&](int batch, const char* label) {
      std::vector<Bench::Seq> seqs(static_cast<size_t>(batch));
      std::vector<Bench::Seq*> ptrs;
      for (auto& s : seqs) {
        s.blocks = b.take_blocks(blocks_for(prompt + steps + 8));
        ptrs.push_back(&s);
      }
      // Prefill in groups that fit max_batch_tokens.
      const int per = std::max(1, static_cast<int>(o.max_batch_tokens) / prompt);
      for (int i = 0; i < batch; i += per) {
        std::vector<Bench::Seq*> part(ptrs.begin() + i, ptrs.begin() + std::min(batch, i + per));
        std::vector<std::vector<int32_t>> toks;
        for (size_t j = 0; j < part.size(); ++j) toks.push_back(prompt_tokens(prompt));
        b.step(part, toks);
      }
      auto decode = [&]() {
        std::vector<std::vector<int32_t>> toks;
        for (auto* s : ptrs) toks.push_back({s->last});
        b.step(ptrs, toks);
      };
      for (int w = 0; w < 3; ++w) decode();  // warm-up: graph capture
      const double t0 = now_s();
      for (int i = 0; i < steps; ++i) decode();
      const double dt = now_s() - t0;
      const std::vector<int32_t> hit = gpu.moe_experts_hit();
      double distinct = 0;
      int moe_layers = 0;
      for (int64_t l = 0; l < c.num_layers; ++l) {
        if (!m.is_moe_layer(l)) continue;
        distinct += hit[static_cast<size_t>(l)];
        ++moe_layers;
      }
      distinct /= std::max(1, moe_layers);
      const double ms = 1e3 * dt / steps;
      const double context = prompt + 3 + steps / 2.0;
      const double bytes = attn_bytes + router_bytes + distinct * moe_layers * expert_bytes + head_bytes +
                           batch * context * kv_token_bytes;
      const double achieved_gbs = bytes / (ms * 1e-3) / 1e9;
      std::printf("decode %s: %.3f ms/step, %.1f tok/s, %.2f distinct experts per layer, %.3f GB read per step, %.0f GB/s",
                  label, ms, batch * 1e3 / ms, distinct, bytes / 1e9, achieved_gbs);
      if (bandwidth_gbs > 0) std::printf(" = %.1f%% of the %.0f GB/s roofline", 100 * achieved_gbs / bandwidth_gbs, bandwidth_gbs);
      std::printf("\n");
      js << ",\"decode_b" << batch << "\":{\"ms_per_step\":" << ms << ",\"tok_s\":" << batch * 1e3 / ms
         << ",\"distinct_experts_per_layer\":" << distinct << ",\"bytes_per_step\":" << bytes
         << ",\"achieved_gbs\":" << achieved_gbs
         << ",\"roofline_fraction\":" << (bandwidth_gbs > 0 ? achieved_gbs / bandwidth_gbs : 0) << "}";
      flush(false);
    };
    decode_bench(1, "b1");
    decode_bench(device == "simt" ? 4 : 64, device == "simt" ? "b4" : "b64");

    std::string plans;
    {  // prefill: the plan's choice, then each grouped-GEMM path forced, side by side in one run
      const int tokens = device == "simt" ? 64 : 2048;
      Bench::Seq s;
      s.blocks = b.take_blocks(blocks_for(tokens));
      std::vector<Bench::Seq*> one{&s};
      const double embed_params = static_cast<double>(c.vocab_size) * h;  // the gather reads one row per token
      const double active_matmul = static_cast<double>(params.active) - embed_params - static_cast<double>(c.vocab_size) * h;
      const double attn_flops = 4.0 * c.num_layers * c.num_heads * c.head_dim * (tokens * (tokens + 1) / 2.0);
      const double flops = 2.0 * active_matmul * tokens + attn_flops + 2.0 * static_cast<double>(c.vocab_size) * h;
      auto prefill_bench = [&](int mma_rows, const std::string& key, const char* label) {
        if (mma_rows >= 0) gpu.force_moe_gemm(mma_rows);  // -1: the plans as they stand
        std::vector<double> times;
        for (int r = 0; r < 4; ++r) {
          s.pos = 0;
          const auto toks = prompt_tokens(tokens);
          const double t0 = now_s();
          b.step(one, {toks});
          times.push_back(now_s() - t0);
        }
        std::sort(times.begin() + 1, times.end());
        const double dt = times[2];  // median of the three after the first
        std::printf("%s %d (%s): %.2f ms, %.0f tok/s, %.1f TFLOP/s on active FLOPs\n", key.c_str(), tokens, label, 1e3 * dt, tokens / dt,
                    flops / dt / 1e12);
        js << ",\"" << key << "\":{\"tokens\":" << tokens << ",\"grouped_gemm\":\"" << label << "\",\"ms\":" << 1e3 * dt
           << ",\"tok_s\":" << tokens / dt << ",\"active_tflops\":" << flops / dt / 1e12 << "}";
        flush(false);
      };
      prefill_bench(-1, "prefill", "as planned");
      plans = gpu.description();  // before forcing: forcing forgets the plans made so far
      prefill_bench(0, "prefill_tiles8", "8-row tiles");
      prefill_bench(gpu::kMoeMmaRowsSmall, "prefill_mma64", "64-row tiles");
      prefill_bench(gpu::kMoeMmaRowsLarge, "prefill_mma128", "128-row tiles");
      gpu.force_moe_gemm(-1);
      prefill_bench(-1, "prefill_again", "as planned");  // the plan's row again: drift over the run
    }
    std::string desc = plans;
    for (char& ch : desc) {
      if (ch == '"' || ch == '\\') ch = '\'';
    }
    js << ",\"backend\":\"" << desc << "\",\"bandwidth_gbs\":" << bandwidth_gbs;
    std::printf("%s\n", flush(true).c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem_moe_bench: %s\n", e.what());
    return 1;
  }
}
