/**
 * Floating-point storage formats used in model files. bf16 is the top 16 bits of an IEEE f32,
 * rounded to nearest-even (what PyTorch's `tensor.to(torch.bfloat16)` does), so a reference
 * implementation that upcasts bf16 -> f32 sees exactly the values we meant.
 */
export type WeightDtype = 'bf16' | 'f32';

/** safetensors dtype names this project reads or writes. */
export type SafetensorsDtype = 'BF16' | 'F16' | 'F32' | 'I32' | 'I64' | 'U8' | 'F8_E4M3';

export const SAFETENSORS_DTYPE_BYTES: Readonly<Record<SafetensorsDtype, number>> = {
  BF16: 2,
  F16: 2,
  F32: 4,
  I32: 4,
  I64: 8,
  U8: 1,
  F8_E4M3: 1,
};

export const WEIGHT_DTYPE_INFO: Readonly<
  Record<WeightDtype, { safetensors: SafetensorsDtype; torch: string; bytes: number }>
> = {
  bf16: { safetensors: 'BF16', torch: 'bfloat16', bytes: 2 },
  f32: { safetensors: 'F32', torch: 'float32', bytes: 4 },
};

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** One f32 value to bf16 bits, round-to-nearest-even; NaN stays a quiet NaN. */
export function f32ToBf16Bits(value: number): number {
  f32[0] = value;
  const bits = u32[0]!;
  if ((bits & 0x7fffffff) > 0x7f800000) return ((bits >>> 16) | 0x0040) & 0xffff;
  const rounded = (bits + 0x7fff + ((bits >>> 16) & 1)) >>> 0;
  return rounded >>> 16;
}

export function bf16BitsToF32(bits: number): number {
  u32[0] = (bits & 0xffff) << 16;
  return f32[0]!;
}

/** Encode f32 values as little-endian bf16 bytes. */
export function encodeBf16(values: Float32Array): Uint8Array {
  const out = new Uint8Array(values.length * 2);
  for (let i = 0; i < values.length; i++) {
    const b = f32ToBf16Bits(values[i]!);
    out[2 * i] = b & 0xff;
    out[2 * i + 1] = b >>> 8;
  }
  return out;
}

/** Encode f32 values as little-endian f32 bytes (independent of host endianness). */
export function encodeF32(values: Float32Array): Uint8Array {
  const out = new Uint8Array(values.length * 4);
  const view = new DataView(out.buffer);
  for (let i = 0; i < values.length; i++) view.setFloat32(4 * i, values[i]!, true);
  return out;
}

/** Encode in a weight dtype. */
export function encodeWeights(values: Float32Array, dtype: WeightDtype): Uint8Array {
  return dtype === 'bf16' ? encodeBf16(values) : encodeF32(values);
}

/** Decode little-endian half-precision (IEEE f16) bits. */
export function f16BitsToF32(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exp = (bits >>> 10) & 0x1f;
  const frac = bits & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 0x1f) return frac ? Number.NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}
