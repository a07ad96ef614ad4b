// tandem_fp8_bench: FP8 measurements that need the device directly, for bench/native-gpu-fp8-bench.ts
// and scripts/device/fp8-check.sh.
//
//   tandem_fp8_bench gemm [--device cuda|simt] [--quick] [--json FILE]
//       the 8B shape's projections at decode and prefill row counts, each side by side: bf16
//       (cuBLASLt and our own kernels) against FP8 (our GEMV W8A16 and W8A8, per-channel and
//       128-block scales; cuBLASLt FP8 per-channel and 128-block including the activation
//       quantization kernel; the dequantize-then-bf16 fallback), time per product and weight
//       GB/s; weights rotate over enough copies to defeat the L2 cache.
//   tandem_fp8_bench make-sparse --shape llama-3.1-8b|llama-3.1-70b [--format fp8-channel|fp8-block] --out DIR
//       an FP8 checkpoint of that shape whose weights are holes in a sparse file (zeros: no disk
//       space, no write time) and whose scales are written: what a 70B-shaped model needs to
//       load and decode on one GPU where the disk could not hold its 70 GB.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_common.h"

#include "../../native/src/core/error.h"
#include "../../native/src/cuda/bf16.h"
#include "../../native/src/cuda/cublaslt.h"
#include "../../native/src/cuda/device.h"
#include "../../native/src/cuda/fp8.h"
#include "../../native/src/cuda/fp8_kernels.h"
#include "../../native/src/cuda/kernel_api.h"

using namespace tandem;

