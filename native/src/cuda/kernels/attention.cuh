// Paged causal attention over the block-major KV pool on CUDA cores, one tiled body for both
// phases (prefill with head_dim 64 or 128 goes to the tensor-core kernel, attention_mma.cuh;
// this one serves decode, and prefill at other head dims):
//   prefill: a block takes a tile of one sequence's new tokens (PrefillItem) times the query
//            heads of one KV head, and attends over [0, position] of each token through the
//            sequence's block table, so prefix hits and earlier chunks are read in place;
//   decode:  a block takes one sequence's single new token, one KV head and one of num_splits
//            ranges of its KV length (flash-decoding); merge_kernel combines the ranges. A decode
//            span (a verify step's rows: consecutive positions of one sequence) is one block's
//            tile of several tokens, so each K/V chunk is read once for all of them; each row
//            still leaves its own partial, and the merge is per row as without spans.
// Per chunk of 32 keys: K and V are gathered through the block table into shared memory
// (16-byte loads, bf16 -> f32), each warp scores its query rows (lane j = key j), updates the
// online softmax (running max m, sum l) and leaves exp(s - m) in S; then every thread
// accumulates its share of O = diag(corr) O + S V. f32 throughout; output bf16.
// Shared memory (floats): Q[R][d] pre-scaled, O[R][d], K[32][d+1] (padded: lanes read rows),
// V[32][d], S[R][32], m[R], l[R], corr[R]; R = rows of the block (attention_max_rows).
#pragma once

#include "../kernel_api.h"
#include "attention_mma.cuh"
#include "bf16_vec.cuh"
#include "fp8_vec.cuh"
#include "launch.h"
#include "reduce.cuh"

namespace tandem::gpu::TD_NS {

inline constexpr unsigned kAttentionThreads = 128;

struct AttentionTile {
  int32_t token_row;   // activation row of the tile's first query token
  int32_t first_pos;   // position of that token
  int32_t num_tokens;  // query tokens in the tile
  int32_t key_begin;   // keys [key_begin, key_end) of this block
  int32_t key_end;
  int32_t table_offset;
  int32_t decode_index;  // split partials: the decode entry of the tile's first token
};

template <bool kSplit>
TD_DEVICE void attention_tile(const AttentionArgs& a, const AttentionTile& tile, int kv_head, int split_index) {
  TD_DYNAMIC_SHARED(float, smem);
  const int d = a.geo.head_dim;
  const int group = a.num_heads / a.geo.num_kv_heads;
  const int rows = group * tile.num_tokens;
  const int C = kAttentionChunk;
  float* Q = smem;
  float* O = Q + rows * d;
  float* K = O + rows * d;
  float* V = K + C * (d + 1);
  float* S = V + C * d;
  float* m = S + rows * C;
  float* l = m + rows;
  float* corr = l + rows;
  const unsigned tid = threadIdx.x, lane = td::lane_id();
  const int warps = static_cast<int>(blockDim.x / 32);

  // Row r: token r / group of the tile, query head kv_head * group + r % group.
  for (int e = static_cast<int>(tid); e < rows * d; e += static_cast<int>(blockDim.x)) {
    const int r = e / d, k = e % d;
    const int64_t row = tile.token_row + r / group;
    const int head = kv_head * group + r % group;
    Q[e] = a.q[row * a.q_stride + static_cast<int64_t>(head) * d + k] * a.scale;
    O[e] = 0.0f;
  }
  for (int r = static_cast<int>(tid); r < rows; r += static_cast<int>(blockDim.x)) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }
  const int32_t* table = a.block_tables + tile.table_offset;
  const int64_t layer_off = static_cast<int64_t>(a.layer) * a.geo.layer_stride + static_cast<int64_t>(kv_head) * d;
  const int vecs = d / 8;
  td::sync_threads();

