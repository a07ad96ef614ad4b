// tandem_gpu_bench: the GPU measurements that need direct access to the device, for
// bench/native-gpu-bench.ts and scripts/device/cuda-check.sh.
//
//   tandem_gpu_bench make-model --shape qwen2-0.5b|llama-3.2-1b|llama-3.1-8b --out DIR
//       random bf16 weights in that model's shapes, as a Hugging Face directory (config.json +
//       model.safetensors) that both this engine and transformers load; multi-threaded.
//   tandem_gpu_bench gemm [--device cuda|simt] [--quick] --json FILE
//       bf16 GEMMs of the three models' projections at decode and prefill row counts plus a
//       square 8192^3: TFLOP/s of cuBLASLt and of our own kernels, side by side.
//   tandem_gpu_bench bandwidth [--device cuda] --json FILE
//       device-to-device copy bandwidth (bytes read + written), the roofline's denominator.
//   tandem_gpu_bench sample [--device cuda|simt] [--vocab 151936] --json FILE
//       the sampler at batch 1, 8 and 64 over a Qwen2-sized vocabulary: microseconds per step of
//       the one-block kernel (KernelApi::sample) and of the fast path (DecodeKernelApi::sample),
//       side by side, for greedy, temperature, top-k 50, top-p 0.9, top-k + top-p + min-p,
//       penalties + bias, and logprobs (top 5); every case's tokens compared between the two.
//
// Times are wall clock around synchronized batches of launches: median of 5 batches after a
// warm-up; weights rotate over enough copies to defeat the L2 cache.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"

#include "../../native/src/core/error.h"
#include "../../native/src/cuda/bf16.h"
#include "../../native/src/cuda/cublaslt.h"
#include "../../native/src/cuda/decode_api.h"
#include "../../native/src/cuda/sample_inputs.h"
#include "../../native/src/cuda/device.h"
#include "../../native/src/cuda/kernel_api.h"

using namespace tandem;

namespace {

struct Shape {
  std::string name, arch;
  int hidden, layers, heads, kv_heads, head_dim, inter, vocab;
  bool tie, qkv_bias;
  double rope_theta;
  int max_pos;
  std::string rope_scaling;  // JSON object or empty
};

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> s = {
      // For dry runs on the SIMT harness (scripts/device/cuda-check.sh with TANDEM_CHECK_DEVICE=simt).
      {"tiny", "LlamaForCausalLM", 64, 2, 4, 2, 16, 128, 512, false, false, 10000.0, 2048, ""},
      {"qwen2-0.5b", "Qwen2ForCausalLM", 896, 24, 14, 2, 64, 4864, 151936, true, true, 1000000.0, 32768, ""},
      {"llama-3.2-1b", "LlamaForCausalLM", 2048, 16, 32, 8, 64, 8192, 128256, true, false, 500000.0, 131072,
       R"({"rope_type":"llama3","factor":32.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192})"},
      {"llama-3.1-8b", "LlamaForCausalLM", 4096, 32, 32, 8, 128, 14336, 128256, false, false, 500000.0, 131072,
       R"({"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192})"},
  };
  return s;
}

const Shape& find_shape(const std::string& name) {
  for (const Shape& s : shapes()) {
    if (s.name == name) return s;
  }
  throw std::runtime_error("unknown shape '" + name + "' (qwen2-0.5b, llama-3.2-1b, llama-3.1-8b, tiny)");
}

// ---- make-model ----------------------------------------------------------------------------

