// Eight bf16 values in one 16-byte vector: the unit of every global load and store of bf16
// activations, weights and KV in these kernels.
#pragma once

#include "../kernel_lang.h"

namespace tandem::gpu::TD_NS {

TD_DEVICE void unpack8(const td::vec16& v, float* out) {
  out[0] = td::bf16_lo(v.x);
  out[1] = td::bf16_hi(v.x);
  out[2] = td::bf16_lo(v.y);
  out[3] = td::bf16_hi(v.y);
  out[4] = td::bf16_lo(v.z);
  out[5] = td::bf16_hi(v.z);
  out[6] = td::bf16_lo(v.w);
  out[7] = td::bf16_hi(v.w);
}

TD_DEVICE td::vec16 pack8(const float* in) {
  td::vec16 v;
  v.x = td::pack_bf16x2(in[0], in[1]);
  v.y = td::pack_bf16x2(in[2], in[3]);
  v.z = td::pack_bf16x2(in[4], in[5]);
  v.w = td::pack_bf16x2(in[6], in[7]);
  return v;
}

}  // namespace tandem::gpu::TD_NS
