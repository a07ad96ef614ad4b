// GpuBackend's mixture-of-experts layers (moe_api.h): the experts' weights on the device, the
// MoE scratch, and one sparse MLP of a step:
//   [Qwen2-MoE: shared expert through the dense GEMMs; in a fused decode step its gate/up is
//   the fused GEMV with SiLU x up] -> route and group (fused router; its
//   last CTA groups) -> gate/up grouped GEMM (SiLU x up) -> down grouped GEMM
//   (x routing weight) -> combine into x (over 8-row tiles, in the down launch).
// The grouped GEMMs run over 8-row tiles while a step's experts average few rows (decode: each
// expert's weights streamed once, by the few-rows GEMM's tensor-core loop), over 64- or 128-row
// tiles of the dense GEMM's main loop past that (prefill); the choice and its tiles are made
// per chunk size and listed in description().
// Steps longer than kMoeChunkTokens run it chunk by chunk, so the scratch stays bounded
// (a 2k-token prefill of a top-8 model needs 17k slots of hidden floats: 141 MB at hidden 2048).
#include <algorithm>
#include <stdexcept>
#include <string>

#include "../core/error.h"
#include "../core/fp8_weights.h"
#include "../core/safetensors.h"
#include "gpu_backend.h"

namespace tandem {
namespace {

constexpr int64_t kMoeChunkTokens = 2048;
// 64-row tiles once a chunk's experts average this many rows (the 8-row path streams an
// expert's weights once per 8 rows; a 64-row tile reads them once however full it is), and
// 128-row tiles once they average kMoeMmaLargeAvgRows (a partial last tile wastes less of a
// 64-row one below it). Both are measured side by side by tandem_moe_bench's prefill rows.
constexpr int64_t kMoeMmaMinAvgRows = gpu::kMoeTileRows;
constexpr int64_t kMoeMmaLargeAvgRows = 384;

std::vector<WeightPart> parts_of(const std::vector<const TensorView*>& views) {
  std::vector<WeightPart> parts;
  for (const TensorView* v : views) parts.push_back({v->name, v->shape});
  return parts;
}

}  // namespace

void GpuBackend::upload_moe_layer(const SafetensorsStore& w, int64_t l, ThreadPool& pool) {
  const ModelConfig& c = config_;
  const MoeLayerTensors t(c, w, l);
  Layer& L = layers_[static_cast<size_t>(l)];
  if (moe_hits_ == nullptr) {
    moe_hits_ = static_cast<int32_t*>(alloc(static_cast<size_t>(c.num_layers) * 4));
    device_->fill(moe_hits_, 0, static_cast<size_t>(c.num_layers) * 4);
  }
  L.moe_router = upload_expert_views(w, {{&t.router()}}, pool);
  std::vector<std::vector<const TensorView*>> gate_up, down;
  for (int64_t e = 0; e < c.moe.num_experts; ++e) {
    const ExpertViews x = t.expert(e);
    gate_up.push_back({x.gate, x.up});
    down.push_back({x.down});
  }
  // [E][gate I rows, up I rows][H] and [E][H][I]: an FP8 checkpoint's kept e4m3, else bf16.
  L.moe_gate_up8 = upload_fp8_experts(w, gate_up, pool);
  if (!L.moe_gate_up8) L.moe_gate_up = upload_expert_views(w, gate_up, pool);
  L.moe_down8 = upload_fp8_experts(w, down, pool);
  if (!L.moe_down8) L.moe_down = upload_expert_views(w, down, pool);
  if (t.shared_gate() != nullptr) {
    // The shared expert is a dense MLP: FP8 through the dense layers' FP8 GEMMs, as they are.
    const std::vector<const TensorView*> sgu = {t.shared().gate, t.shared().up}, sd = {t.shared().down};
    if (loads_as_fp8(w, c, parts_of(sgu), true)) {
      L.fshared_gate_up = upload_fp8(w, parts_of(sgu), pool);
    } else {
      L.shared_gate_up = upload_expert_views(w, {sgu}, pool);
    }
    if (loads_as_fp8(w, c, parts_of(sd), true)) {
      L.fshared_down = upload_fp8(w, parts_of(sd), pool);
    } else {
      L.shared_down = upload_expert_views(w, {sd}, pool);
    }
    L.shared_gate = upload_expert_views(w, {{t.shared_gate()}}, pool);
  }
}

// An FP8 checkpoint's experts stay e4m3 on the device (and --quantization fp8 makes a bf16
// checkpoint's e4m3 per row): each expert's stacked projection through the dense layers' FP8
// loader (load_fp8_matrix: every scale layout fp8_weights.h reads, as scales per row and k
// group), uploaded one expert at a time, so the host holds one expert.
// Every expert must share one layout (rows, k, group width): checkpoints quantize them alike.
GpuBackend::Fp8Weight GpuBackend::upload_fp8_experts(const SafetensorsStore& w, const std::vector<std::vector<const TensorView*>>& groups,
                                                      ThreadPool& pool) {
  // An FP8 checkpoint's experts, or a bf16 one's under --quantization fp8 (quantized per row here).
  if (groups.empty() || !loads_as_fp8(w, config_, parts_of(groups[0]), true)) return {};
  Fp8Weight f;
  int64_t rows_each = 0;
  for (size_t e = 0; e < groups.size(); ++e) {
    const Fp8Matrix m = load_fp8_matrix(w, config_, parts_of(groups[e]), &pool);
    if (e == 0) {
      rows_each = m.rows;
      f.k = m.cols;
      f.group_k = static_cast<int>(m.group_k);
      f.groups = static_cast<int>(m.k_groups());
      if (f.groups > 1 && f.group_k % 8 != 0) {
        throw NativeError(ErrorCode::kConfigInvalid, "FP8 expert '" + groups[e][0]->name + "': scale groups of " + std::to_string(f.group_k) +
                                                         " columns (the MoE kernels need a multiple of 8)");
      }
      f.n = rows_each * static_cast<int64_t>(groups.size());
      f.w = static_cast<gpu::fp8_bits*>(alloc(static_cast<size_t>(f.n * f.k)));
      f.scales = static_cast<float*>(alloc(static_cast<size_t>(f.n * f.groups) * sizeof(float)));
    } else if (m.rows != rows_each || m.cols != f.k || m.group_k != f.group_k) {
      throw NativeError(ErrorCode::kConfigInvalid, "FP8 expert '" + groups[e][0]->name + "': its shape or scale groups differ from expert 0's");
    }
    const int64_t row0 = static_cast<int64_t>(e) * rows_each;
    device_->upload(f.w + row0 * f.k, m.q.data(), m.q.size());
    device_->upload(f.scales + row0 * f.groups, m.scales.data(), m.scales.size() * sizeof(float));
    device_->synchronize();  // m's host memory goes with this iteration
  }
  moe_fp8_experts_ = true;
  return f;
}

void GpuBackend::set_moe_weights(gpu::MoeGemmArgs& g, gpu::bf16_bits* bf16, const Fp8Weight& f8) {
  g.w = bf16;
  g.w8 = nullptr;
  if (!f8) return;
  g.w8 = f8.w;
  g.w8_scales = f8.scales;
  g.w8_groups = f8.groups;
  g.w8_group_k = f8.group_k;
}

// bf16 experts. An FP8 checkpoint's under --quantization none (e4m3 with their scales,
// per-expert layout: validate_fp8_weights refuses a fused 3-D FP8 tensor) are dequantized to bf16
// here by the dense layers' --quantization none path (dequantize_into: load_matrix_f32, any scale
// layout fp8_weights.h reads), one expert at a time into the stacked matrix, so the host holds
// one expert's f32 copy, not a layer's. Otherwise they stay e4m3 (upload_fp8_experts).
gpu::bf16_bits* GpuBackend::upload_expert_views(const SafetensorsStore& w, const std::vector<std::vector<const TensorView*>>& groups,
                                                ThreadPool& pool) {
  bool fp8 = false;
  for (const auto& g : groups) {
    for (const TensorView* v : g) fp8 = fp8 || v->dtype == DType::kF8E4M3;
  }
  if (!fp8) {
    std::vector<const TensorView*> flat;
    for (const auto& g : groups) flat.insert(flat.end(), g.begin(), g.end());
    return upload_bf16_views(flat, pool);
  }
  int64_t elems = 0;
  for (const auto& g : groups) {
    for (const TensorView* v : g) elems += static_cast<int64_t>(v->num_elements());
  }
  auto* dst = static_cast<gpu::bf16_bits*>(alloc(static_cast<size_t>(elems) * 2));
  int64_t at = 0;
  for (const auto& g : groups) {
    std::vector<WeightPart> parts;
    int64_t n = 0;
    for (const TensorView* v : g) {
      parts.push_back({v->name, v->shape});
      n += static_cast<int64_t>(v->num_elements());
    }
    dequantize_into(w, parts, dst + at, &pool);
    at += n;
  }
  moe_fp8_dequantized_ = true;
  return dst;
}

std::vector<int32_t> GpuBackend::moe_experts_hit() {
  std::vector<int32_t> out(static_cast<size_t>(config_.num_layers), 0);
  if (moe_hits_ == nullptr) return out;
  device_->download(out.data(), moe_hits_, out.size() * 4);
  device_->synchronize();
  return out;
}

void GpuBackend::alloc_moe_activations(int64_t tokens) {
  const ModelConfig& c = config_;
  const MoeConfig& m = c.moe;
  const int64_t t = std::min(tokens, kMoeChunkTokens), n = t * m.top_k, slots = gpu::moe_max_slots(n, m.num_experts);
  auto i32 = [&](int64_t k) { return static_cast<int32_t*>(device_->alloc(static_cast<size_t>(k) * 4)); };
  auto f32 = [&](int64_t k) { return static_cast<float*>(device_->alloc(static_cast<size_t>(k) * 4)); };
  auto bf16 = [&](int64_t k) { return static_cast<gpu::bf16_bits*>(device_->alloc(static_cast<size_t>(k) * 2)); };
  MoeActivations& a = moe_act_;
  a.tokens = t;
  a.slots = slots;
  a.ids = i32(n);
  a.weights = f32(n);
  a.logits = f32(t * m.num_experts);
  a.counts = i32(m.num_experts);
  a.padded_offsets = i32(m.num_experts + 1);
  a.sorted = i32(slots);
  a.position = i32(n);
  a.active = i32(m.num_experts + 1);
  a.mma_tile_offsets = i32(m.num_experts + 1);
  a.group_counter = i32(1);
  device_->fill(a.group_counter, 0, 4);
  const int64_t tiles = gpu::kMoeRouterTileCounters;
  a.tile_counters = i32(tiles);
  device_->fill(a.tile_counters, 0, static_cast<size_t>(tiles) * 4);
  a.token_counters = i32(t);
  device_->fill(a.token_counters, 0, static_cast<size_t>(t) * 4);
  a.act = bf16(slots * m.expert_intermediate);
  a.y = f32(slots * c.hidden_size);
  if (m.shared_intermediate > 0) {
    a.shared_gate_up = bf16(t * 2 * m.shared_intermediate);
    a.shared_act = bf16(t * m.shared_intermediate);
    a.shared_out = f32(t * c.hidden_size);
  }
}

void GpuBackend::free_moe_activations() {
  MoeActivations& a = moe_act_;
  void* bufs[] = {a.ids, a.weights, a.logits, a.counts, a.padded_offsets, a.sorted, a.position, a.active, a.mma_tile_offsets, a.group_counter, a.tile_counters, a.token_counters, a.act, a.y,
                  a.shared_gate_up, a.shared_act, a.shared_out};
  for (void* p : bufs) device_->free(p);
  a = MoeActivations{};
}

// The path: 64- or 128-row tiles when the chunk's entries average at least kMoeMmaMinAvgRows
// per expert (an upper bound on how full the tiles are: routing decides, the host never sees
// it), else 8-row tiles. Those get enough CTAs to cover the GPU about four times over: the
// tiles of a step (an upper bound: every entry plus a partial tile per expert hit) times the
// column blocks. Columns come in multiples of a pass of the CTA's loop (32 weight rows: 16
// gate/up output columns, 32 down ones). A decode step of few tokens gets narrow column blocks
// (many CTAs per expert's weights), a larger one wide ones.
const GpuBackend::MoeGemmPlan& GpuBackend::moe_gemm_plan(int64_t tokens) {
  if (auto it = moe_tiles_.find(tokens); it != moe_tiles_.end()) return it->second;
  const MoeConfig& m = config_.moe;
  const int64_t entries = tokens * m.top_k, avg_rows = entries / m.num_experts;
  MoeGemmPlan p;
  if (moe_force_mma_rows_ >= 0) {
    p.mma_rows = moe_force_mma_rows_;
  } else if (avg_rows >= kMoeMmaMinAvgRows) {
    p.mma_rows = avg_rows >= kMoeMmaLargeAvgRows ? gpu::kMoeMmaRowsLarge : gpu::kMoeMmaRowsSmall;
  }
  const int64_t tiles = gpu::moe_max_slots(entries, m.num_experts) / gpu::kMoeTileRows;
  const int64_t want_ctas = 4 * std::max<int64_t>(1, device_->info().sm_count);
  auto cols_for = [&](int64_t n_out, int64_t pass) {
    const int64_t cols = (tiles * n_out + want_ctas - 1) / want_ctas;
    return static_cast<int>(std::min<int64_t>(std::max<int64_t>((cols + pass - 1) / pass * pass, pass), 512));
  };
  if (p.mma_rows == 0) {  // a pass of the CTA's loop is 32 weight rows: 16 gate/up output columns, 32 down ones
    p.gate_up_cols = cols_for(m.expert_intermediate, 16);
    p.down_cols = cols_for(config_.hidden_size, 32);
  }
  return moe_tiles_.emplace(tokens, p).first->second;
}

void GpuBackend::force_moe_gemm(int mma_rows) {
  if (mma_rows > 0 && mma_rows != gpu::kMoeMmaRowsSmall && mma_rows != gpu::kMoeMmaRowsLarge) {
    throw std::invalid_argument("force_moe_gemm: tile rows must be " + std::to_string(gpu::kMoeMmaRowsSmall) + " or " +
                                std::to_string(gpu::kMoeMmaRowsLarge));
  }
  moe_force_mma_rows_ = mma_rows < 0 ? -1 : mma_rows;
  moe_tiles_.clear();
}

std::string GpuBackend::moe_description() const {
  const MoeConfig& m = config_.moe;
  std::string s = "MoE " + std::to_string(m.num_experts) + " experts, top-" + std::to_string(m.top_k) +
                  ", grouped GEMMs on tensor cores, tiles chosen per shape:";
  if (moe_tiles_.empty()) s += " (none yet)";
  for (const auto& [tokens, p] : moe_tiles_) {
    s += " " + std::to_string(tokens) + " tok->";
    if (p.mma_rows > 0) {
      s += std::to_string(p.mma_rows) + "-row tiles";
    } else {
      s += std::to_string(gpu::kMoeTileRows) + "-row tiles, cols/CTA " + std::to_string(p.gate_up_cols) + " gate/up " +
           std::to_string(p.down_cols) + " down";
    }
  }
  return s;
}

void GpuBackend::run_moe(const Layer& W, int64_t t, void* stream, const float* norm_weight, gpu::bf16_bits* norm_out) {
  const ModelConfig& c = config_;
  const MoeConfig& m = c.moe;
  const int64_t h = c.hidden_size;
  MoeActivations& a = moe_act_;
  for (int64_t t0 = 0; t0 < t; t0 += a.tokens) {
    const int64_t cnt = std::min(a.tokens, t - t0);
    const int64_t n = cnt * m.top_k;
    const gpu::bf16_bits* xn = act_.xn + t0 * h;
    float* x = act_.x + t0 * h;

    if (W.shared_gate != nullptr) {  // the shared expert: a dense SwiGLU MLP over every token (first: the combine may run in the down launch)
      const int64_t s = m.shared_intermediate;
      // In a fused decode step (the only caller that passes the next norm) its gate/up is the
      // fused GEMV with SiLU * up in the epilogue, as a dense layer's: one launch for two, the
      // same bits as our GEMM and silu_mul.
      gpu::DecodeGemvArgs gu;
      if (norm_out != nullptr) {
        gu = decode_gemv_args(gpu::DecodeEpilogue::kSiluMul, static_cast<int>(cnt), 2 * s, h, xn, W.shared_gate_up, W.fshared_gate_up);
        gu.act = a.shared_act;
        gu.ldact = s;
      }
      if (norm_out != nullptr && decode_->gemv_applies(gu)) {
        decode_->gemv(gu, stream);
      } else {
        gemm(gpu::packed_gemm(cnt, 2 * s, h, xn, W.shared_gate_up, a.shared_gate_up, gpu::GemmOut::kBf16), &W.fshared_gate_up);
        gpu::SiluMulArgs sm;
        sm.gate_up = a.shared_gate_up;
        sm.num_tokens = static_cast<int>(cnt);
        sm.inter = static_cast<int>(s);
        sm.out = a.shared_act;
        kernels_->silu_mul(sm, stream);
      }
      gemm(gpu::packed_gemm(cnt, h, s, a.shared_act, W.shared_down, a.shared_out, gpu::GemmOut::kF32), &W.fshared_down);
    }

    gpu::MoeRouteArgs r;
    r.xn = xn;
    r.router = W.moe_router;
    r.num_tokens = static_cast<int>(cnt);
    r.hidden = static_cast<int>(h);
    r.num_experts = static_cast<int>(m.num_experts);
    r.top_k = static_cast<int>(m.top_k);
    r.renormalize = m.norm_topk_prob;
    r.ids = a.ids;
    r.weights = a.weights;
    r.logits = a.logits;
    r.tile_counters = a.tile_counters;
    gpu::MoeGroupArgs gr;
    gr.ids = a.ids;
    gr.num_entries = static_cast<int>(n);
    gr.num_experts = static_cast<int>(m.num_experts);
    gr.counts = a.counts;
    gr.padded_offsets = a.padded_offsets;
    gr.sorted = a.sorted;
    gr.position = a.position;
    gr.active = a.active;
    gr.hits_out = moe_hits_ + (&W - layers_.data());
    const MoeGemmPlan& plan = moe_gemm_plan(cnt);
    gr.mma_rows = plan.mma_rows;
    gr.mma_tile_offsets = a.mma_tile_offsets;
    gr.counter = a.group_counter;
    moe_kernels_->route(r, gr, stream);

    gpu::MoeGemmArgs g;
    g.padded_offsets = a.padded_offsets;
    g.sorted = a.sorted;
    g.num_experts = static_cast<int>(m.num_experts);
    g.top_k = static_cast<int>(m.top_k);
    g.max_slots = static_cast<int>(gpu::moe_max_slots(n, m.num_experts));
    g.hidden = static_cast<int>(h);
    g.inter = static_cast<int>(m.expert_intermediate);
    g.a = xn;
    g.act = a.act;
    g.mma_rows = plan.mma_rows;
    g.counts = a.counts;
    g.mma_tile_offsets = a.mma_tile_offsets;
    g.max_mma_tiles = plan.mma_rows > 0 ? static_cast<int>(gpu::moe_max_mma_tiles(n, m.num_experts, plan.mma_rows)) : 0;
    g.cols_per_cta = plan.gate_up_cols;
    set_moe_weights(g, W.moe_gate_up, W.moe_gate_up8);
    moe_kernels_->gate_up(g, stream);
    gpu::MoeCombineArgs cb;
    cb.ids = a.ids;
    cb.position = a.position;
    cb.y = a.y;
    cb.num_tokens = static_cast<int>(cnt);
    cb.top_k = static_cast<int>(m.top_k);
    cb.hidden = static_cast<int>(h);
    cb.xn = xn;
    cb.shared_gate = W.shared_gate;
    cb.shared = a.shared_out;
    cb.x = x;
    if (norm_out != nullptr) {
      cb.norm_weight = norm_weight;
      cb.norm_eps = static_cast<float>(c.rms_norm_eps);
      cb.norm_out = norm_out + t0 * h;
    }
    g.a = a.act;
    set_moe_weights(g, W.moe_down, W.moe_down8);
    g.weights = a.weights;
    g.y = a.y;
    g.cols_per_cta = plan.down_cols;
    if (plan.mma_rows == 0) {  // 8-row tiles: the combine runs in the down launch
      g.token_counters = a.token_counters;
      g.combine = cb;
      moe_kernels_->down(g, stream);
    } else {
      moe_kernels_->down(g, stream);
      moe_kernels_->combine(cb, stream);
    }
  }
}

}  // namespace tandem
