// Engine::embed: the pooling step of an embedding worker. Sequences are packed into forward
// passes that fit the KV pool (each sequence from position 0 through its own fresh blocks),
// the backend pools each sequence's final-norm hidden states (pool_final_hidden, the one host
// implementation both backends call), and the vectors are L2-normalized here, on the host, the
// same way for every backend.
#include "embedding.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../cpu/kernels.h"
#include "engine.h"
#include "error.h"
#include "thread_pool.h"

namespace tandem {

void Backend::pool_hidden(const ForwardBatch&, Pooling, float*) {
  throw NativeError(ErrorCode::kInvalidArgument,
                    std::string("embeddings are not implemented on the '") + name() + "' backend (use --device cpu)");
}

void pool_final_hidden(const float* x, const ForwardBatch& batch, Pooling pooling, const float* norm_weight, int64_t hidden,
                       float eps, float* dst, ThreadPool& pool) {
  pool.parallel_for(static_cast<int64_t>(batch.seqs.size()), 1, [&](int64_t b, int64_t e, int) {
    std::vector<float> normed(static_cast<size_t>(hidden));
    std::vector<double> sum(static_cast<size_t>(hidden));
    for (int64_t si = b; si < e; ++si) {
      const ForwardSeq& s = batch.seqs[static_cast<size_t>(si)];
      float* out = dst + si * hidden;
      if (pooling == Pooling::kLast) {
        cpu::rmsnorm(x + static_cast<int64_t>(s.token_offset + s.num_tokens - 1) * hidden, norm_weight, hidden, eps, out);
        continue;
      }
      std::fill(sum.begin(), sum.end(), 0.0);
      for (int32_t i = 0; i < s.num_tokens; ++i) {
        cpu::rmsnorm(x + static_cast<int64_t>(s.token_offset + i) * hidden, norm_weight, hidden, eps, normed.data());
        for (int64_t j = 0; j < hidden; ++j) sum[static_cast<size_t>(j)] += normed[static_cast<size_t>(j)];
      }
      for (int64_t j = 0; j < hidden; ++j) out[j] = static_cast<float>(sum[static_cast<size_t>(j)] / s.num_tokens);
    }
  });
}

namespace {

void l2_normalize(float* v, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(v[i]) * v[i];
  // sentence-transformers' Normalize is torch's F.normalize: x / max(||x||, 1e-12).
  const float inv = static_cast<float>(1.0 / std::max(std::sqrt(sum), 1e-12));
  for (int64_t i = 0; i < n; ++i) v[i] *= inv;
}

}  // namespace

EmbedOutput Engine::embed(const EmbedInput& in) {
  std::lock_guard<std::mutex> lock(step_mu_);
  auto bad = [](const std::string& what) { throw NativeError(ErrorCode::kInvalidArgument, "embed: " + what); };
  if (config_.moe.enabled()) {
    throw NativeError(ErrorCode::kUnavailable,
                      "embed: embeddings from a mixture-of-experts model (" + config_.architecture + ") are not supported");
  }
  const KvLayout& kv = backend_->kv_layout();
  const int64_t hidden = config_.hidden_size;
  int64_t total = 0;
  for (size_t i = 0; i < in.lengths.size(); ++i) {
    const int64_t n = in.lengths[i];
    const std::string who = "sequence " + std::to_string(i) + ": ";
    if (n <= 0) bad(who + "has no tokens");
    if (n > config_.max_position_embeddings) {
      bad(who + std::to_string(n) + " tokens exceed max_position_embeddings " + std::to_string(config_.max_position_embeddings));
    }
    if (n > max_pass_tokens_) {
      bad(who + std::to_string(n) + " tokens exceed the engine's tokens per pass (maxBatchTokens " + std::to_string(max_pass_tokens_) + ")");
    }
    if ((n + kv.block_size - 1) / kv.block_size > kv.num_blocks) {
      bad(who + std::to_string(n) + " tokens need more KV blocks than the pool's " + std::to_string(kv.num_blocks));
    }
    total += n;
  }
  if (total != static_cast<int64_t>(in.tokens.size())) bad("tokens array length does not match the lengths");
  for (int32_t tok : in.tokens) {
    if (tok < 0 || tok >= config_.vocab_size) bad("token id " + std::to_string(tok) + " outside the vocabulary");
  }

  EmbedOutput out;
  out.dim = static_cast<int32_t>(hidden);
  out.vectors.assign(in.lengths.size() * static_cast<size_t>(hidden), 0.0f);
  std::vector<int32_t> table;
  size_t first = 0;
  int64_t offset = 0;  // token offset of sequence `first` in in.tokens
  while (first < in.lengths.size()) {
    if (in.cancelled && in.cancelled()) throw NativeError(ErrorCode::kCancelled, "embed: cancelled by the caller");
    // Greedy packing in order: as many whole sequences as the pool's blocks and the backend's
    // activations (max_batch_tokens) hold.
    size_t end = first;
    int64_t tokens = 0, blocks = 0;
    while (end < in.lengths.size()) {
      const int64_t n = in.lengths[end];
      const int64_t need = (n + kv.block_size - 1) / kv.block_size;
      if (end > first && (blocks + need > kv.num_blocks || tokens + n > max_pass_tokens_)) break;
      tokens += n;
      blocks += need;
      ++end;
    }
    table.resize(static_cast<size_t>(blocks));
    for (int64_t b = 0; b < blocks; ++b) table[static_cast<size_t>(b)] = static_cast<int32_t>(b);
    ForwardBatch batch;
    batch.tokens = in.tokens.data() + offset;
    batch.num_tokens = static_cast<int32_t>(tokens);
    batch.num_logit_rows = 0;
    int32_t tok_off = 0, blk_off = 0;
    for (size_t i = first; i < end; ++i) {
      ForwardSeq s;
      s.token_offset = tok_off;
      s.num_tokens = in.lengths[i];
      s.start_pos = 0;
      s.block_table = table.data() + blk_off;
      s.num_blocks = static_cast<int32_t>((s.num_tokens + kv.block_size - 1) / kv.block_size);
      tok_off += s.num_tokens;
      blk_off += s.num_blocks;
      batch.seqs.push_back(s);
    }
    backend_->forward(batch);
    float* dst = out.vectors.data() + first * static_cast<size_t>(hidden);
    backend_->pool_hidden(batch, in.pooling, dst);
    if (in.normalize) {
      for (size_t i = first; i < end; ++i) l2_normalize(out.vectors.data() + i * static_cast<size_t>(hidden), hidden);
    }
    offset += tokens;
    first = end;
  }
  return out;
}

}  // namespace tandem