  for (int base = tile.key_begin; base < tile.key_end; base += C) {
    for (int e = static_cast<int>(tid); e < C * vecs; e += static_cast<int>(blockDim.x)) {
      const int j = e / vecs, c8 = (e % vecs) * 8;
      const int pos = base + j;
      float kv[8], vv[8];
      if (pos < tile.key_end) {
        const int64_t blk = table[pos / a.geo.block_size];
        const int64_t at = blk * a.geo.block_stride + layer_off + static_cast<int64_t>(pos % a.geo.block_size) * a.geo.token_stride + c8;
        if (a.kv_fp8) {  // e4m3 pool: 8-byte loads, times the layer's K / V scales
          const fp8_bits* src = reinterpret_cast<const fp8_bits*>(a.pool) + at;
          fp8x8_to_float(src, a.kv_scales[2 * a.layer], kv);
          fp8x8_to_float(src + a.geo.kv_stride, a.kv_scales[2 * a.layer + 1], vv);
        } else {
          const td::bf16_bits* src = a.pool + at;
          unpack8(*reinterpret_cast<const td::vec16*>(src), kv);
          unpack8(*reinterpret_cast<const td::vec16*>(src + a.geo.kv_stride), vv);
        }
      } else {
        for (int x = 0; x < 8; ++x) kv[x] = vv[x] = 0.0f;
      }
      for (int x = 0; x < 8; ++x) {
        K[j * (d + 1) + c8 + x] = kv[x];
        V[j * d + c8 + x] = vv[x];
      }
    }
    td::sync_threads();
    for (int r = static_cast<int>(tid / 32); r < rows; r += warps) {
      const int pos = base + static_cast<int>(lane);
      const int row_pos = tile.first_pos + r / group;
      float s = -INFINITY;
      if (pos < tile.key_end && pos <= row_pos) {
        const float* q = Q + r * d;
        const float* k = K + lane * (d + 1);
        float acc = 0.0f;
        for (int x = 0; x < d; ++x) acc += q[x] * k[x];
        s = acc;
      }
      const float m_old = m[r];
      const float m_new = fmaxf(m_old, warp_max(s));
      // Rows with no visible key yet keep m = -inf: their p and correction are 0 and 1.
      const float p = m_new == -INFINITY ? 0.0f : expf(s - m_new);
      const float c = m_new == -INFINITY ? 1.0f : expf(m_old - m_new);
      const float sum = warp_sum(p);
      S[r * C + static_cast<int>(lane)] = p;
      if (lane == 0) {
        m[r] = m_new;
        l[r] = l[r] * c + sum;
        corr[r] = c;
      }
    }
    td::sync_threads();
    for (int e = static_cast<int>(tid); e < rows * d; e += static_cast<int>(blockDim.x)) {
      const int r = e / d, k = e % d;
      const float* p = S + r * C;
      float acc = O[e] * corr[r];
      for (int j = 0; j < C; ++j) acc += p[j] * V[j * d + k];
      O[e] = acc;
    }
    td::sync_threads();
  }

  if constexpr (kSplit) {
    // Unnormalised partial of (sequence, split, head): m, l, O.
    const int64_t per_head = attention_partial_floats(d);
    for (int e = static_cast<int>(tid); e < rows * (d + 2); e += static_cast<int>(blockDim.x)) {
      const int r = e / (d + 2), k = e % (d + 2);
      const int head = kv_head * group + r % group;
      const int64_t entry = tile.decode_index + r / group;
      float* dst = a.partial + ((entry * a.num_splits + split_index) * a.num_heads + head) * per_head;
      dst[k] = k == 0 ? m[r] : k == 1 ? l[r] : O[r * d + k - 2];
    }
  } else {
    for (int e = static_cast<int>(tid); e < rows * d; e += static_cast<int>(blockDim.x)) {
      const int r = e / d, k = e % d;
      const int64_t row = tile.token_row + r / group;
      const int head = kv_head * group + r % group;
      a.out[row * a.out_stride + static_cast<int64_t>(head) * d + k] = td::float_to_bf16(O[e] / l[r]);
    }
  }
}

// Templates (like every kernel in a header two target units include: the fused decode unit
// launches the decode kernels too).
// grid (num_prefill_items, num_kv_heads)
template <int kUnused = 0>
TD_GLOBAL void TD_LAUNCH_BOUNDS(kAttentionThreads) attention_prefill_kernel(AttentionArgs a) {
  const PrefillItem item = a.prefill_items[blockIdx.x];
  const SeqDesc seq = a.seqs[item.seq];
  AttentionTile tile;
  tile.token_row = seq.token_offset + item.first;
  tile.first_pos = seq.start_pos + item.first;
  tile.num_tokens = item.count;
  tile.key_begin = 0;
  tile.key_end = tile.first_pos + item.count;
  tile.table_offset = seq.table_offset;
  tile.decode_index = 0;
  attention_tile<false>(a, tile, static_cast<int>(blockIdx.y), 0);
}

/**
 * The decode tile of block (x, y, z): the span that decode entry x leads (its one token, or a
 * verify step's consecutive tokens), KV head y, split z of the span's last KV length; the last
 * row's block table covers every row's keys. num_tokens 0: entry x is inside a span.
 */
TD_DEVICE AttentionTile attention_decode_tile(const AttentionArgs& a) {
  const int x = static_cast<int>(blockIdx.x);
  const int span = a.decode_spans != nullptr ? a.decode_spans[x] : 1;
  AttentionTile tile{};
  tile.num_tokens = span;
  if (span == 0) return tile;
  const SeqDesc first = a.seqs[a.decode_seqs[x]];
  const SeqDesc last = span > 1 ? a.seqs[a.decode_seqs[x + span - 1]] : first;
  const int kv_len = last.start_pos + 1;
  const int per_split = (kv_len + a.num_splits - 1) / a.num_splits;
  const int chunked = (per_split + kAttentionChunk - 1) / kAttentionChunk * kAttentionChunk;
  tile.token_row = first.token_offset;
  tile.first_pos = first.start_pos;
  tile.key_begin = td::imin(kv_len, static_cast<int>(blockIdx.z) * chunked);
  tile.key_end = td::imin(kv_len, tile.key_begin + chunked);
  tile.table_offset = last.table_offset;
  tile.decode_index = x;
  return tile;
}

