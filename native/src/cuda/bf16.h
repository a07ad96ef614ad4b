// bf16 as raw bits, with round-to-nearest-even conversion written as integer operations so
// host code (weight upload, tests), SIMT kernels and CUDA kernels all round identically.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TD_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TD_HOST_DEVICE inline
#endif

namespace tandem::gpu {

using bf16_bits = uint16_t;

TD_HOST_DEVICE float bf16_bits_to_float(bf16_bits b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TD_HOST_DEVICE bf16_bits float_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16_bits>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<bf16_bits>(u >> 16);
}

/** The float a bf16 rounding of f reads back as. */
TD_HOST_DEVICE float round_to_bf16(float f) { return bf16_bits_to_float(float_to_bf16_bits(f)); }

}  // namespace tandem::gpu
