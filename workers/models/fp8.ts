/**
 * FP8 E4M3 ("e4m3fn", OCP 8-bit floating point: bias 7, no infinities, NaN = S.1111.111, largest
 * finite 448) and the three checkpoint layouts `runtime model make-tiny --quantize` writes. The
 * codec rounds to nearest even and saturates, bit for bit as native/src/cuda/fp8.h does, so the
 * engine reads back exactly what was meant.
 *
 *   fp8-block    quant_method "fp8", weight_block_size [B, B], `weight_scale_inv` per block
 *                (Qwen3-FP8 / DeepSeek layout; activations dynamic per token and B-column group)
 *   fp8-channel  compressed-tensors float-quantized, `weight_scale` [out, 1], activations
 *                dynamic per token (the layout of the common "FP8-dynamic" checkpoints)
 *   fp8-tensor   quant_method "fp8" without block size, one `weight_scale` per tensor,
 *                activations dynamic per token
 */
import type { TensorData } from './safetensors.js';

export const FP8_FORMATS = ['fp8-block', 'fp8-channel', 'fp8-tensor'] as const;
export type Fp8Format = (typeof FP8_FORMATS)[number];

/** Largest finite e4m3 magnitude. */
export const E4M3_MAX = 448;

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** e4m3 bits -> value (exact). */
export function e4m3ToF32(b: number): number {
  const sign = b & 0x80 ? -1 : 1;
  const e = (b >>> 3) & 0xf;
  const m = b & 7;
  if ((b & 0x7f) === 0x7f) return Number.NaN;
  if (e === 0) return sign * m * 2 ** -9;
  return sign * (1 + m / 8) * 2 ** (e - 7);
}

/** f32 -> e4m3 bits, round to nearest even, saturating at +-448 (infinities too); NaN stays NaN. */
export function f32ToE4m3(value: number): number {
  f32[0] = value;
  const u = u32[0]!;
  const sign = (u >>> 24) & 0x80;
  const a = u & 0x7fffffff;
  if (a > 0x7f800000) return sign | 0x7f;
  if (a >= 0x43e80000) return sign | 0x7e; // >= 464, the 448 | 480 midpoint
  const e = a >>> 23;
  if (e < 121) {
    if (e === 0) return sign;
    const mant = (a & 0x7fffff) | 0x800000;
    const shift = 141 - e;
    if (shift >= 32) return sign;
    let q = Math.floor(mant / 2 ** shift);
    const rem = mant - q * 2 ** shift;
    const half = 2 ** (shift - 1);
    if (rem > half || (rem === half && q & 1)) q++;
    return sign | q;
  }
  let q = ((e - 120) << 3) | ((a >>> 20) & 7);
  const rem = a & 0xfffff;
  if (rem > 0x80000 || (rem === 0x80000 && q & 1)) q++;
  return sign | q;
}

/** Block size of make-tiny's fp8-block checkpoints: small, so the tiny models hold several blocks. */
export const TINY_FP8_BLOCK = 32;

/** config.json's quantization_config for a format. */
export function fp8QuantizationConfig(format: Fp8Format, block = TINY_FP8_BLOCK): Record<string, unknown> {
  switch (format) {
    case 'fp8-block':
      return { quant_method: 'fp8', fmt: 'e4m3', activation_scheme: 'dynamic', weight_block_size: [block, block] };
    case 'fp8-tensor':
      return { quant_method: 'fp8', activation_scheme: 'dynamic' };
    case 'fp8-channel':
      return {
        quant_method: 'compressed-tensors',
        format: 'float-quantized',
        quantization_status: 'compressed',
        ignore: ['lm_head'],
        config_groups: {
          group_0: {
            targets: ['Linear'],
            weights: { num_bits: 8, type: 'float', strategy: 'channel', dynamic: false, symmetric: true },
            input_activations: { num_bits: 8, type: 'float', strategy: 'token', dynamic: true, symmetric: true },
          },
        },
      };
  }
}

/**
 * One [rows, cols] weight (row-major values) quantized in a format: the e4m3 tensor and its scale
 * tensor (dequantization multipliers, w ~ e4m3 * scale), named as the format's loaders expect.
 */
export function quantizeWeight(name: string, values: Float32Array, rows: number, cols: number, format: Fp8Format, block = TINY_FP8_BLOCK): TensorData[] {
  const bn = format === 'fp8-block' ? block : format === 'fp8-channel' ? 1 : rows;
  const bk = format === 'fp8-block' ? block : cols;
  const rb = Math.ceil(rows / bn);
  const kb = Math.ceil(cols / bk);
  const scales = new Float32Array(rb * kb);
  for (let i = 0; i < rb; i++) {
    for (let j = 0; j < kb; j++) {
      let amax = 0;
      for (let r = i * bn; r < Math.min(rows, (i + 1) * bn); r++) {
        for (let c = j * bk; c < Math.min(cols, (j + 1) * bk); c++) amax = Math.max(amax, Math.abs(values[r * cols + c]!));
      }
      // As the engine's on-load quantizer: never below 1 / (448 * 512), so an all-zero block divides safely.
      scales[i * kb + j] = Math.fround(Math.max(Math.fround(amax / E4M3_MAX), Math.fround(1 / (E4M3_MAX * 512))));
    }
  }
  const q = new Uint8Array(rows * cols);
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) q[r * cols + c] = f32ToE4m3(Math.fround(values[r * cols + c]! / scales[Math.floor(r / bn) * kb + Math.floor(c / bk)]!));
  }
  const module = name.replace(/\.weight$/, '');
  const scaleShape = format === 'fp8-block' ? [rb, kb] : format === 'fp8-channel' ? [rows, 1] : [];
  const scaleName = format === 'fp8-block' ? `${module}.weight_scale_inv` : `${module}.weight_scale`;
  const scaleBytes = new Uint8Array(scales.length * 4);
  const view = new DataView(scaleBytes.buffer);
  for (let i = 0; i < scales.length; i++) view.setFloat32(4 * i, scales[i]!, true);
  return [
    { name, dtype: 'F8_E4M3', shape: [rows, cols], data: q },
    { name: scaleName, dtype: 'F32', shape: scaleShape, data: scaleBytes },
  ];
}

/**
 * The linear layers FP8 checkpoints quantize: attention and MLP projections, every expert's
 * (Mixtral's experts.N.w1/w3/w2 too) and a shared expert's. Embeddings, norms, the LM head and a
 * mixture of experts' router (mlp.gate, block_sparse_moe.gate) and shared-expert gate stay as they are.
 */
export function isQuantizedLinear(name: string): boolean {
  return /\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)\.weight$/.test(name) || /\.experts\.\d+\.w[123]\.weight$/.test(name);
}
