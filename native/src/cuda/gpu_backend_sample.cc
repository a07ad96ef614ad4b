// GpuBackend's sampling: the rows' parameters, penalties, logit bias and allowed-token masks
// packed on the host (sample_inputs.h) and uploaded once; the sampler kernel; one download of
// token ids and the asked logprobs. read_logits copies logits out for tests.
#include <algorithm>
#include <cstring>

#include "gpu_backend.h"

namespace tandem {

void GpuBackend::ensure_sample_buffers(int64_t rows, size_t in_bytes, size_t out_bytes) {
  // Grown rarely (a longer penalty history, more top logprobs than ever before); each buffer is
  // replaced only after the device is idle, so nothing in flight reads the old one.
  grow_staged(sample_in_dev_, sample_in_staging_, sample_in_capacity_, in_bytes);
  if (rows > sample_work_rows_) {
    const int64_t cap = std::max(rows, sample_work_rows_ * 2);
    device_->synchronize();
    device_->free(sample_work_);
    sample_work_ = nullptr;
    sample_work_rows_ = 0;
    sample_work_ = static_cast<float*>(device_->alloc(static_cast<size_t>(cap * config_.vocab_size) * sizeof(float)));
    sample_work_rows_ = cap;
  }
  grow_staged(sample_out_dev_, sample_out_staging_, sample_out_capacity_, out_bytes);
}

void GpuBackend::sample(const std::vector<SampleRow>& rows, SampledRows& out) {
  const int n = static_cast<int>(rows.size());
  const int vocab = static_cast<int>(config_.vocab_size);
  gpu::SampleInputs& in = sample_inputs_;
  in.build(rows.data(), rows.size(), vocab);
  const int32_t top = in.top_stride;

  // One upload: [row descs][penalties][bias ids][bias values][masks], each 16-byte aligned.
  auto align = [](size_t b) { return (b + 15) / 16 * 16; };
  const size_t o_rows = 0;
  const size_t o_pen = align(o_rows + in.rows.size() * sizeof(gpu::SampleRowDesc));
  const size_t o_bid = align(o_pen + in.penalties.size() * sizeof(gpu::PenaltyEntry));
  const size_t o_bval = align(o_bid + in.bias_ids.size() * sizeof(int32_t));
  const size_t o_mask = align(o_bval + in.bias_values.size() * sizeof(float));
  const size_t in_bytes = align(o_mask + in.masks.size() * sizeof(uint32_t));
  // Outputs: [tokens][logprobs][top ids][top logprobs].
  const size_t o_tok = 0, o_lp = align(static_cast<size_t>(n) * 4), o_tid = align(o_lp + static_cast<size_t>(n) * 4);
  const size_t o_tlp = align(o_tid + static_cast<size_t>(n) * static_cast<size_t>(top) * 4);
  const size_t out_bytes = align(o_tlp + static_cast<size_t>(n) * static_cast<size_t>(top) * 4);
  ensure_sample_buffers(n, in_bytes, out_bytes);
  auto* st = static_cast<char*>(sample_in_staging_);
  std::memcpy(st + o_rows, in.rows.data(), in.rows.size() * sizeof(gpu::SampleRowDesc));
  std::memcpy(st + o_pen, in.penalties.data(), in.penalties.size() * sizeof(gpu::PenaltyEntry));
  std::memcpy(st + o_bid, in.bias_ids.data(), in.bias_ids.size() * sizeof(int32_t));
  std::memcpy(st + o_bval, in.bias_values.data(), in.bias_values.size() * sizeof(float));
  std::memcpy(st + o_mask, in.masks.data(), in.masks.size() * sizeof(uint32_t));
  device_->upload(sample_in_dev_, sample_in_staging_, in_bytes);

  auto* din = static_cast<char*>(sample_in_dev_);
  auto* dout = static_cast<char*>(sample_out_dev_);
  gpu::SampleArgs a;
  a.logits = act_.logits;
  a.logit_stride = logit_stride_;
  a.vocab = vocab;
  a.rows = reinterpret_cast<const gpu::SampleRowDesc*>(din + o_rows);
  a.num_rows = n;
  a.penalties = reinterpret_cast<const gpu::PenaltyEntry*>(din + o_pen);
  a.bias_ids = reinterpret_cast<const int32_t*>(din + o_bid);
  a.bias_values = reinterpret_cast<const float*>(din + o_bval);
  a.masks = reinterpret_cast<const uint32_t*>(din + o_mask);
  a.work = sample_work_;
  a.top_stride = top;
  a.out_tokens = reinterpret_cast<int32_t*>(dout + o_tok);
  a.out_logprobs = reinterpret_cast<float*>(dout + o_lp);
  a.out_top_ids = reinterpret_cast<int32_t*>(dout + o_tid);
  a.out_top_logprobs = reinterpret_cast<float*>(dout + o_tlp);
  run_sampler(a);  // the fast path, or the one-block kernel (gpu_backend_decode.cc)
  device_->download(sample_out_staging_, sample_out_dev_, out_bytes);
  device_->synchronize();
  forward_pending_ = false;

  const char* host = static_cast<const char*>(sample_out_staging_);
  out.tokens.assign(reinterpret_cast<const int32_t*>(host + o_tok), reinterpret_cast<const int32_t*>(host + o_tok) + n);
  out.logprobs.assign(reinterpret_cast<const float*>(host + o_lp), reinterpret_cast<const float*>(host + o_lp) + n);
  out.top_stride = top;
  const size_t tn = static_cast<size_t>(n) * static_cast<size_t>(top);
  out.top_ids.assign(reinterpret_cast<const int32_t*>(host + o_tid), reinterpret_cast<const int32_t*>(host + o_tid) + tn);
  out.top_logprobs.assign(reinterpret_cast<const float*>(host + o_tlp), reinterpret_cast<const float*>(host + o_tlp) + tn);
}

void GpuBackend::read_logits(float* dst, int32_t rows) {
  const size_t vocab = static_cast<size_t>(config_.vocab_size);
  std::vector<float> host(static_cast<size_t>(rows) * static_cast<size_t>(logit_stride_));
  device_->download(host.data(), act_.logits, host.size() * sizeof(float));
  device_->synchronize();
  for (int32_t r = 0; r < rows; ++r) {
    std::memcpy(dst + static_cast<size_t>(r) * vocab, host.data() + static_cast<size_t>(r) * static_cast<size_t>(logit_stride_),
                vocab * sizeof(float));
  }
}

}  // namespace tandem
