// The KV block copy of cuda/kv_copy.h on the host: the CPU backend's pool <-> host buffer and
// peer copies, and the reference the kernel is checked against. Plain loops over (token,
// layer, K|V, slot row); rows are memcpy'd when the dtype agrees, converted element by
// element (round to nearest even) when it does not. ids are host pointers here.
#pragma once

#include <cstdint>
#include <cstring>

#include "../cuda/bf16.h"
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
        for (int64_t j = 0; j < width; ++j) {
          if (a.src.elem_bytes == 4) {
            float f;
            std::memcpy(&f, s + j * 4, 4);
            const gpu::bf16_bits b = gpu::float_to_bf16_bits(f);
            std::memcpy(d + j * 2, &b, 2);
          } else {
            gpu::bf16_bits b;
            std::memcpy(&b, s + j * 2, 2);
            const float f = gpu::bf16_bits_to_float(b);
            std::memcpy(d + j * 4, &f, 4);
          }
        }
      }
    }
  }
}

}  // namespace tandem
