// KV block copies between two pools of the engine's block layout (core/kv_layout.h,
// block_major.v1) that may differ in block size and dtype (f32 / bf16 / fp8 e4m3): what moves KV between
// workers (a peer's pool mapped over CUDA IPC, a pinned staging buffer, the pool itself). One
// launch copies a whole block table: token t of the copy lives in source block src_ids[t /
// src.block_size], slot t % src.block_size, and lands in destination block dst_ids[t /
// dst.block_size], slot t % dst.block_size, for layers [layer_begin, layer_end), K and V.
// Conversions round to nearest even (bf16.h, fp8.h), as every kernel does; an e4m3 side holds
// K / k_scale and V / v_scale with the model's per-layer scales (`scales`, the same on both
// sides: one model), so fp8 <-> fp8 is a byte copy and fp8 <-> f32/bf16 scales on the way. The kernel is in
// kernels/kv_copy.cuh, compiled for both targets apart from the forward's kernels so a change
// here does not recompile them.
#pragma once

#include <cstdint>
#include <memory>

#include "bf16.h"  // TD_HOST_DEVICE

namespace tandem::gpu {

/** One side of a copy: a pool (or a packed staging buffer of whole blocks) and its block table. */
struct KvPoolView {
  void* base = nullptr;            // device-visible memory (own pool, mapped peer pool, pinned host)
  const int32_t* ids = nullptr;    // device-visible block table; null: block i is block i (packed buffers)
  int32_t block_size = 16;
  int32_t elem_bytes = 2;          // 4: f32, 2: bf16, 1: fp8 e4m3
  int32_t num_layers = 0;
  int64_t token_stride = 0;        // elements of one slot: num_kv_heads * head_dim
  TD_HOST_DEVICE int64_t kv_stride() const { return block_size * token_stride; }
  TD_HOST_DEVICE int64_t layer_stride() const { return 2 * kv_stride(); }
  TD_HOST_DEVICE int64_t block_stride() const { return num_layers * layer_stride(); }
};

struct KvCopyArgs {
  KvPoolView src;
  KvPoolView dst;
  int64_t num_tokens = 0;  // tokens to copy
  int64_t src_first = 0;   // token 0 of the copy is token src_first of the source table (dst: token 0)
  int32_t layer_begin = 0;
  int32_t layer_end = 0;
  const float* scales = nullptr;  // [layer][k, v] e4m3 scales (device-visible), read where a side is fp8; null: 1.0
};

/** The dequantization scale of (layer, K|V) for an fp8 side. */
TD_HOST_DEVICE float kv_copy_scale(const KvCopyArgs& a, int layer, int kv) {
  return a.scales != nullptr ? a.scales[2 * layer + kv] : 1.0f;
}

class KvCopyApi {
 public:
  virtual ~KvCopyApi() = default;
  virtual const char* target() const = 0;
  /**
   * Queues the copy on `stream`. The caller checked the layouts agree on layers and slot width
   * and that every id is in range; the ids arrays cover src_first + num_tokens (source) and
   * num_tokens (destination) tokens.
   */
  virtual void copy(const KvCopyArgs& a, void* stream) = 0;
  /** Queues `*slot = value` on `stream` (layer progress: slot is mapped pinned host memory). */
  virtual void mark(int64_t* slot, int64_t value, void* stream) = 0;
};

std::unique_ptr<KvCopyApi> make_simt_kv_copy();
/** Only in builds with the CUDA target (cuda_built()). */
std::unique_ptr<KvCopyApi> make_cuda_kv_copy();

}  // namespace tandem::gpu
