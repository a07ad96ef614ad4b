// Paged attention coverage for the test binary: cpu::PagedAttention against a plain
// double-precision softmax(q K^T * scale) V read through the same block tables. The cases
// cover what the vectorized kernel special-cases:
//  - head_dim below, at, above and not a multiple of one SIMD vector (7, 8, 16, 64, 80, 128),
//    so padded V rows and the odd-d tail of the score loop are exercised;
//  - GQA groups 1, 2, 3 and 7 (query rows per tile = tokens x group, in groups of 4);
//  - block sizes 1, 3, 4, 5 and 16 with shuffled block tables, so a key chunk spans blocks;
//  - context lengths on both sides of a key-chunk boundary, decodes at long context, prefill
//    from 0 and a chunk that starts mid-sequence (start_pos > 0), mixed in one batch;
//  - strided q/out rows: the gaps between heads' outputs keep their NaN canaries.
// It also checks that 1 and 3 threads, and one prefill against the same tokens split over
// two calls, give the same rows (the tiling must not change a row's arithmetic).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "../src/core/backend.h"
#include "../src/core/kv_layout.h"
#include "../src/core/thread_pool.h"
#include "../src/cpu/kernels.h"
#include "check.h"

namespace tandem_test {

struct AttentionCase {
  int64_t head_dim, heads, kv_heads, block_size;
};

struct AttnSeqSpec {
  int32_t start_pos, num_tokens;
};

// out[t][h] = sum_j softmax_j(q . k_j * scale) v_j over j <= position of token t, in double.
inline std::vector<double> attention_reference(const tandem::ForwardBatch& batch, const tandem::KvLayout& L,
                                               const std::vector<float>& pool, int64_t layer,
                                               const std::vector<float>& q, int64_t q_stride, int64_t heads,
                                               float scale) {
  const int64_t d = L.head_dim, group = heads / L.num_kv_heads;
  std::vector<double> out(static_cast<size_t>(batch.num_tokens * heads * d), 0.0);
  for (const tandem::ForwardSeq& s : batch.seqs) {
    for (int32_t i = 0; i < s.num_tokens; ++i) {
      const int64_t t = s.token_offset + i, pos = s.start_pos + i;
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t kvh = h / group;
        std::vector<double> w(static_cast<size_t>(pos + 1));
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= pos; ++j) {
          const float* k = pool.data() + L.offset(s.block_table[j / L.block_size], layer, 0, j % L.block_size) + kvh * d;
          double dot = 0;
          for (int64_t dd = 0; dd < d; ++dd) dot += static_cast<double>(q[static_cast<size_t>(t * q_stride + h * d + dd)]) * k[dd];
          w[static_cast<size_t>(j)] = dot * scale;
          mx = std::max(mx, w[static_cast<size_t>(j)]);
        }
        for (double& x : w) sum += (x = std::exp(x - mx));
        double* o = out.data() + (t * heads + h) * d;
        for (int64_t j = 0; j <= pos; ++j) {
          const float* v = pool.data() + L.offset(s.block_table[j / L.block_size], layer, 1, j % L.block_size) + kvh * d;
          for (int64_t dd = 0; dd < d; ++dd) o[dd] += w[static_cast<size_t>(j)] / sum * v[dd];
        }
      }
    }
  }
  return out;
}

