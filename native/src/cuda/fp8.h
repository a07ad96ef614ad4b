// FP8 E4M3 (OCP 8-bit floating point, "e4m3fn") as raw bits, with conversions written as integer
// operations so host code (weight loading, the CPU backend), SIMT kernels and CUDA kernels all
// produce the same bits:
//   sign 1 bit | exponent 4 bits (bias 7) | mantissa 3 bits
//   normal    (e = 1..15): (-1)^s 2^(e-7) (1 + m/8)     largest 0x7e = 448
//   subnormal (e = 0)    : (-1)^s 2^-6 (m/8) = m 2^-9  smallest 0x01 = 2^-9
//   NaN: s.1111.111 (0x7f, 0xff); no infinities.
// Encoding rounds to nearest, ties to even, and saturates (PTX cvt.rn.satfinite.e4m3x2.f32):
// finite values past 448 and infinities become +-448, NaN stays NaN.
#pragma once

#include <cstdint>
#include <cstring>

#include "bf16.h"  // TD_HOST_DEVICE

namespace tandem::gpu {

using fp8_bits = uint8_t;

/** Largest finite e4m3 magnitude. */
inline constexpr float kFp8Max = 448.0f;
/** Dynamic scales never go below this (an all-zero row would otherwise divide by zero). */
inline constexpr float kFp8MinScale = 1.0f / (448.0f * 512.0f);

TD_HOST_DEVICE float fp8_bits_to_float(fp8_bits b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t e = (b >> 3) & 0xfu, m = b & 0x7u;
  uint32_t u;
  if ((b & 0x7fu) == 0x7fu) {
    u = sign | 0x7fc00000u;
  } else if (e == 0) {
    float f = static_cast<float>(m) * (1.0f / 512.0f);  // exact: m 2^-9
    std::memcpy(&u, &f, 4);
    u |= sign;
  } else {
    u = sign | ((e + 120u) << 23) | (m << 20);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TD_HOST_DEVICE fp8_bits float_to_fp8_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<fp8_bits>(sign | 0x7fu);  // NaN
  if (a >= 0x43e80000u) return static_cast<fp8_bits>(sign | 0x7eu);  // >= 464 (past the 448|480 midpoint), inf
  const uint32_t e = a >> 23;
  if (e < 121) {
    // Below 2^-6: a multiple of 2^-9 (subnormal; 8 of them is the smallest normal, code 0x08).
    // q = mantissa-with-implicit-bit * 2^(e - 150) * 2^9, rounded to nearest even.
    if (e == 0) return static_cast<fp8_bits>(sign);  // f32 subnormals are far below 2^-10
    const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 141u - e;  // >= 21
    if (shift >= 32) return static_cast<fp8_bits>(sign);
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<fp8_bits>(sign | q);
  }
  uint32_t q = ((e - 120u) << 3) | ((a >> 20) & 0x7u);
  const uint32_t rem = a & 0xfffffu;
  if (rem > 0x80000u || (rem == 0x80000u && (q & 1u))) ++q;  // a carry moves into the exponent
  return static_cast<fp8_bits>(sign | q);
}

/** The float an e4m3 rounding of f reads back as. */
TD_HOST_DEVICE float round_to_fp8(float f) { return fp8_bits_to_float(float_to_fp8_bits(f)); }

/** Quantizes x with a dequantization scale (x ~ q * scale): q = e4m3(x / scale). */
TD_HOST_DEVICE fp8_bits fp8_quantize(float x, float scale) { return float_to_fp8_bits(x / scale); }

/** The dequantization scale of a dynamic quantization of values with absolute max `amax`. */
TD_HOST_DEVICE float fp8_dynamic_scale(float amax) {
  const float s = amax / kFp8Max;
  return s > kFp8MinScale ? s : kFp8MinScale;
}

}  // namespace tandem::gpu
