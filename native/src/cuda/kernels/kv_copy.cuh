// The KV block copy (kv_copy.h). One CTA per (destination block, layer, K|V): its rows are
// contiguous in the destination; each row (one token's slot, num_kv_heads * head_dim elements)
// is found in the source by the token's absolute index, so a block-size change is only an
// address computation. Same dtype: 16-byte vectors when the row is a multiple of 16 bytes
// (every real model's); otherwise element by element with the rounding of bf16.h / fp8.h (an
// e4m3 side scaled by the layer's K or V scale, KvCopyArgs::scales).
#pragma once

#include "../fp8.h"
#include "../kv_copy.h"
#include "launch.h"

namespace tandem::gpu::TD_NS {

inline constexpr unsigned kKvCopyThreads = 256;

template <typename T>
TD_DEVICE float kv_load(const T* p, float scale);
template <>
TD_DEVICE float kv_load<float>(const float* p, float) { return *p; }
template <>
TD_DEVICE float kv_load<td::bf16_bits>(const td::bf16_bits* p, float) { return td::bf16_to_float(*p); }
template <>
TD_DEVICE float kv_load<fp8_bits>(const fp8_bits* p, float scale) { return fp8_bits_to_float(*p) * scale; }

template <typename T>
TD_DEVICE void kv_store(T* p, float v, float scale);
template <>
TD_DEVICE void kv_store<float>(float* p, float v, float) { *p = v; }
template <>
TD_DEVICE void kv_store<td::bf16_bits>(td::bf16_bits* p, float v, float) { *p = td::float_to_bf16(v); }
template <>
TD_DEVICE void kv_store<fp8_bits>(fp8_bits* p, float v, float scale) { *p = fp8_quantize(v, scale); }

/** Address of (block table entry, slot) in a view, for one layer and K|V. */
template <typename T>
TD_DEVICE const T* kv_row(const KvPoolView& v, int64_t token, int layer, int kv) {
  const int64_t index = token / v.block_size;
  const int64_t block = v.ids != nullptr ? v.ids[index] : index;
  return static_cast<const T*>(v.base) + block * v.block_stride() + layer * v.layer_stride() + kv * v.kv_stride() +
         (token % v.block_size) * v.token_stride;
}

template <typename S, typename D, bool kVector>
TD_GLOBAL void TD_LAUNCH_BOUNDS(kKvCopyThreads) kv_copy_kernel(KvCopyArgs a) {
  const int64_t first = static_cast<int64_t>(blockIdx.x) * a.dst.block_size;
  const int64_t rows = a.num_tokens - first < a.dst.block_size ? a.num_tokens - first : a.dst.block_size;
  const int layer = a.layer_begin + static_cast<int>(blockIdx.y) / 2;
  const int kv = static_cast<int>(blockIdx.y) % 2;
  D* dst = const_cast<D*>(kv_row<D>(a.dst, first, layer, kv));  // rows are contiguous from here
  const int64_t width = a.dst.token_stride;
  if constexpr (kVector) {
    const int64_t vecs = width * static_cast<int64_t>(sizeof(S)) / 16;
    for (int64_t c = threadIdx.x; c < rows * vecs; c += blockDim.x) {
      const int64_t r = c / vecs, j = c % vecs;
      const auto* s = reinterpret_cast<const td::vec16*>(kv_row<S>(a.src, a.src_first + first + r, layer, kv));
      reinterpret_cast<td::vec16*>(dst + r * width)[j] = s[j];
    }
  } else {
    const float scale = kv_copy_scale(a, layer, kv);
    for (int64_t e = threadIdx.x; e < rows * width; e += blockDim.x) {
      const int64_t r = e / width, j = e % width;
      const S* src = kv_row<S>(a.src, a.src_first + first + r, layer, kv) + j;
      if constexpr (sizeof(S) == sizeof(D)) {
        dst[r * width + j] = *src;  // one type: the bits (an fp8 round trip through f32 need not be exact)
      } else {
        kv_store<D>(dst + r * width + j, kv_load<S>(src, scale), scale);
      }
    }
  }
}

template <typename S, typename D>
void launch_kv_copy_typed(const KvCopyArgs& a, void* stream) {
  const td::Grid grid{td::ceil_div(a.num_tokens, a.dst.block_size), static_cast<unsigned>(2 * (a.layer_end - a.layer_begin)), 1};
  bool vector = false;
  if constexpr (sizeof(S) == sizeof(D)) {
    vector = (a.dst.token_stride * static_cast<int64_t>(sizeof(S))) % 16 == 0 &&
             reinterpret_cast<uintptr_t>(a.src.base) % 16 == 0 && reinterpret_cast<uintptr_t>(a.dst.base) % 16 == 0;
  }
  if (vector) {
    td::launch(kv_copy_kernel<S, D, true>, grid, kKvCopyThreads, 0, stream, a);
  } else {
    td::launch(kv_copy_kernel<S, D, false>, grid, kKvCopyThreads, 0, stream, a);
  }
}

template <typename S>
void launch_kv_copy_from(const KvCopyArgs& a, void* stream) {
  switch (a.dst.elem_bytes) {
    case 4: launch_kv_copy_typed<S, float>(a, stream); break;
    case 2: launch_kv_copy_typed<S, td::bf16_bits>(a, stream); break;
    default: launch_kv_copy_typed<S, fp8_bits>(a, stream); break;
  }
}

inline void launch_kv_copy(const KvCopyArgs& a, void* stream) {
  if (a.num_tokens <= 0 || a.layer_end <= a.layer_begin) return;
  switch (a.src.elem_bytes) {
    case 4: launch_kv_copy_from<float>(a, stream); break;
    case 2: launch_kv_copy_from<td::bf16_bits>(a, stream); break;
    default: launch_kv_copy_from<fp8_bits>(a, stream); break;
  }
}

// One thread, queued after the layer's K/V write on the stream. A host (or peer) poller reads
// the slot in mapped pinned memory while kernels run, so the store is a system-scope release:
// the fence orders everything this stream wrote before it (the K/V the flag announces) ahead of
// the flag for every observer, not only for this GPU.
TD_GLOBAL void kv_mark_kernel(int64_t* slot, int64_t value) {
  if (threadIdx.x == 0) {
    td::threadfence_system();
    *reinterpret_cast<volatile int64_t*>(slot) = value;
  }
}

class TargetKvCopy final : public KvCopyApi {
 public:
  const char* target() const override {
#if TD_CUDA
    return "cuda";
#else
    return "simt";
#endif
  }
  void copy(const KvCopyArgs& a, void* stream) override { launch_kv_copy(a, stream); }
  void mark(int64_t* slot, int64_t value, void* stream) override { td::launch(kv_mark_kernel, td::Grid{1, 1, 1}, 32, 0, stream, slot, value); }
};

}  // namespace tandem::gpu::TD_NS
