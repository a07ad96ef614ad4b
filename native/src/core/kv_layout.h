// Layout of the paged KV pool. One block holds block_size tokens for every layer, K and V,
// contiguously, so moving a block between workers (UCX, issue 7's device copies) is one
// contiguous region per block id:
//   pool[block][layer][k|v][slot][kv_head][head_dim]
// The pool is allocated once at load; the TypeScript block manager owns which block ids a
// sequence uses and passes them as block tables with each step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tandem {

inline constexpr const char* kKvLayoutName = "block_major.v1:[block][layer][kv][slot][kv_head][head_dim]";

// A pool's element type follows from its element size: 4 f32, 2 bf16, 1 FP8 e4m3. An e4m3 pool
// holds K / k_scale and V / v_scale, with the model's per-layer scales (the checkpoint's
// k_scale / v_scale, else 1.0; core/fp8_weights.h load_kv_scales); every pool of one model
// reads them the same, so a copy between pools of different types converts with them.
inline const char* kv_dtype_name(size_t elem_bytes) {
  return elem_bytes == 4 ? "f32" : elem_bytes == 2 ? "bf16" : elem_bytes == 1 ? "fp8_e4m3" : "?";
}
/** Element size of a dtype name (f32, bf16, fp8_e4m3; fp8 is e4m3); 0 when unknown. */
inline size_t kv_dtype_bytes(const std::string& name) {
  if (name == "f32") return 4;
  if (name == "bf16") return 2;
  if (name == "fp8_e4m3" || name == "fp8") return 1;
  return 0;
}

struct KvLayout {
  int64_t num_blocks = 0;
  int64_t block_size = 16;
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  size_t elem_bytes = 4;

  int64_t token_stride() const { return num_kv_heads * head_dim; }
  int64_t kv_stride() const { return block_size * token_stride(); }
  int64_t layer_stride() const { return 2 * kv_stride(); }
  int64_t block_stride() const { return num_layers * layer_stride(); }
  size_t bytes_per_block() const { return static_cast<size_t>(block_stride()) * elem_bytes; }
  size_t bytes_per_token() const {
    return static_cast<size_t>(num_layers * 2 * token_stride()) * elem_bytes;
  }
  /** Element offset of (block, layer, k=0|v=1, slot). */
  int64_t offset(int64_t block, int64_t layer, int kv, int64_t slot) const {
    return block * block_stride() + layer * layer_stride() + kv * kv_stride() + slot * token_stride();
  }
};

}  // namespace tandem
