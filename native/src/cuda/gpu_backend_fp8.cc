// GpuBackend's FP8 weights (core/fp8_weights.h) and their GEMM dispatch. A weight's format is
// a property of the weight: the forward pass hands the layer's FP8 twin (or none) to gemm(),
// which picks the path for the product's row count and the GPU:
//
//   m <= 8 (decode)           FP8 GEMV (kernels/fp8_gemm_rows.cuh): e4m3 weights streamed once,
//                             activations quantized in shared memory for W8A8
//   m > 8, sm_89+, cuBLASLt   activations quantized (kernels/fp8_quant.cuh), then cuBLASLt's FP8
//                             matmul with per-row/per-token scales (outer vectors) or 128x128
//                             weight blocks and 1x128 activation groups, where the library has
//                             the mode and a probe at load shows it computes what the CPU does
//   otherwise                 the weight dequantized to bf16 into a scratch matrix (and the
//                             activations rounded through e4m3 for W8A8), then the bf16 GEMM
//
// Below sm_89 (no FP8 tensor cores) every FP8 weight computes W8A16 (activations stay bf16),
// said once in the log and in description().
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "../core/error.h"
#include "../core/fp8_weights.h"
#include "../core/safetensors.h"
#include "gpu_backend.h"
#include "kv_pool_sizing.h"

