// FP8 weights as both backends load them: a matrix weight (one tensor, or several stacked by
// rows, as q/k/v and gate/up are fused) in e4m3 with its dequantization scales, and how its
// GEMM quantizes the activations. The format is a property of each weight: the CPU and CUDA
// GEMM dispatch read it, the model runner does not change.
//
//   w[r][c] = e4m3(q[r][c]) * scales[r][c / group_k]
//
// Every checkpoint layout maps onto that one shape: per-tensor scales become one scale per row
// of their part (exact), per-channel scales are per row already, and [bn, bk] block scales are
// repeated over their bn rows (group_k = bk). Stacked parts of a block-scaled checkpoint keep
// block_n, so a GPU GEMM that takes 2-D block scales can rebuild them when every part's row
// count is a multiple of block_n.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "quant_config.h"

namespace tandem {

class SafetensorsStore;
class ThreadPool;
struct ModelConfig;

/** How one FP8 GEMM quantizes its activations (x ~ e4m3(x / s) * s). */
struct ActQuantSpec {
  ActQuant scheme = ActQuant::kNone;
  float static_scale = 1.0f;  // kStaticTensor: the checkpoint's input_scale (max over stacked parts)
  float ub = 0.0f;            // > 0: dynamic scales clamp the amax to this first (fbgemm)
  int64_t group = 0;          // kDynamicGroup: columns per scale (the weights' group_k)
};

struct Fp8Matrix {
  int64_t rows = 0, cols = 0;
  int64_t group_k = 0;  // columns per scale: cols (one scale per row) or the block's columns
  int64_t block_n = 0;  // block-scaled checkpoints: rows per scale block within each stacked part
  std::vector<uint8_t> q;     // [rows][cols] e4m3 bits
  std::vector<float> scales;  // [rows][k_groups()]
  ActQuantSpec act;

  int64_t k_groups() const { return (cols + group_k - 1) / group_k; }
  size_t bytes() const { return q.size() + scales.size() * sizeof(float); }
  /** Row r dequantized to f32 (the reference for every FP8 kernel). */
  void dequantize_row(int64_t r, float* out) const;
};

/** A tensor name and the shape config.json implies for it. */
using WeightPart = std::pair<std::string, std::vector<int64_t>>;

/**
 * Whether this (stacked) matrix weight loads as FP8: its tensors are F8_E4M3, or `linear` and the
 * config quantizes at load (`--quantization fp8`) and the module is not ignored. False when the
 * config dequantizes (`--quantization none`). Mixed stacks (one part FP8, another not) are not
 * FP8: they load dequantized.
 */
bool loads_as_fp8(const SafetensorsStore& store, const ModelConfig& config, const std::vector<WeightPart>& parts, bool linear);

/**
 * The stacked parts as FP8 (after loads_as_fp8 said yes). Scale tensors missing: not_found; wrong
 * shape: config_invalid. `pool` (optional) spreads quantization at load over its threads.
 */
Fp8Matrix load_fp8_matrix(const SafetensorsStore& store, const ModelConfig& config, const std::vector<WeightPart>& parts,
                          ThreadPool* pool = nullptr);

/** The stacked parts as f32, row-major: FP8 parts dequantized with their scales, others converted. */
std::vector<float> load_matrix_f32(const SafetensorsStore& store, const ModelConfig& config, const std::vector<WeightPart>& parts,
                                   ThreadPool* pool = nullptr);

/**
 * Checks what load_fp8_matrix and the KV scales will need, before a backend allocates anything:
 * FP8 tensors only where a quantization_config allows them and never in norms or biases, scale
 * tensors present with the shapes of the config's scheme, and k_scale / v_scale where the config
 * declares a quantized KV cache.
 */
void validate_fp8_weights(const ModelConfig& config, const SafetensorsStore& store);

/**
 * Per-layer e4m3 KV-cache scales, [layer][k, v]: the checkpoint's k_scale / v_scale (also the
 * older kv_scale and ModelOpt's k_proj.k_scale names), 1.0 where it has none.
 */
std::vector<float> load_kv_scales(const SafetensorsStore& store, const ModelConfig& config);

/** Quantizes a row-major f32 matrix per row (the `--quantization fp8` scheme; tests and make-tiny's reference). */
Fp8Matrix quantize_per_row(const float* w, int64_t rows, int64_t cols, ThreadPool* pool = nullptr);

/** Quantizes one activation row with the spec's scheme: q[c] = e4m3(x[c] / s[g]); writes one scale per group. */
void quantize_activation_row(const float* x, int64_t cols, const ActQuantSpec& spec, uint8_t* q, float* scales);

}  // namespace tandem
