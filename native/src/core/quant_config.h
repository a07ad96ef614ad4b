// QuantConfig: what a checkpoint's `quantization_config` (config.json) says about its FP8
// weights, validated, plus the on-load quantization `--quantization fp8` asks for. Three
// checkpoint formats are read; everything else is refused naming the field:
//
//   quant_method "fp8"                 weights e4m3 with `weight_scale_inv` per [bn, bk] block
//                                      (`weight_block_size`; activations dynamic per token and
//                                      per bk-wide group: Qwen3-FP8, DeepSeek-V3), or per tensor
//                                      (`weight_scale`; activations dynamic per token, or static
//                                      `input_scale` with `activation_scheme: static`: AutoFP8)
//   "compressed-tensors"               `format: float-quantized`, one config group targeting
//                                      Linear: weights per channel ([out, 1]) or per tensor or
//                                      per block (`weight_scale`); activations dynamic per token,
//                                      static per tensor (`input_scale`), or none (weight-only)
//   "fbgemm_fp8"                       weights per channel (`weight_scale` [out, 1]), activations
//                                      dynamic per token with amax clamped to `activation_scale_ub`
//
// Scales are dequantization multipliers everywhere (w = e4m3 * scale). Whether one weight is
// FP8 is read from its safetensors dtype (F8_E4M3); the config says how its scales and its
// activations go. Modules named in the ignore list (`ignore`, `modules_to_not_convert`,
// `ignored_layers`) stay in the checkpoint's precision.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

class Json;

enum class QuantMethod { kNone, kFp8, kCompressedTensors, kFbgemmFp8, kOnLoad };
enum class WeightScaling { kTensor, kChannel, kBlock };
/** How a GEMM's activations are quantized for an FP8 weight (kNone: W8A16, the weight is dequantized). */
enum class ActQuant { kNone, kDynamicToken, kDynamicGroup, kStaticTensor };

struct QuantConfig {
  QuantMethod method = QuantMethod::kNone;
  WeightScaling weights = WeightScaling::kChannel;
  int64_t block_n = 0, block_k = 0;  // kBlock: rows and columns per scale
  ActQuant activations = ActQuant::kNone;
  float act_scale_ub = 0.0f;         // > 0: dynamic scales clamp the activations' amax to this (fbgemm)
  std::vector<std::string> ignore;   // module names (or "re:" patterns) kept unquantized
  bool kv_cache_scales = false;      // compressed-tensors kv_cache_scheme: k_scale / v_scale are required
  bool dequantize = false;           // `--quantization none`: FP8 tensors load dequantized to the backend's precision

  bool quantized() const { return method != QuantMethod::kNone; }
  /** Whether a module (e.g. "model.layers.0.mlp.down_proj") is in the ignore list. */
  bool ignores(const std::string& module) const;
  /** One phrase for logs: "fp8 block 128x128, activations dynamic per token group". */
  std::string describe() const;

  /** Parses config.json's `quantization_config` (absent/null: kNone); throws config_invalid naming the field. */
  static QuantConfig from_json(const Json& root, const std::string& source);
  /** `--quantization fp8` on a bf16/f16/f32 checkpoint: per-channel weights, dynamic per-token activations. */
  static QuantConfig on_load_fp8();
};

/**
 * Applies the `--quantization` option: "" keeps the checkpoint's own config; "fp8" quantizes an
 * unquantized checkpoint at load (an FP8 checkpoint keeps its own scheme); "none" dequantizes an
 * FP8 checkpoint. Anything else is invalid_argument.
 */
void apply_quantization_option(QuantConfig& config, const std::string& option);

}  // namespace tandem