void make_model(const Shape& s, const std::string& dir) {
  if (std::system(("mkdir -p '" + dir + "'").c_str()) != 0) throw std::runtime_error("cannot create " + dir);
  {
    std::ofstream cfg(dir + "/config.json");
    cfg << "{\"architectures\":[\"" << s.arch << "\"],\"model_type\":\"" << (s.arch == "Qwen2ForCausalLM" ? "qwen2" : "llama")
        << "\",\"vocab_size\":" << s.vocab << ",\"hidden_size\":" << s.hidden << ",\"intermediate_size\":" << s.inter
        << ",\"num_hidden_layers\":" << s.layers << ",\"num_attention_heads\":" << s.heads
        << ",\"num_key_value_heads\":" << s.kv_heads << ",\"head_dim\":" << s.head_dim
        << ",\"rms_norm_eps\":1e-6,\"rope_theta\":" << s.rope_theta << ",\"max_position_embeddings\":" << s.max_pos
        << ",\"tie_word_embeddings\":" << (s.tie ? "true" : "false") << ",\"hidden_act\":\"silu\",\"torch_dtype\":\"bfloat16\""
        << ",\"bos_token_id\":1,\"eos_token_id\":2";
    if (!s.rope_scaling.empty()) cfg << ",\"rope_scaling\":" << s.rope_scaling;
    if (s.arch == "Qwen2ForCausalLM") cfg << ",\"use_sliding_window\":false,\"max_window_layers\":" << s.layers;
    cfg << "}\n";
  }
  std::vector<std::pair<std::string, std::vector<int64_t>>> t;
  const int64_t q = static_cast<int64_t>(s.heads) * s.head_dim, kv = static_cast<int64_t>(s.kv_heads) * s.head_dim;
  t.push_back({"model.embed_tokens.weight", {s.vocab, s.hidden}});
  t.push_back({"model.norm.weight", {s.hidden}});
  if (!s.tie) t.push_back({"lm_head.weight", {s.vocab, s.hidden}});
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.push_back({p + "input_layernorm.weight", {s.hidden}});
    t.push_back({p + "post_attention_layernorm.weight", {s.hidden}});
    t.push_back({p + "self_attn.q_proj.weight", {q, s.hidden}});
    t.push_back({p + "self_attn.k_proj.weight", {kv, s.hidden}});
    t.push_back({p + "self_attn.v_proj.weight", {kv, s.hidden}});
    if (s.qkv_bias) {
      t.push_back({p + "self_attn.q_proj.bias", {q}});
      t.push_back({p + "self_attn.k_proj.bias", {kv}});
      t.push_back({p + "self_attn.v_proj.bias", {kv}});
    }
    t.push_back({p + "self_attn.o_proj.weight", {s.hidden, q}});
    t.push_back({p + "mlp.gate_proj.weight", {s.inter, s.hidden}});
    t.push_back({p + "mlp.up_proj.weight", {s.inter, s.hidden}});
    t.push_back({p + "mlp.down_proj.weight", {s.hidden, s.inter}});
  }
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  int64_t offset = 0;
  for (const auto& [name, shape] : t) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    header += ",\"" + name + "\":{\"dtype\":\"BF16\",\"shape\":[";
    for (size_t i = 0; i < shape.size(); ++i) header += (i ? "," : "") + std::to_string(shape[i]);
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + 2 * n) + "]}";
    offset += 2 * n;
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';
  std::ofstream out(dir + "/model.safetensors", std::ios::binary);
  const uint64_t len = header.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<uint16_t> buf;
  for (size_t ti = 0; ti < t.size(); ++ti) {
    const auto& [name, shape] = t[ti];
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const bool norm = name.find("norm") != std::string::npos;
    // Gains as make-tiny's: linear layers 1/sqrt(fan_in) so activations stay O(1) through the
    // layers, embeddings small, norms near 1; biases small.
    const float scale = norm ? 0.1f : name.find("embed") != std::string::npos || name.find("lm_head") != std::string::npos
                                          ? 0.05f
                                          : name.find("bias") != std::string::npos ? 0.02f
                                                                                     : 1.0f / std::sqrt(static_cast<float>(shape.back()));
    buf.resize(static_cast<size_t>(n));
    std::vector<std::thread> pool;
    for (unsigned w = 0; w < threads; ++w) {
      pool.emplace_back([&, w] {
        std::mt19937 rng(static_cast<uint32_t>(ti * 7919 + w));
        std::normal_distribution<float> dist(0.0f, 1.0f);
        for (int64_t i = w; i < n; i += threads) {
          const float v = norm ? 1.0f + scale * dist(rng) : scale * dist(rng);
          buf[static_cast<size_t>(i)] = gpu::float_to_bf16_bits(v);
        }
      });
    }
    for (auto& th : pool) th.join();
    out.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(2 * n));
  }
  if (!out) throw std::runtime_error("write failed under " + dir);
  std::printf("wrote %s: %s, %.2f GB of bf16 weights\n", dir.c_str(), s.name.c_str(), offset / 1e9);
}