// grid (num_decode, num_kv_heads, num_splits): split z covers an equal share of the KV length,
// rounded up to whole chunks; splits past the end leave an empty partial (m = -inf, l = 0), as
// do a span's earlier rows for keys past their own position.
template <int kUnused = 0>
TD_GLOBAL void TD_LAUNCH_BOUNDS(kAttentionThreads) attention_decode_kernel(AttentionArgs a) {
  const AttentionTile tile = attention_decode_tile(a);
  if (tile.num_tokens == 0) return;
  attention_tile<true>(a, tile, static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.z));
}

/** Query rows of one decode block: a KV group's heads times the longest span. */
inline int attention_decode_rows(const AttentionArgs& a) {
  return a.num_heads / a.geo.num_kv_heads * (a.max_span > 1 ? a.max_span : 1);
}

/**
 * The merge of one (decode sequence, query head) by the whole block: out = sum_s exp(m_s - M) O_s
 * / sum_s exp(m_s - M) l_s over the splits. `load` reads the partials (a plain load, or one that
 * bypasses L1 when other blocks of the same launch wrote them: the fused decode attention).
 */
template <class Load>
TD_DEVICE void attention_merge_head(const AttentionArgs& a, int decode_index, int head, const Load& load) {
  const SeqDesc seq = a.seqs[a.decode_seqs[decode_index]];
  const int d = a.geo.head_dim;
  const int64_t per_head = attention_partial_floats(d);
  const float* base = a.partial + (static_cast<int64_t>(decode_index) * a.num_splits * a.num_heads + head) * per_head;
  const int64_t split_stride = static_cast<int64_t>(a.num_heads) * per_head;
  float mx = -INFINITY;
  for (int s = 0; s < a.num_splits; ++s) mx = fmaxf(mx, load(base + s * split_stride));
  float total = 0.0f;
  for (int s = 0; s < a.num_splits; ++s) {
    const float* p = base + s * split_stride;
    const float l = load(p + 1);
    if (l > 0.0f) total += l * expf(load(p) - mx);
  }
  td::bf16_bits* out = a.out + static_cast<int64_t>(seq.token_offset) * a.out_stride + static_cast<int64_t>(head) * d;
  for (int k = static_cast<int>(threadIdx.x); k < d; k += static_cast<int>(blockDim.x)) {
    float acc = 0.0f;
    for (int s = 0; s < a.num_splits; ++s) {
      const float* p = base + s * split_stride;
      if (load(p + 1) > 0.0f) acc += load(p + 2 + k) * expf(load(p) - mx);
    }
    out[k] = td::float_to_bf16(acc / total);
  }
}

struct AttentionPlainLoad {
  TD_DEVICE float operator()(const float* p) const { return *p; }
};

// grid (num_decode, num_heads).
template <int kUnused = 0>
TD_GLOBAL void attention_merge_kernel(AttentionArgs a) {
  attention_merge_head(a, static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y), AttentionPlainLoad{});
}

inline void launch_attention(const AttentionArgs& a, void* stream) {
  // The tensor-core kernel copies K/V as bf16 (cp.async): an e4m3 pool prefills on CUDA cores.
  if (a.num_prefill_items > 0 && !a.kv_fp8 && attention_mma_applies(a)) {
    launch_attention_mma(a, stream);  // head_dim 64 / 128: tensor cores (attention_mma.cuh)
  } else if (a.num_prefill_items > 0) {
    const int rows = attention_max_rows(a.geo.head_dim);
    const size_t bytes = static_cast<size_t>(attention_shared_floats(rows, a.geo.head_dim)) * sizeof(float);
    td::launch(attention_prefill_kernel<0>, {static_cast<unsigned>(a.num_prefill_items), static_cast<unsigned>(a.geo.num_kv_heads)},
               kAttentionThreads, bytes, stream, a);
  }
  if (a.num_decode > 0) {
    const size_t bytes = static_cast<size_t>(attention_shared_floats(attention_decode_rows(a), a.geo.head_dim)) * sizeof(float);
    td::launch(attention_decode_kernel<0>,
               {static_cast<unsigned>(a.num_decode), static_cast<unsigned>(a.geo.num_kv_heads), static_cast<unsigned>(a.num_splits)},
               kAttentionThreads, bytes, stream, a);
    td::launch(attention_merge_kernel<0>, {static_cast<unsigned>(a.num_decode), static_cast<unsigned>(a.num_heads)}, 128, 0, stream, a);
  }
}

}  // namespace tandem::gpu::TD_NS