namespace {

std::string num(double v) { return std::isfinite(v) ? std::to_string(v) : "null"; }

// ---- gemm ----------------------------------------------------------------------------------

struct Case {
  std::string label;
  int m, n, k;
  gpu::GemmOut out;
};

int run_gemm(const std::string& device, bool quick, const std::string& json_path) {
  const bool simt = device == "simt";
  std::unique_ptr<gpu::Device> dev = simt ? gpu::make_simt_device() : gpu::make_cuda_device(0);
  std::unique_ptr<gpu::KernelApi> kernels = simt ? gpu::make_simt_kernels() : gpu::make_cuda_kernels();
  std::unique_ptr<gpu::Fp8KernelApi> fp8 = simt ? gpu::make_simt_fp8_kernels() : gpu::make_cuda_fp8_kernels();
  std::string why;
  std::unique_ptr<gpu::CublasLt> lt = simt ? nullptr : gpu::CublasLt::open(&why);
  const size_t ws_bytes = size_t{32} << 20;
  void* ws = dev->alloc(ws_bytes);
  float* gemm_ws = static_cast<float*>(dev->alloc(sizeof(float) * static_cast<size_t>(gpu::kGemmWorkspaceFloats)));
  // Llama-3.1-8B's projections (a tiny stand-in on the SIMT harness, which only proves the tool runs).
  const int h = simt ? 256 : 4096, q = simt ? 256 : 4096, kv = simt ? 64 : 1024, inter = simt ? 512 : 14336;
  std::vector<int> rows = simt ? std::vector<int>{1, 32} : quick ? std::vector<int>{1, 8, 2048} : std::vector<int>{1, 8, 64, 256, 2048};
  std::vector<Case> cases;
  for (int m : rows) {
    cases.push_back({"qkv", m, q + 2 * kv, h, gpu::GemmOut::kF32});
    cases.push_back({"o", m, h, q, gpu::GemmOut::kF32});
    cases.push_back({"gate_up", m, 2 * inter, h, gpu::GemmOut::kBf16});
    cases.push_back({"down", m, h, inter, gpu::GemmOut::kF32});
  }
  std::ostringstream js;
  js << "{\"device\":\"" << dev->info().name << "\",\"cublaslt\":\"" << (lt ? lt->path() : why) << "\",\"cases\":[";
  std::printf("%-8s %5s %6s %6s | %9s %9s | %9s %9s %9s | %9s %9s %9s | us (bf16 lt/own, fp8 gemv a16/a8/blk, lt ch/blk, fallback)\n",
              "gemm", "m", "n", "k", "bf16 lt", "bf16 own", "gemv a16", "gemv a8", "gemv blk", "lt chan", "lt blk", "dequant");
  bool first = true;
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (const Case& c : cases) {
    const size_t nk = static_cast<size_t>(c.n) * c.k;
    const int copies = static_cast<int>(std::max<size_t>(1, std::min<size_t>(8, (size_t{256} << 20) / std::max<size_t>(nk, 1))));
    std::vector<uint16_t> wb(nk);
    std::vector<uint8_t> wq(nk);
    for (size_t i = 0; i < nk; ++i) {
      const float v = dist(rng) * 0.02f;
      wb[i] = gpu::float_to_bf16_bits(v);
      wq[i] = gpu::float_to_fp8_bits(v * 448.0f / 0.1f);
    }
    const int groups = (c.k + 127) / 128, nb = (c.n + 127) / 128;
    std::vector<float> row_scales(static_cast<size_t>(c.n), 0.1f / 448.0f), grp(static_cast<size_t>(c.n) * groups, 0.1f / 448.0f),
        blk(static_cast<size_t>(nb) * groups, 0.1f / 448.0f);
    std::vector<void*> wbs, wqs;
    for (int i = 0; i < copies; ++i) {
      wbs.push_back(dev->alloc(nk * 2));
      dev->upload(wbs.back(), wb.data(), nk * 2);
      wqs.push_back(dev->alloc(nk));
      dev->upload(wqs.back(), wq.data(), nk);
    }
    auto upload_f = [&](const std::vector<float>& v) {
      void* p = dev->alloc(v.size() * 4);
      dev->upload(p, v.data(), v.size() * 4);
      return static_cast<float*>(p);
    };
    float* d_rows = upload_f(row_scales);
    float* d_grp = upload_f(grp);
    float* d_blk = upload_f(blk);
    std::vector<uint16_t> ha(static_cast<size_t>(c.m) * c.k);
    for (auto& x : ha) x = gpu::float_to_bf16_bits(dist(rng));
    auto* a = static_cast<gpu::bf16_bits*>(dev->alloc(ha.size() * 2));
    dev->upload(a, ha.data(), ha.size() * 2);
    auto* aq = static_cast<gpu::fp8_bits*>(dev->alloc(ha.size()));
    auto* as = static_cast<float*>(dev->alloc(static_cast<size_t>(c.m) * groups * 4));
    auto* dq = static_cast<gpu::bf16_bits*>(dev->alloc(nk * 2));
    void* cbuf = dev->alloc(static_cast<size_t>(c.m) * c.n * 4);
    dev->synchronize();

    gpu::GemmArgs g = gpu::packed_gemm(c.m, c.n, c.k, a, nullptr, cbuf, c.out);  // w: per rep
    g.workspace = gemm_ws;
    g.workspace_floats = gpu::kGemmWorkspaceFloats;
    const double flops = 2.0 * c.m * c.n * c.k;
    const int reps = simt ? 1 : std::max(1, static_cast<int>(std::min(200.0, 2e11 / flops)));
    auto wbf = [&](int i) { return static_cast<const gpu::bf16_bits*>(wbs[static_cast<size_t>(i % copies)]); };
    auto wfp = [&](int i) { return static_cast<const gpu::fp8_bits*>(wqs[static_cast<size_t>(i % copies)]); };

    double t_lt = NAN, t_own, t_a16 = NAN, t_a8 = NAN, t_blk = NAN, t_ltc = NAN, t_ltb = NAN, t_deq;
    if (lt) {
      bool ok = true;
      t_lt = time_per_call(*dev, reps, [&](int i) {
        g.w = wbf(i);
        ok = lt->matmul(g, ws, ws_bytes, dev->stream()) && ok;
      });
      if (!ok) t_lt = NAN;
    }
    t_own = time_per_call(*dev, reps, [&](int i) {
      g.w = wbf(i);
      kernels->gemm(g, dev->stream());
    });
    gpu::Fp8GemmArgs r;
    r.out = g;
    r.a = a;
    r.lda = c.k;
    r.ldw = c.k;
    if (c.m <= gpu::kFp8RowsMaxM) {
      auto gemv = [&](gpu::Fp8Act act, bool block) {
        r.act = act;
        r.w_scales = block ? d_grp : d_rows;
        r.w_groups = block ? groups : 1;
        r.group_k = block ? 128 : c.k;
        bool ok = true;
        const double t = time_per_call(*dev, reps, [&](int i) {
          r.w = wfp(i);
          ok = fp8->gemm_rows(r, dev->stream()) && ok;
        });
        return ok ? t : NAN;
      };
      t_a16 = gemv(gpu::Fp8Act::kNone, false);
      t_a8 = gemv(gpu::Fp8Act::kDynamicToken, false);
      t_blk = gemv(gpu::Fp8Act::kDynamicGroup, true);
    }
    if (lt && c.m > 8) {
      auto lt_fp8 = [&](gpu::CublasLt::Fp8Scale mode) {
        gpu::Fp8QuantArgs qa;
        qa.x = a;
        qa.ldx = c.k;
        qa.rows = c.m;
        qa.cols = c.k;
        qa.act = mode == gpu::CublasLt::Fp8Scale::kBlock128 ? gpu::Fp8Act::kDynamicGroup : gpu::Fp8Act::kDynamicToken;
        qa.group = 128;
        qa.q = aq;
        qa.ldq = c.k;
        qa.scales = as;
        gpu::CublasLt::Fp8Args fa;
        fa.m = c.m;
        fa.n = c.n;
        fa.k = c.k;
        fa.a = aq;
        fa.lda = c.k;
        fa.a_scales = as;
        fa.ldw = c.k;
        fa.w_scales = mode == gpu::CublasLt::Fp8Scale::kBlock128 ? d_blk : d_rows;
        fa.c = cbuf;
        fa.ldc = c.n;
        fa.out = c.out;
        bool ok = true;
        const double t = time_per_call(*dev, reps, [&](int i) {
          fp8->quantize(qa, dev->stream());
          fa.w = wfp(i);
          ok = lt->matmul_fp8(fa, mode, ws, ws_bytes, dev->stream()) && ok;
        });
        return ok ? t : NAN;
      };
      t_ltc = lt_fp8(gpu::CublasLt::Fp8Scale::kOuterVec);
      t_ltb = lt_fp8(gpu::CublasLt::Fp8Scale::kBlock128);
    }
    // The fallback: dequantize, then the bf16 GEMM (cuBLASLt where present).
    t_deq = time_per_call(*dev, reps, [&](int i) {
      gpu::Fp8DequantArgs d;
      d.w = wfp(i);
      d.ldw = c.k;
      d.n = c.n;
      d.k = c.k;
      d.scales = d_rows;
      d.group_k = c.k;
      d.out = dq;
      d.ldo = c.k;
      fp8->dequantize(d, dev->stream());
      g.w = dq;
      if (!(lt && lt->matmul(g, ws, ws_bytes, dev->stream()))) kernels->gemm(g, dev->stream());
    });
    auto us = [](double t) { return t * 1e6; };
    std::printf("%-8s %5d %6d %6d | %9.1f %9.1f | %9.1f %9.1f %9.1f | %9.1f %9.1f %9.1f\n", c.label.c_str(), c.m, c.n, c.k, us(t_lt), us(t_own),
                us(t_a16), us(t_a8), us(t_blk), us(t_ltc), us(t_ltb), us(t_deq));
    const double bf16_best = std::isfinite(t_lt) ? std::min(t_lt, t_own) : t_own;
    double fp8_best = INFINITY;
    for (double t : {t_a8, t_blk, t_ltc, t_ltb}) {
      if (std::isfinite(t)) fp8_best = std::min(fp8_best, t);
    }
    js << (first ? "" : ",") << "{\"label\":\"" << c.label << "\",\"m\":" << c.m << ",\"n\":" << c.n << ",\"k\":" << c.k
       << ",\"us\":{\"bf16_cublaslt\":" << num(us(t_lt)) << ",\"bf16_own\":" << num(us(t_own)) << ",\"fp8_gemv_w8a16\":" << num(us(t_a16))
       << ",\"fp8_gemv_w8a8\":" << num(us(t_a8)) << ",\"fp8_gemv_block\":" << num(us(t_blk)) << ",\"fp8_cublaslt_channel\":" << num(us(t_ltc))
       << ",\"fp8_cublaslt_block\":" << num(us(t_ltb)) << ",\"fp8_dequant_fallback\":" << num(us(t_deq)) << "}"
       << ",\"weight_gbps_bf16_best\":" << num(static_cast<double>(nk) * 2 / bf16_best / 1e9)
       << ",\"weight_gbps_fp8_best\":" << num(static_cast<double>(nk) / fp8_best / 1e9) << ",\"fp8_speedup\":" << num(bf16_best / fp8_best) << "}";
    first = false;
    for (void* p : wbs) dev->free(p);
    for (void* p : wqs) dev->free(p);
    for (void* p : {static_cast<void*>(d_rows), static_cast<void*>(d_grp), static_cast<void*>(d_blk), static_cast<void*>(a),
                    static_cast<void*>(aq), static_cast<void*>(as), static_cast<void*>(dq), cbuf}) {
      dev->free(p);
    }
  }
  js << "]}";
  dev->free(ws);
  dev->free(gemm_ws);
  if (!json_path.empty()) std::ofstream(json_path) << js.str() << "\n";
  return 0;
}

// ---- make-sparse ---------------------------------------------------------------------------

struct SparseShape {
  std::string name;
  int hidden, layers, heads, kv_heads, head_dim, inter, vocab;
};

int make_sparse(const std::string& shape_name, const std::string& format, const std::string& dir) {
  const SparseShape shapes[] = {{"llama-3.1-8b", 4096, 32, 32, 8, 128, 14336, 128256}, {"llama-3.1-70b", 8192, 80, 64, 8, 128, 28672, 128256}};
  const SparseShape* s = nullptr;
  for (const auto& x : shapes) {
    if (x.name == shape_name) s = &x;
  }
  if (s == nullptr) throw std::runtime_error("unknown shape '" + shape_name + "' (llama-3.1-8b, llama-3.1-70b)");
  const bool block = format == "fp8-block";
  if (!block && format != "fp8-channel") throw std::runtime_error("unknown format '" + format + "' (fp8-channel, fp8-block)");
  if (std::system(("mkdir -p '" + dir + "'").c_str()) != 0) throw std::runtime_error("cannot create " + dir);
  {
    std::ofstream cfg(dir + "/config.json");
    cfg << "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"vocab_size\":" << s->vocab << ",\"hidden_size\":" << s->hidden
        << ",\"intermediate_size\":" << s->inter << ",\"num_hidden_layers\":" << s->layers << ",\"num_attention_heads\":" << s->heads
        << ",\"num_key_value_heads\":" << s->kv_heads << ",\"head_dim\":" << s->head_dim
        << ",\"rms_norm_eps\":1e-5,\"rope_theta\":500000.0,\"max_position_embeddings\":131072,\"tie_word_embeddings\":false"
        << ",\"hidden_act\":\"silu\",\"torch_dtype\":\"bfloat16\",\"bos_token_id\":1,\"eos_token_id\":2,\"quantization_config\":";
    if (block) {
      cfg << R"({"quant_method":"fp8","fmt":"e4m3","activation_scheme":"dynamic","weight_block_size":[128,128]})";
    } else {
      cfg << R"({"quant_method":"compressed-tensors","format":"float-quantized","ignore":["lm_head"],"config_groups":{"group_0":{"targets":["Linear"],"weights":{"num_bits":8,"type":"float","strategy":"channel","dynamic":false},"input_activations":{"num_bits":8,"type":"float","strategy":"token","dynamic":true}}}})";
    }
    cfg << "}\n";
  }
  struct T {
    std::string name, dtype;
    std::vector<int64_t> shape;
    bool scale;  // written (1/448, so the zero weights stay zero); everything else is a hole
  };
  std::vector<T> t;
  const int64_t q = static_cast<int64_t>(s->heads) * s->head_dim, kv = static_cast<int64_t>(s->kv_heads) * s->head_dim;
  t.push_back({"model.embed_tokens.weight", "BF16", {s->vocab, s->hidden}, false});
  t.push_back({"lm_head.weight", "BF16", {s->vocab, s->hidden}, false});
  t.push_back({"model.norm.weight", "BF16", {s->hidden}, false});
  auto linear = [&](const std::string& name, int64_t rows, int64_t cols) {
    t.push_back({name + ".weight", "F8_E4M3", {rows, cols}, false});
    if (block) {
      t.push_back({name + ".weight_scale_inv", "F32", {(rows + 127) / 128, (cols + 127) / 128}, true});
    } else {
      t.push_back({name + ".weight_scale", "F32", {rows, 1}, true});
    }
  };
  for (int l = 0; l < s->layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.push_back({p + "input_layernorm.weight", "BF16", {s->hidden}, false});
    t.push_back({p + "post_attention_layernorm.weight", "BF16", {s->hidden}, false});
    linear(p + "self_attn.q_proj", q, s->hidden);
    linear(p + "self_attn.k_proj", kv, s->hidden);
    linear(p + "self_attn.v_proj", kv, s->hidden);
    linear(p + "self_attn.o_proj", s->hidden, q);
    linear(p + "mlp.gate_proj", s->inter, s->hidden);
    linear(p + "mlp.up_proj", s->inter, s->hidden);
    linear(p + "mlp.down_proj", s->hidden, s->inter);
  }
  // Scales first (written), then every hole, so the file is one written prefix and a sparse tail.
  std::stable_sort(t.begin(), t.end(), [](const T& a, const T& b) { return a.scale > b.scale; });
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  int64_t offset = 0, written = 0, fp8_bytes = 0, bf16_bytes = 0;
  for (const T& x : t) {
    int64_t n = 1;
    for (int64_t d : x.shape) n *= d;
    const int64_t bytes = n * (x.dtype == "F32" ? 4 : x.dtype == "BF16" ? 2 : 1);
    header += ",\"" + x.name + "\":{\"dtype\":\"" + x.dtype + "\",\"shape\":[";
    for (size_t i = 0; i < x.shape.size(); ++i) header += (i ? "," : "") + std::to_string(x.shape[i]);
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + bytes) + "]}";
    offset += bytes;
    if (x.scale) written += bytes;
    if (x.dtype == "F8_E4M3") fp8_bytes += bytes;
    if (x.dtype == "BF16") bf16_bytes += bytes;
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';
  const std::string path = dir + "/model.safetensors";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    const uint64_t len = header.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    const std::vector<float> ones(static_cast<size_t>(written / 4), 1.0f / 448.0f);
    out.write(reinterpret_cast<const char*>(ones.data()), static_cast<std::streamsize>(written));
    if (!out) throw std::runtime_error("write failed: " + path);
  }
  if (::truncate(path.c_str(), static_cast<off_t>(8 + header.size() + offset)) != 0) throw std::runtime_error("truncate failed: " + path);
  std::printf("wrote %s: %s %s, %.2f GB of e4m3 weights and %.2f GB of bf16 (embeddings, LM head, norms) as holes, %.1f MB of scales written\n",
              path.c_str(), s->name.c_str(), format.c_str(), fp8_bytes / 1e9, bf16_bytes / 1e9, written / 1e6);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  try {
    if (cmd == "gemm") return run_gemm(arg(argc, argv, "--device", "cuda"), has(argc, argv, "--quick"), arg(argc, argv, "--json"));
    if (cmd == "make-sparse") return make_sparse(arg(argc, argv, "--shape"), arg(argc, argv, "--format", "fp8-channel"), arg(argc, argv, "--out"));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem_fp8_bench %s: %s\n", cmd.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr,
               "usage: tandem_fp8_bench gemm [--device cuda|simt] [--quick] [--json F] | make-sparse --shape S [--format fp8-channel|fp8-block] --out DIR\n");
  return 2;
}
