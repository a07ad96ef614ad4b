// e4m3 -> f32 for kernels that read FP8 data (the FP8 GEMV, attention over an e4m3 KV pool):
// four bytes of a 32-bit word at a time, exactly. sm_89+: cvt.rn.f16x2.e4m3x2 then f16 -> f32;
// elsewhere (sm_80, the SIMT target) integer operations and one multiply.
#pragma once

#include "../fp8.h"
#include "../kernel_lang.h"

namespace tandem::gpu::TD_NS {

/** Four e4m3 (the bytes of x, low first) to f32, exactly. */
TD_DEVICE void fp8x4_to_float(uint32_t x, float* out) {
#if TD_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t h01, h23;
  asm("{ .reg .b16 l; mov.b16 l, %1; cvt.rn.f16x2.e4m3x2 %0, l; }" : "=r"(h01) : "h"(static_cast<unsigned short>(x & 0xffffu)));
  asm("{ .reg .b16 l; mov.b16 l, %1; cvt.rn.f16x2.e4m3x2 %0, l; }" : "=r"(h23) : "h"(static_cast<unsigned short>(x >> 16)));
  asm("{ .reg .f16 a, b; mov.b32 {a, b}, %2; cvt.f32.f16 %0, a; cvt.f32.f16 %1, b; }" : "=f"(out[0]), "=f"(out[1]) : "r"(h01));
  asm("{ .reg .f16 a, b; mov.b32 {a, b}, %2; cvt.f32.f16 %0, a; cvt.f32.f16 %1, b; }" : "=f"(out[2]), "=f"(out[3]) : "r"(h23));
#else
  // Sign to bit 31, exponent and mantissa to bits 20..26: the f32 reads value * 2^-120 (an f32
  // subnormal for e4m3 subnormals), and the multiply by 2^120 restores it exactly. The NaN codes
  // would read 480: FP8 weights with NaN are refused at load, and the KV write never makes one
  // from a finite value.
  for (int i = 0; i < 4; ++i) {
    const uint32_t b = (x >> (8 * i)) & 0xffu;
    out[i] = td::bits_to_float(((b & 0x80u) << 24) | ((b & 0x7fu) << 20)) * 0x1p120f;
  }
#endif
}

/** Eight e4m3 (the bytes of w0, then w1, low first) times `scale`, in f32. */
TD_DEVICE void fp8x8_to_float(uint32_t w0, uint32_t w1, float scale, float* out) {
  fp8x4_to_float(w0, out);
  fp8x4_to_float(w1, out + 4);
  for (int i = 0; i < 8; ++i) out[i] *= scale;
}

/** Eight e4m3 at p (8-byte aligned) times `scale`. */
TD_DEVICE void fp8x8_to_float(const fp8_bits* p, float scale, float* out) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(p);
  fp8x8_to_float(w[0], w[1], scale, out);
}

}  // namespace tandem::gpu::TD_NS