// ---- timing: bench_common.h ---------------------------------------------------------------------

struct Opened {
  std::unique_ptr<gpu::Device> dev;
  std::unique_ptr<gpu::KernelApi> kernels;
};

Opened open_device(const std::string& name) {
  Opened o;
  if (name == "simt") {
    o.dev = gpu::make_simt_device();
    o.kernels = gpu::make_simt_kernels();
  } else {
    o.dev = gpu::make_cuda_device(0);
    o.kernels = gpu::make_cuda_kernels();
  }
  return o;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

// ---- gemm ----------------------------------------------------------------------------------

struct GemmCase {
  std::string label;
  int m, n, k;
  gpu::GemmOut out;
};

std::vector<GemmCase> gemm_cases(bool quick) {
  std::vector<GemmCase> c;
  const std::vector<int> rows = quick ? std::vector<int>{1, 256} : std::vector<int>{1, 8, 64, 256, 2048};
  for (const Shape& s : shapes()) {
    if (s.name == "tiny") continue;
    const int q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
    for (int m : rows) {
      c.push_back({s.name + " qkv", m, q + 2 * kv, s.hidden, gpu::GemmOut::kF32});
      c.push_back({s.name + " o", m, s.hidden, q, gpu::GemmOut::kF32});
      c.push_back({s.name + " gate_up", m, 2 * s.inter, s.hidden, gpu::GemmOut::kBf16});
      c.push_back({s.name + " down", m, s.hidden, s.inter, gpu::GemmOut::kF32});
    }
    c.push_back({s.name + " lm_head", quick ? 8 : 64, s.vocab, s.hidden, gpu::GemmOut::kF32});
  }
  c.push_back({"square", quick ? 2048 : 8192, quick ? 2048 : 8192, quick ? 2048 : 8192, gpu::GemmOut::kBf16});
  return c;
}

int run_gemm(const std::string& device, bool quick, const std::string& json_path) {
  Opened o = open_device(device);
  gpu::Device& dev = *o.dev;
  std::string why;
  std::unique_ptr<gpu::CublasLt> lt = device == "cuda" ? gpu::CublasLt::open(&why) : nullptr;
  const size_t ws_bytes = size_t{32} << 20;
  void* ws = dev.alloc(ws_bytes);
  std::ostringstream js;
  js << "{\"device\":\"" << json_escape(dev.info().name) << "\",\"cublaslt\":\"" << json_escape(lt ? lt->path() : why) << "\",\"cases\":[";
  std::printf("%-22s %6s %7s %6s | %12s %12s\n", "gemm", "m", "n", "k", "cuBLASLt TF/s", "own TF/s");
  bool first = true;
  for (const GemmCase& c : gemm_cases(quick || device == "simt")) {
    if (device == "simt" && static_cast<int64_t>(c.m) * c.n * c.k > (int64_t{1} << 26)) continue;  // the harness is slow
    const size_t w_bytes = static_cast<size_t>(c.n) * c.k * 2;
    // Enough copies of W that a rotation does not fit the L2 cache (50-60 MB on Hopper).
    const int copies = static_cast<int>(std::max<size_t>(1, std::min<size_t>(8, (size_t{256} << 20) / std::max<size_t>(w_bytes, 1))));
    std::vector<void*> ws_list;
    std::vector<uint16_t> host(static_cast<size_t>(c.n) * c.k);
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.0f, 0.05f);
    for (auto& x : host) x = gpu::float_to_bf16_bits(dist(rng));
    for (int i = 0; i < copies; ++i) {
      ws_list.push_back(dev.alloc(w_bytes));
      dev.upload(ws_list.back(), host.data(), w_bytes);
    }
    std::vector<uint16_t> ha(static_cast<size_t>(c.m) * c.k);
    for (auto& x : ha) x = gpu::float_to_bf16_bits(dist(rng));
    void* a = dev.alloc(ha.size() * 2);
    dev.upload(a, ha.data(), ha.size() * 2);
    const size_t c_bytes = static_cast<size_t>(c.m) * c.n * (c.out == gpu::GemmOut::kF32 ? 4 : 2);
    void* cbuf = dev.alloc(c_bytes);
    float* gemm_ws = static_cast<float*>(dev.alloc(sizeof(float) * static_cast<size_t>(gpu::kGemmWorkspaceFloats)));
    dev.synchronize();
    gpu::GemmArgs g = gpu::packed_gemm(c.m, c.n, c.k, static_cast<const gpu::bf16_bits*>(a), nullptr, cbuf, c.out);  // w: per rep
    g.workspace = gemm_ws;
    g.workspace_floats = gpu::kGemmWorkspaceFloats;
    const double flops = 2.0 * c.m * c.n * c.k;
    const int reps = std::max(1, static_cast<int>(std::min(200.0, 2e11 / flops)));
    double t_lt = NAN, t_own = NAN;
    if (lt) {
      bool ok = true;
      t_lt = time_per_call(dev, reps, [&](int i) {
        g.w = static_cast<const gpu::bf16_bits*>(ws_list[static_cast<size_t>(i % copies)]);
        ok &= lt->matmul(g, ws, ws_bytes, dev.stream());
      });
      if (!ok) t_lt = NAN;
    }
    t_own = time_per_call(dev, device == "simt" ? 1 : reps, [&](int i) {
      g.w = static_cast<const gpu::bf16_bits*>(ws_list[static_cast<size_t>(i % copies)]);
      o.kernels->gemm(g, dev.stream());
    });
    const double tf_lt = flops / t_lt / 1e12, tf_own = flops / t_own / 1e12;
    std::printf("%-22s %6d %7d %6d | %12.1f %12.1f\n", c.label.c_str(), c.m, c.n, c.k, tf_lt, tf_own);
    js << (first ? "" : ",") << "{\"label\":\"" << c.label << "\",\"m\":" << c.m << ",\"n\":" << c.n << ",\"k\":" << c.k
       << ",\"out\":\"" << (c.out == gpu::GemmOut::kF32 ? "f32" : "bf16") << "\",\"cublaslt_tflops\":"
       << (std::isfinite(tf_lt) ? std::to_string(tf_lt) : "null") << ",\"own_tflops\":" << (std::isfinite(tf_own) ? std::to_string(tf_own) : "null")
       << ",\"weight_gbps_own\":" << (w_bytes / t_own / 1e9) << "}";
    first = false;
    for (void* p : ws_list) dev.free(p);
    dev.free(a);
    dev.free(cbuf);
    dev.free(gemm_ws);
  }
  js << "]}";
  dev.free(ws);
  if (!json_path.empty()) std::ofstream(json_path) << js.str() << "\n";
  return 0;
}