inline void test_paged_attention() {
  const AttentionCase cases[] = {{8, 4, 2, 4}, {16, 2, 2, 5}, {64, 14, 2, 16}, {80, 6, 3, 3}, {128, 4, 1, 16}, {7, 3, 1, 1}};
  // Decode at a long context, two decodes on chunk edges, a prefill from 0, a mid-sequence chunk.
  const AttnSeqSpec seq_specs[] = {{300, 1}, {16, 1}, {31, 1}, {0, 37}, {45, 20}};
  tandem::ThreadPool pool1(1), pool3(3);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int case_index = 0;
  for (const AttentionCase& c : cases) {
    tandem::KvLayout L;
    L.block_size = c.block_size;
    L.num_layers = 2;
    L.num_kv_heads = c.kv_heads;
    L.head_dim = c.head_dim;
    const int64_t layer = 1;
    std::vector<std::vector<int32_t>> tables;
    int64_t blocks_used = 0;
    for (const AttnSeqSpec& sp : seq_specs) {
      const int64_t n = (sp.start_pos + sp.num_tokens + L.block_size - 1) / L.block_size;
      tables.emplace_back(static_cast<size_t>(n));
      blocks_used += n;
    }
    L.num_blocks = blocks_used + 3;
    // Shuffled, disjoint block ids: neighbouring positions live in unrelated blocks.
    std::vector<int32_t> ids(static_cast<size_t>(L.num_blocks));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    std::shuffle(ids.begin(), ids.end(), rng);
    size_t next = 0;
    for (auto& t : tables) {
      for (int32_t& b : t) b = ids[next++];
    }
    std::vector<float> kv(static_cast<size_t>(L.num_blocks * L.block_stride()));
    for (float& v : kv) v = normal(rng);

    tandem::ForwardBatch batch;
    for (size_t i = 0; i < tables.size(); ++i) {
      tandem::ForwardSeq s;
      s.token_offset = batch.num_tokens;
      s.num_tokens = seq_specs[i].num_tokens;
      s.start_pos = seq_specs[i].start_pos;
      s.block_table = tables[i].data();
      s.num_blocks = static_cast<int32_t>(tables[i].size());
      batch.seqs.push_back(s);
      batch.num_tokens += s.num_tokens;
    }
    const int64_t q_dim = c.heads * c.head_dim;
    const int64_t q_stride = q_dim + 5, out_stride = q_dim + 3;  // gaps between rows
    std::vector<float> q(static_cast<size_t>(batch.num_tokens * q_stride));
    for (float& v : q) v = 1.5f * normal(rng);  // peaked enough that the softmax is not flat
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

    tandem::cpu::AttentionLayer a;
    a.q = q.data();
    a.q_stride = q_stride;
    a.out_stride = out_stride;
    a.kv_pool = kv.data();
    a.layer = layer;
    a.num_heads = c.heads;
    a.scale = scale;
    tandem::cpu::PagedAttention kernel;
    std::vector<float> out3(static_cast<size_t>(batch.num_tokens * out_stride), NAN), out1 = out3;
    a.out = out3.data();
    kernel.run(pool3, batch, L, a);
    a.out = out1.data();
    kernel.run(pool1, batch, L, a);

    const std::vector<double> want = attention_reference(batch, L, kv, layer, q, q_stride, c.heads, scale);
    double worst = 0;
    bool gaps_ok = true, threads_same = true;
    for (int64_t t = 0; t < batch.num_tokens; ++t) {
      for (int64_t j = 0; j < out_stride; ++j) {
        const float got = out3[static_cast<size_t>(t * out_stride + j)];
        if (j >= q_dim) {
          gaps_ok = gaps_ok && std::isnan(got);
          continue;
        }
        const double err = std::isfinite(got) ? std::fabs(got - want[static_cast<size_t>(t * q_dim + j)]) : INFINITY;
        worst = std::max(worst, err);
        threads_same = threads_same && got == out1[static_cast<size_t>(t * out_stride + j)];
      }
    }
    CHECK(worst < 2e-5, "attention case %d (d=%lld group=%lld bs=%lld): max abs error %.3g", case_index,
          static_cast<long long>(c.head_dim), static_cast<long long>(c.heads / c.kv_heads),
          static_cast<long long>(c.block_size), worst);
    CHECK(gaps_ok, "attention case %d wrote outside its heads' columns", case_index);
    CHECK(threads_same, "attention case %d: 1 and 3 threads differ", case_index);

    // The prefill from 0 (seq 3) again, as 11 tokens then 26: the same rows, same arithmetic.
    const tandem::ForwardSeq& whole = batch.seqs[3];
    float max_split_diff = 0;
    std::vector<float> split(out3.size(), NAN);
    for (const auto& [first, count] : {std::pair<int32_t, int32_t>{0, 11}, {11, 26}}) {
      tandem::ForwardBatch part;
      tandem::ForwardSeq s = whole;
      s.token_offset = whole.token_offset + first;
      s.start_pos = whole.start_pos + first;
      s.num_tokens = count;
      part.seqs.push_back(s);
      part.num_tokens = batch.num_tokens;  // rows keep their batch indices
      a.out = split.data();
      kernel.run(pool3, part, L, a);
    }
    for (int32_t i = 0; i < whole.num_tokens; ++i) {
      for (int64_t j = 0; j < q_dim; ++j) {
        const size_t at = static_cast<size_t>((whole.token_offset + i) * out_stride + j);
        max_split_diff = std::max(max_split_diff, std::fabs(split[at] - out3[at]));
      }
    }
    CHECK(max_split_diff < 1e-6f, "attention case %d: split prefill differs by %g", case_index, max_split_diff);
    ++case_index;
  }
  std::printf("attention: %d layouts x %zu sequences checked\n", case_index, sizeof(seq_specs) / sizeof(seq_specs[0]));
}

}  // namespace tandem_test
