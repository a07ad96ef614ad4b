// The KV block copy of cuda/kv_copy.h on the host: the CPU backend's pool <-> host buffer and
// peer copies, and the reference the kernel is checked against. Plain loops over (token,
// layer, K|V, slot row); rows are memcpy'd when the dtype agrees, converted element by
// element (round to nearest even; an e4m3 side scaled by the layer's K or V scale) when it
// does not. ids and scales are host pointers here.
#pragma once

#include <cstdint>
#include <cstring>

#include "../cuda/bf16.h"
#include "../cuda/fp8.h"
#include "../cuda/kv_copy.h"
#include "kv_layout.h"

namespace tandem {

/** A copy side over a pool (or packed blocks, ids null) of `layout` at `base`. */
inline gpu::KvPoolView kv_view(const KvLayout& layout, const void* base, const int32_t* ids) {
  gpu::KvPoolView v;
  v.base = const_cast<void*>(base);
  v.ids = ids;
  v.block_size = static_cast<int32_t>(layout.block_size);
  v.elem_bytes = static_cast<int32_t>(layout.elem_bytes);
  v.num_layers = static_cast<int32_t>(layout.num_layers);
  v.token_stride = layout.token_stride();
  return v;
}

/** One element of a pool as f32 (fp8: times its scale). */
inline float kv_host_load(const unsigned char* p, int elem_bytes, float scale) {
  if (elem_bytes == 4) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  if (elem_bytes == 2) {
    gpu::bf16_bits b;
    std::memcpy(&b, p, 2);
    return gpu::bf16_bits_to_float(b);
  }
  return gpu::fp8_bits_to_float(*p) * scale;
}

/** Stores f as one element of a pool (fp8: f / scale, saturating). */
inline void kv_host_store(unsigned char* p, int elem_bytes, float f, float scale) {
  if (elem_bytes == 4) {
    std::memcpy(p, &f, 4);
  } else if (elem_bytes == 2) {
    const gpu::bf16_bits b = gpu::float_to_bf16_bits(f);
    std::memcpy(p, &b, 2);
  } else {
    *p = gpu::fp8_quantize(f, scale);
  }
}

inline void kv_copy_host(const gpu::KvCopyArgs& a) {
  auto row = [](const gpu::KvPoolView& v, int64_t token, int layer, int kv) {
    const int64_t index = token / v.block_size;
    const int64_t block = v.ids != nullptr ? v.ids[index] : index;
    const int64_t elem = block * v.block_stride() + layer * v.layer_stride() + kv * v.kv_stride() +
                         (token % v.block_size) * v.token_stride;
    return static_cast<unsigned char*>(v.base) + elem * v.elem_bytes;
  };
  const int64_t width = a.dst.token_stride;
  for (int64_t t = 0; t < a.num_tokens; ++t) {
    for (int layer = a.layer_begin; layer < a.layer_end; ++layer) {
      for (int kv = 0; kv < 2; ++kv) {
        const unsigned char* s = row(a.src, a.src_first + t, layer, kv);
        unsigned char* d = row(a.dst, t, layer, kv);
        if (a.src.elem_bytes == a.dst.elem_bytes) {
          std::memcpy(d, s, static_cast<size_t>(width * a.dst.elem_bytes));
          continue;
        }
        const float scale = gpu::kv_copy_scale(a, layer, kv);
        const int sb = a.src.elem_bytes, db = a.dst.elem_bytes;
        for (int64_t j = 0; j < width; ++j) kv_host_store(d + j * db, db, kv_host_load(s + j * sb, sb, scale), scale);
      }
    }
  }
}

}  // namespace tandem