int run_bandwidth(const std::string& device, const std::string& json_path) {
  Opened o = open_device(device);
  gpu::Device& dev = *o.dev;
  const size_t bytes = device == "simt" ? size_t{64} << 20 : size_t{2} << 30;
  void* a = dev.alloc(bytes);
  void* b = dev.alloc(bytes);
  dev.fill(a, 1, bytes);
  const double t = time_per_call(dev, device == "simt" ? 2 : 10, [&](int) { dev.copy(b, a, bytes); });
  const double gbps = 2.0 * static_cast<double>(bytes) / t / 1e9;
  std::printf("device-to-device copy: %.0f GB/s (read + write) on %s\n", gbps, dev.info().name.c_str());
  if (!json_path.empty()) {
    std::ofstream(json_path) << "{\"device\":\"" << json_escape(dev.info().name) << "\",\"copy_gbps\":" << gbps
                             << ",\"bytes\":" << bytes << ",\"sm_count\":" << dev.info().sm_count << "}\n";
  }
  dev.free(a);
  dev.free(b);
  return 0;
}

}  // namespace

// ---- sampler --------------------------------------------------------------------------------

struct SampleCase {
  std::string label;
  SamplingParams params;
  int history;   // penalty history length (0: none)
  int bias;      // logit bias entries
  int top;       // logprobs (-1: none)
};