namespace tandem {
namespace {

gpu::Fp8Act to_gpu_act(ActQuant a) {
  switch (a) {
    case ActQuant::kNone: return gpu::Fp8Act::kNone;
    case ActQuant::kDynamicToken: return gpu::Fp8Act::kDynamicToken;
    case ActQuant::kDynamicGroup: return gpu::Fp8Act::kDynamicGroup;
    case ActQuant::kStaticTensor: return gpu::Fp8Act::kStatic;
  }
  return gpu::Fp8Act::kNone;
}

constexpr int kLtBlock = 128;  // cuBLASLt's block-scaled FP8: 128x128 weight blocks, 1x128 activation groups

}  // namespace

GpuBackend::Fp8Weight GpuBackend::upload_fp8(const SafetensorsStore& w, const std::vector<WeightPart>& parts, ThreadPool& pool) {
  const Fp8Matrix m = load_fp8_matrix(w, config_, parts, &pool);
  if (m.cols % 16 != 0) {
    throw NativeError(ErrorCode::kConfigInvalid, "device '" + std::string(device_->kind()) + "': FP8 weight '" + parts[0].first +
                                                     "' has " + std::to_string(m.cols) + " columns (the GPU kernels need a multiple of 16)");
  }
  Fp8Weight f;
  f.n = m.rows;
  f.k = m.cols;
  f.groups = static_cast<int>(m.k_groups());
  f.group_k = static_cast<int>(m.group_k);
  f.act = to_gpu_act(m.act.scheme);
  f.act_static = m.act.static_scale;
  f.act_ub = m.act.ub;
  f.w = static_cast<gpu::fp8_bits*>(alloc(m.q.size()));
  device_->upload(f.w, m.q.data(), m.q.size());
  f.scales = static_cast<float*>(alloc(m.scales.size() * sizeof(float)));
  device_->upload(f.scales, m.scales.data(), m.scales.size() * sizeof(float));
  // cuBLASLt's 128x128 mode wants one scale per block: rebuild them where every 128-row block of
  // the (stacked) matrix has one scale per k group (each part's rows a multiple of 128).
  if (m.group_k == kLtBlock && m.block_n == kLtBlock) {
    const int64_t nb = (m.rows + kLtBlock - 1) / kLtBlock, kg = m.k_groups();
    bool uniform = true;
    for (int64_t r = 0; r < m.rows && uniform; ++r) {
      uniform = std::memcmp(&m.scales[static_cast<size_t>(r * kg)], &m.scales[static_cast<size_t>((r / kLtBlock) * kLtBlock * kg)],
                            static_cast<size_t>(kg) * sizeof(float)) == 0;
    }
    if (uniform) {
      std::vector<float> blocks(static_cast<size_t>(nb * kg));
      for (int64_t b = 0; b < nb; ++b) std::memcpy(&blocks[static_cast<size_t>(b * kg)], &m.scales[static_cast<size_t>(b * kLtBlock * kg)], static_cast<size_t>(kg) * sizeof(float));
      f.block_scales = static_cast<float*>(alloc(blocks.size() * sizeof(float)));
      device_->upload(f.block_scales, blocks.data(), blocks.size() * sizeof(float));
    }
  }
  device_->synchronize();
  fp8_weights_ = true;
  fp8_max_elems_ = std::max<int64_t>(fp8_max_elems_, f.n * f.k);
  fp8_max_k_ = std::max<int64_t>(fp8_max_k_, f.k);
  return f;
}

void GpuBackend::dequantize_into(const SafetensorsStore& w, const std::vector<WeightPart>& parts, gpu::bf16_bits* dst, ThreadPool* pool) {
  const std::vector<float> f = load_matrix_f32(w, config_, parts, pool);
  std::vector<gpu::bf16_bits> b(f.size());
  for (size_t i = 0; i < f.size(); ++i) b[i] = gpu::float_to_bf16_bits(f[i]);
  device_->upload(dst, b.data(), b.size() * 2);
  device_->synchronize();
}

gpu::bf16_bits* GpuBackend::upload_dequantized(const SafetensorsStore& w, const std::vector<WeightPart>& parts, ThreadPool* pool) {
  int64_t elems = 0;
  for (const WeightPart& p : parts) {
    int64_t n = 1;
    for (int64_t d : p.second) n *= d;
    elems += n;
  }
  auto* dst = static_cast<gpu::bf16_bits*>(alloc(static_cast<size_t>(elems) * 2));
  dequantize_into(w, parts, dst, pool);
  return dst;
}

gpu::bf16_bits* GpuBackend::upload_matrix(const SafetensorsStore& w, const std::vector<WeightPart>& parts, bool linear,
                                          ThreadPool& pool, Fp8Weight* fp8) {
  if (fp8 != nullptr && loads_as_fp8(w, config_, parts, linear)) {
    *fp8 = upload_fp8(w, parts, pool);
    return nullptr;
  }
  for (const WeightPart& p : parts) {
    const TensorView* t = w.find(p.first);
    if (t != nullptr && t->dtype == DType::kF8E4M3) return upload_dequantized(w, parts);
  }
  return upload_bf16(w, parts, pool);
}

void GpuBackend::setup_fp8(const BackendOptions& options) {
  const bool simt = std::string(device_->kind()) == "simt";
  const gpu::DeviceInfo& info = device_->info();
  fp8_kernels_ = simt ? gpu::make_simt_fp8_kernels() : gpu::make_cuda_fp8_kernels();
  if (!fp8_weights_) return;
  const bool tensor_cores = simt || info.cc_major > 8 || (info.cc_major == 8 && info.cc_minor >= 9);
  fp8_w8a16_ = options.fp8_compute == "w8a16";
  if (!tensor_cores && !fp8_w8a16_) {
    fp8_w8a16_ = true;
    fp8_note_ = "sm_" + std::to_string(info.cc_major) + std::to_string(info.cc_minor) +
                " has no FP8 tensor cores: FP8 weights compute W8A16 (weights dequantized, activations bf16)";
    std::fprintf(stderr, "tandem: %s\n", fp8_note_.c_str());
  }
  ensure_fp8_act(std::max<int64_t>(1, options.max_batch_tokens), fp8_max_k_);
  if (cublaslt_ && !fp8_w8a16_ && !simt) probe_lt_fp8();
  // The fallback's bf16 weight scratch (the largest FP8 matrix), only where some product with
  // more rows than the GEMV takes will need it: allocated now, never during a graph capture.
  bool fallback = !cublaslt_ || fp8_w8a16_;
  for (const Layer& L : layers_) {
    const std::pair<const Fp8Weight*, bool> weights[] = {{&L.fqkv, false}, {&L.fo, L.bo != nullptr}, {&L.fgate_up, false}, {&L.fdown, false}};
    for (const auto& [w, bias] : weights) {
      if (!*w) continue;
      const bool lt = w->groups == 1 ? lt_fp8_[0]
                                     : lt_fp8_[1] && w->block_scales != nullptr && w->act == gpu::Fp8Act::kDynamicGroup && w->group_k == kLtBlock;
      fallback = fallback || bias || !lt || w->act == gpu::Fp8Act::kNone;
    }
  }
  if (fallback) ensure_fp8_dequant();
}

void GpuBackend::ensure_fp8_act(int64_t rows, int64_t k) {
  // Activation scratch: e4m3 rows, their scales (one per 16 columns at most, any layout), and
  // bf16 rows for the fallback. Sized for the step's token budget at load; a larger product
  // (never in a captured decode, whose rows the GEMV takes) regrows it.
  const int64_t elems = rows * k;
  if (elems <= fp8_act_elems_) return;
  device_->synchronize();
  for (void* p : {static_cast<void*>(fp8_act_), static_cast<void*>(fp8_act_scales_), static_cast<void*>(fp8_act_dq_)}) device_->free(p);
  fp8_act_ = static_cast<gpu::fp8_bits*>(device_->alloc(static_cast<size_t>(elems)));
  fp8_act_scales_ = static_cast<float*>(device_->alloc(static_cast<size_t>(elems / 16 + rows) * sizeof(float)));
  fp8_act_dq_ = static_cast<gpu::bf16_bits*>(device_->alloc(static_cast<size_t>(elems) * 2));
  fp8_act_elems_ = elems;
}

void GpuBackend::ensure_fp8_dequant() {
  if (fp8_dequant_ == nullptr) fp8_dequant_ = static_cast<gpu::bf16_bits*>(alloc(static_cast<size_t>(fp8_max_elems_) * 2));
}

bool GpuBackend::gemm_fp8_lt(const gpu::GemmArgs& g, const Fp8Weight& w, gpu::CublasLt::Fp8Scale mode, bool act_kmajor) {
  gpu::Fp8QuantArgs q;
  q.x = g.a;
  q.ldx = g.lda;
  q.rows = g.m;
  q.cols = g.k;
  q.act = w.act;
  q.group = mode == gpu::CublasLt::Fp8Scale::kBlock128 ? kLtBlock : 0;
  q.static_scale = w.act_static;
  q.ub = w.act_ub;
  q.q = fp8_act_;
  q.ldq = g.k;
  q.scales = fp8_act_scales_;
  // Block mode: scales per token and group, groups contiguous ([m][k/128]) or tokens contiguous.
  const int groups = (g.k + kLtBlock - 1) / kLtBlock;
  q.scale_row_stride = mode == gpu::CublasLt::Fp8Scale::kBlock128 && act_kmajor ? 1 : groups;
  q.scale_group_stride = mode == gpu::CublasLt::Fp8Scale::kBlock128 && act_kmajor ? g.m : 1;
  if (mode == gpu::CublasLt::Fp8Scale::kOuterVec) q.scale_row_stride = 1;
  fp8_kernels_->quantize(q, device_->stream());
  gpu::CublasLt::Fp8Args a;
  a.m = g.m;
  a.n = g.n;
  a.k = g.k;
  a.a = fp8_act_;
  a.lda = g.k;
  a.a_scales = fp8_act_scales_;
  a.w = w.w;
  a.ldw = w.k;
  a.w_scales = mode == gpu::CublasLt::Fp8Scale::kBlock128 ? w.block_scales : w.scales;
  a.c = g.c;
  a.ldc = g.ldc;
  a.out = g.out;
  a.accumulate = g.accumulate;
  return cublaslt_->matmul_fp8(a, mode, lt_workspace_, lt_workspace_bytes_, device_->stream());
}

void GpuBackend::dequantize_fp8(const Fp8Weight& w, gpu::bf16_bits* out, void* stream) {
  gpu::Fp8DequantArgs d;
  d.w = w.w;
  d.ldw = w.k;
  d.n = static_cast<int>(w.n);
  d.k = static_cast<int>(w.k);
  d.scales = w.scales;
  d.groups = w.groups;
  d.group_k = w.group_k;
  d.out = out;
  d.ldo = w.k;
  fp8_kernels_->dequantize(d, stream);
}

void GpuBackend::gemm_fp8(const gpu::GemmArgs& g, const Fp8Weight& w) {
  void* stream = device_->stream();
  const gpu::Fp8Act act = fp8_w8a16_ ? gpu::Fp8Act::kNone : w.act;
  gpu::Fp8GemmArgs r;
  r.out = g;
  r.out.workspace = act_.gemm_workspace;
  r.out.workspace_floats = act_.gemm_workspace_floats;
  r.a = g.a;
  r.lda = g.lda;
  r.act = act;
  r.act_static_scale = w.act_static;
  r.act_ub = w.act_ub;
  r.w = w.w;
  r.ldw = w.k;
  r.w_scales = w.scales;
  r.w_groups = w.groups;
  r.group_k = w.group_k;
  if (fp8_kernels_->gemm_rows(r, stream)) return;
  ensure_fp8_act(g.m, g.k);

  if (act != gpu::Fp8Act::kNone && g.bias == nullptr && cublaslt_) {
    if (w.groups == 1 && lt_fp8_[0] && gemm_fp8_lt(g, w, gpu::CublasLt::Fp8Scale::kOuterVec, false)) return;
    if (w.groups > 1 && w.block_scales != nullptr && act == gpu::Fp8Act::kDynamicGroup && w.group_k == kLtBlock && lt_fp8_[1] &&
        gemm_fp8_lt(g, w, gpu::CublasLt::Fp8Scale::kBlock128, lt_act_kmajor_)) {
      return;
    }
  }
  // Fallback: bf16 weights (scaled) and, for W8A8, the activations rounded through e4m3.
  ensure_fp8_dequant();
  dequantize_fp8(w, fp8_dequant_, stream);
  gpu::GemmArgs b = g;
  b.w = fp8_dequant_;
  b.ldw = w.k;
  if (act != gpu::Fp8Act::kNone) {
    gpu::Fp8QuantArgs q;
    q.x = g.a;
    q.ldx = g.lda;
    q.rows = g.m;
    q.cols = g.k;
    q.act = act;
    q.group = w.group_k;
    q.static_scale = w.act_static;
    q.ub = w.act_ub;
    q.dq = fp8_act_dq_;
    q.lddq = g.k;
    fp8_kernels_->quantize(q, stream);
    b.a = fp8_act_dq_;
    b.lda = g.k;
  }
  gemm(b);
}

// cuBLASLt's FP8 scale modes, checked on this GPU at load: the heuristic must offer an
// algorithm, and a small product through it must match a double-precision reference of the
// same e4m3 values (the block mode tries both activation-scale layouts). A mode that fails
// stays off: those products take the fallback.
void GpuBackend::probe_lt_fp8() {
  using Mode = gpu::CublasLt::Fp8Scale;
  const int m = 64, n = 256, k = 512, groups = k / kLtBlock, nb = n / kLtBlock;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<gpu::fp8_bits> wq(static_cast<size_t>(n * k));
  for (auto& b : wq) b = gpu::float_to_fp8_bits(normal(rng) * 64.0f);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (float& v : x) v = gpu::round_to_bf16(normal(rng));
  std::vector<gpu::bf16_bits> xb(x.size());
  for (size_t i = 0; i < x.size(); ++i) xb[i] = gpu::float_to_bf16_bits(x[i]);
  std::vector<float> row_scales(static_cast<size_t>(n)), blk(static_cast<size_t>(nb * groups));
  for (int i = 0; i < n; ++i) row_scales[static_cast<size_t>(i)] = std::exp2(static_cast<float>(i % 5) - 9.0f);
  for (int i = 0; i < nb * groups; ++i) blk[static_cast<size_t>(i)] = std::exp2(static_cast<float>(i % 7) - 10.0f);
  std::vector<float> expanded(static_cast<size_t>(n * groups));
  for (int i = 0; i < n; ++i) {
    for (int g = 0; g < groups; ++g) expanded[static_cast<size_t>(i * groups + g)] = blk[static_cast<size_t>((i / kLtBlock) * groups + g)];
  }
  auto* d_w = static_cast<gpu::fp8_bits*>(device_->alloc(wq.size()));
  auto* d_x = static_cast<gpu::bf16_bits*>(device_->alloc(xb.size() * 2));
  auto* d_rs = static_cast<float*>(device_->alloc(row_scales.size() * 4));
  auto* d_blk = static_cast<float*>(device_->alloc(blk.size() * 4));
  auto* d_exp = static_cast<float*>(device_->alloc(expanded.size() * 4));
  auto* d_c = static_cast<float*>(device_->alloc(static_cast<size_t>(m * n) * 4));
  device_->upload(d_w, wq.data(), wq.size());
  device_->upload(d_x, xb.data(), xb.size() * 2);
  device_->upload(d_rs, row_scales.data(), row_scales.size() * 4);
  device_->upload(d_blk, blk.data(), blk.size() * 4);
  device_->upload(d_exp, expanded.data(), expanded.size() * 4);
  device_->synchronize();
  // Reference: the activations quantized as the quantize kernel does, then the product in double.
  auto reference = [&](bool block) {
    std::vector<float> want(static_cast<size_t>(m * n));
    ActQuantSpec spec;
    spec.scheme = block ? ActQuant::kDynamicGroup : ActQuant::kDynamicToken;
    spec.group = block ? kLtBlock : 0;
    std::vector<uint8_t> q(static_cast<size_t>(k));
    std::vector<float> s(static_cast<size_t>(groups));
    for (int i = 0; i < m; ++i) {
      quantize_activation_row(x.data() + i * k, k, spec, q.data(), s.data());
      for (int j = 0; j < n; ++j) {
        double acc = 0;
        for (int c = 0; c < k; ++c) {
          const double ws = block ? expanded[static_cast<size_t>(j * groups + c / kLtBlock)] : row_scales[static_cast<size_t>(j)];
          const double xs = s[static_cast<size_t>(block ? c / kLtBlock : 0)];
          acc += static_cast<double>(gpu::fp8_bits_to_float(q[static_cast<size_t>(c)])) * xs *
                 gpu::fp8_bits_to_float(wq[static_cast<size_t>(j * k + c)]) * ws;
        }
        want[static_cast<size_t>(i * n + j)] = static_cast<float>(acc);
      }
    }
    return want;
  };
  auto matches = [&](const std::vector<float>& want) {
    std::vector<float> got(want.size());
    device_->download(got.data(), d_c, got.size() * 4);
    device_->synchronize();
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (!std::isfinite(got[i])) return false;
      num += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
      den += static_cast<double>(want[i]) * want[i];
    }
    return den > 0 && std::sqrt(num / den) < 1e-2;
  };
  const gpu::GemmArgs g = gpu::packed_gemm(m, n, k, d_x, nullptr, d_c, gpu::GemmOut::kF32);  // the weight is FP8
  ensure_fp8_act(m, k);
  try {
    Fp8Weight w;
    w.w = d_w;
    w.n = n;
    w.k = k;
    w.act = gpu::Fp8Act::kDynamicToken;
    w.scales = d_rs;
    w.groups = 1;
    w.group_k = k;
    if (cublaslt_->fp8_supported(Mode::kOuterVec, lt_workspace_bytes_) && gemm_fp8_lt(g, w, Mode::kOuterVec, false)) {
      lt_fp8_[0] = matches(reference(false));
    }
    w.act = gpu::Fp8Act::kDynamicGroup;
    w.scales = d_exp;
    w.block_scales = d_blk;
    w.groups = groups;
    w.group_k = kLtBlock;
    if (cublaslt_->fp8_supported(Mode::kBlock128, lt_workspace_bytes_)) {
      const std::vector<float> want = reference(true);
      for (bool kmajor : {false, true}) {
        if (gemm_fp8_lt(g, w, Mode::kBlock128, kmajor) && matches(want)) {
          lt_fp8_[1] = true;
          lt_act_kmajor_ = kmajor;
          break;
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem: cuBLASLt FP8 probe failed (%s): FP8 prefill takes the dequantizing fallback\n", e.what());
    lt_fp8_[0] = lt_fp8_[1] = false;
  }
  for (void* p : {static_cast<void*>(d_w), static_cast<void*>(d_x), static_cast<void*>(d_rs), static_cast<void*>(d_blk),
                  static_cast<void*>(d_exp), static_cast<void*>(d_c)}) {
    device_->free(p);
  }
}

std::string GpuBackend::fp8_description() const {
  std::string s;
  if (fp8_weights_) {
    s += "; FP8 weights (" + config_.quant.describe() + "): decode GEMV e4m3 " + (fp8_w8a16_ ? "W8A16" : "W8A8");
    s += ", prefill ";
    if (fp8_w8a16_) {
      s += "dequantized to bf16";
    } else {
      std::string lt;
      if (lt_fp8_[0]) lt += "per-channel/per-token";
      if (lt_fp8_[1]) lt += std::string(lt.empty() ? "" : " and ") + "128x128 block (activations " + (lt_act_kmajor_ ? "token-major" : "group-major") + ")";
      s += lt.empty() ? "dequantized to bf16 (no cuBLASLt FP8 scale mode here)" : "cuBLASLt FP8 " + lt + ", else dequantized to bf16";
    }
    if (!fp8_note_.empty()) s += " [" + fp8_note_ + "]";
  } else if (config_.quant.dequantize) {
    s += "; weights: " + config_.quant.describe();
  }
  if (moe_fp8_experts_) {
    s += "; FP8 experts e4m3 (W8A16: the grouped GEMMs turn each weight into bf16, e4m3 x scale, on its way to the tensor cores)";
  }
  if (moe_fp8_dequantized_) s += "; FP8 experts dequantized to bf16 at load (--quantization none)";
  if (layout_.elem_bytes == 1) s += "; KV cache fp8_e4m3";
  return s;
}

}  // namespace tandem