int run_sample(const std::string& device, int vocab, const std::string& json_path) {
  Opened o = open_device(device);
  gpu::Device& dev = *o.dev;
  std::unique_ptr<gpu::DecodeKernelApi> fast = device == "simt" ? gpu::make_simt_decode_kernels() : gpu::make_cuda_decode_kernels();
  auto params = [](float t, int k, float p, float minp) {
    SamplingParams s;
    s.temperature = t;
    s.top_k = k;
    s.top_p = p;
    s.min_p = minp;
    s.seed = 1234;
    return s;
  };
  std::vector<SampleCase> cases = {
      {"greedy", params(0.0f, 0, 1.0f, 0.0f), 0, 0, -1},
      {"temperature 0.8", params(0.8f, 0, 1.0f, 0.0f), 0, 0, -1},
      {"top-k 50", params(1.0f, 50, 1.0f, 0.0f), 0, 0, -1},
      {"top-p 0.9", params(0.7f, 0, 0.9f, 0.0f), 0, 0, -1},
      {"top-k 40 + top-p 0.95 + min-p 0.05", params(1.0f, 40, 0.95f, 0.05f), 0, 0, -1},
      {"penalties + bias, top-p 0.9", params(0.8f, 0, 0.9f, 0.0f), 64, 4, -1},
      {"greedy + logprobs (top 5)", params(0.0f, 0, 1.0f, 0.0f), 0, 0, 5},
  };
  cases[5].params.repetition_penalty = 1.1f;
  cases[5].params.presence_penalty = 0.5f;
  const std::vector<int> batches = device == "simt" ? std::vector<int>{1} : std::vector<int>{1, 8, 64};
  const int max_rows = batches.back();
  // LLM-like logits: a normal body, a few strong tokens per row.
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> logits(static_cast<size_t>(max_rows) * vocab);
  for (float& x : logits) x = nd(rng);
  for (int r = 0; r < max_rows; ++r) {
    for (int i = 0; i < 8; ++i) logits[static_cast<size_t>(r) * vocab + rng() % vocab] += 8.0f + i;
  }
  auto* d_logits = static_cast<float*>(dev.alloc(logits.size() * 4));
  dev.upload(d_logits, logits.data(), logits.size() * 4);
  std::ostringstream json;
  json << "{\"device\": \"" << json_escape(dev.info().name) << "\", \"vocab\": " << vocab << ", \"cases\": [";
  bool first = true;
  int mismatches = 0;
  std::printf("%-38s %5s %12s %12s %8s\n", "sampler case", "batch", "block us", "fast us", "speedup");
  for (const SampleCase& c : cases) {
    for (int rows : batches) {
      std::vector<int32_t> history;
      for (int i = 0; i < c.history; ++i) history.push_back(static_cast<int32_t>(rng() % vocab));
      std::vector<int32_t> bias_ids;
      std::vector<float> bias_values;
      for (int i = 0; i < c.bias; ++i) {
        bias_ids.push_back(static_cast<int32_t>(rng() % vocab));
        bias_values.push_back(static_cast<float>(i) - 2.0f);
      }
      std::vector<SampleRow> srows(static_cast<size_t>(rows));
      for (int r = 0; r < rows; ++r) {
        SampleRow& s = srows[static_cast<size_t>(r)];
        s.logit_row = r;
        s.params = c.params;
        s.params.seed = 1234 + static_cast<uint64_t>(r);
        s.position = 100 + r;
        s.history = history.empty() ? nullptr : history.data();
        s.history_len = static_cast<int32_t>(history.size());
        s.num_prompt = s.history_len / 2;
        s.bias_ids = bias_ids.empty() ? nullptr : bias_ids.data();
        s.bias_values = bias_values.empty() ? nullptr : bias_values.data();
        s.bias_len = static_cast<int32_t>(bias_ids.size());
        s.num_top_logprobs = c.top;
      }
      gpu::SampleInputs in;
      in.build(srows.data(), srows.size(), vocab);
      auto up = [&](const auto& v, size_t elem) {
        void* p = dev.alloc(std::max<size_t>(1, v.size()) * elem);
        if (!v.empty()) dev.upload(p, v.data(), v.size() * elem);
        return p;
      };
      void* d_rows = up(in.rows, sizeof(gpu::SampleRowDesc));
      void* d_pen = up(in.penalties, sizeof(gpu::PenaltyEntry));
      void* d_bid = up(in.bias_ids, 4);
      void* d_bval = up(in.bias_values, 4);
      void* d_masks = up(in.masks, 4);
      auto* d_work = static_cast<float*>(dev.alloc(static_cast<size_t>(rows) * vocab * 4));
      const int ts = std::max(1, in.top_stride);
      void* d_out = dev.alloc(static_cast<size_t>(rows) * (8 + 8 * ts));
      auto* out = static_cast<unsigned char*>(d_out);
      gpu::SampleArgs a;
      a.logits = d_logits;
      a.logit_stride = vocab;
      a.vocab = vocab;
      a.rows = static_cast<const gpu::SampleRowDesc*>(d_rows);
      a.num_rows = rows;
      a.penalties = static_cast<const gpu::PenaltyEntry*>(d_pen);
      a.bias_ids = static_cast<const int32_t*>(d_bid);
      a.bias_values = static_cast<const float*>(d_bval);
      a.masks = static_cast<const uint32_t*>(d_masks);
      a.work = d_work;
      a.top_stride = in.top_stride;
      a.out_tokens = reinterpret_cast<int32_t*>(out);
      a.out_logprobs = reinterpret_cast<float*>(out + 4 * rows);
      a.out_top_ids = reinterpret_cast<int32_t*>(out + 8 * rows);
      a.out_top_logprobs = reinterpret_cast<float*>(out + 8 * rows + 4 * rows * ts);
      gpu::SampleFastArgs f;
      f.scratch = dev.alloc(static_cast<size_t>(fast->sample_fast_scratch_bytes(rows, vocab)));
      const size_t nc = static_cast<size_t>(fast->sample_fast_counters(rows, vocab));
      f.counters = static_cast<int*>(dev.alloc(nc * 4));
      dev.fill(f.counters, 0, nc * 4);
      const int reps = device == "simt" ? 1 : 200;
      std::vector<int32_t> t_block(static_cast<size_t>(rows)), t_fast(static_cast<size_t>(rows));
      const double block_s = time_per_call(dev, reps, [&](int) { o.kernels->sample(a, dev.stream()); });
      dev.download(t_block.data(), a.out_tokens, static_cast<size_t>(rows) * 4);
      const double fast_s = time_per_call(dev, reps, [&](int) { fast->sample(a, f, dev.stream()); });
      dev.download(t_fast.data(), a.out_tokens, static_cast<size_t>(rows) * 4);
      dev.synchronize();
      const bool same = t_block == t_fast;
      mismatches += !same;
      std::printf("%-38s %5d %12.1f %12.1f %7.1fx%s\n", c.label.c_str(), rows, block_s * 1e6, fast_s * 1e6, block_s / fast_s,
                  same ? "" : "  TOKENS DIFFER");
      json << (first ? "" : ",") << "\n  {\"case\": \"" << json_escape(c.label) << "\", \"batch\": " << rows
           << ", \"block_us\": " << block_s * 1e6 << ", \"fast_us\": " << fast_s * 1e6 << ", \"same_tokens\": " << (same ? "true" : "false") << "}";
      first = false;
      for (void* p : {d_rows, d_pen, d_bid, d_bval, d_masks, static_cast<void*>(d_work), d_out, f.scratch, static_cast<void*>(f.counters)}) dev.free(p);
    }
  }
  json << "\n], \"aim\": \"fast path <= 20 us per step at batch 1 over 152k tokens (H200)\", \"mismatches\": " << mismatches << "}\n";
  dev.free(d_logits);
  if (!json_path.empty()) std::ofstream(json_path) << json.str();
  return mismatches == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  try {
    if (cmd == "make-model") {
      make_model(find_shape(arg(argc, argv, "--shape", "qwen2-0.5b")), arg(argc, argv, "--out"));
      return 0;
    }
    if (cmd == "gemm") return run_gemm(arg(argc, argv, "--device", "cuda"), has(argc, argv, "--quick"), arg(argc, argv, "--json"));
    if (cmd == "bandwidth") return run_bandwidth(arg(argc, argv, "--device", "cuda"), arg(argc, argv, "--json"));
    if (cmd == "sample") return run_sample(arg(argc, argv, "--device", "cuda"), std::stoi(arg(argc, argv, "--vocab", "151936")), arg(argc, argv, "--json"));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem_gpu_bench %s: %s\n", cmd.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: tandem_gpu_bench make-model --shape S --out DIR | gemm [--device cuda|simt] [--quick] [--json F] | bandwidth [--json F]\n");
  return 2;
}
