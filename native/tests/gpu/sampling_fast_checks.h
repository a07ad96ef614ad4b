// The sampler's fast path (kernels/sampling_fast.cuh, DecodeKernelApi::sample) on the same rows
// as the one-block sampler's checks (sampling_checks.h): token for token and logprob for logprob
// against the CPU sampler. The rows cover every branch of the fast path (greedy with and without
// penalties, bias and masks; top-k within and past the candidates; top-p with its boundary
// inside and past them; temperature alone and min-p over every kept token: the chunk walk;
// logprobs, top-n raw), and what it leaves to the one-block kernel (top-n of a prepared row,
// top-k past the candidates, flat top-p): so the hand-over (rows skipped by the fallback, rows
// it must still sample) is checked too. The suite also requires that the fast path decided a
// good share of each vocabulary's rows, and samples one vocabulary twice on the same scratch (the
// second launch must find the counters reset, as a CUDA graph replays them); on a GPU it adds a
// 152k vocabulary (the Qwen2 shape).
#pragma once

#include "../../src/cuda/decode_api.h"
#include "decode_checks.h"
#include "sampling_checks.h"

namespace tandem_test::gpu {

inline void test_sampling_fast(Gpu& g) {
  const auto t0 = std::chrono::steady_clock::now();
  auto dk = open_decode_kernels(g);
  int rows = 0, fast = 0, total = 0;
  uint32_t seed = 4242;
  std::vector<int> vocabs = {97, 1000, 5003};
  if (g.name == "cuda") vocabs.push_back(151936);
  for (int vocab : vocabs) {
    for (int pass = 0; pass < (vocab == 1000 ? 2 : 1); ++pass) {
      int fast_here = 0, rows_here = 0;
      std::unique_ptr<DeviceArray<unsigned char>> scratch;
      std::unique_ptr<DeviceArray<int>> counters;
      int64_t row_bytes = 0;
      const int64_t status_at = dk->sample_fast_status_offset(vocab, &row_bytes);
      check_sampling_vocab(g, vocab, seed, rows, [&](const tandem::gpu::SampleArgs& a) {
        scratch = std::make_unique<DeviceArray<unsigned char>>(*g.device, static_cast<size_t>(dk->sample_fast_scratch_bytes(a.num_rows, vocab)));
        counters = std::make_unique<DeviceArray<int>>(*g.device, static_cast<size_t>(dk->sample_fast_counters(a.num_rows, vocab)));
        scratch->poison(0xFF);
        counters->poison(0);
        tandem::gpu::SampleFastArgs f;
        f.scratch = scratch->get();
        f.counters = counters->get();
        dk->sample(a, f, g.stream());
        if (pass == 1) dk->sample(a, f, g.stream());  // again on the same scratch: counters left zero
        g.device->synchronize();
        const auto s = scratch->download();
        for (int r = 0; r < a.num_rows; ++r) {
          int32_t status;
          std::memcpy(&status, s.data() + r * row_bytes + status_at, 4);
          fast_here += status == 1;
          CHECK(status == 1 || status == 2, "sampling fast vocab %d row %d: status %d after both passes", vocab, r, status);
        }
        rows_here = a.num_rows;
        const auto c = counters->download();
        CHECK(std::all_of(c.begin(), c.end(), [](int v) { return v == 0; }), "sampling fast vocab %d: counters not reset", vocab);
      }, "sampling fast");
      // A good share of these rows fit the fast path (on SIMT, whose candidate list is 16 long, a
      // third; on a GPU more); a planted bug that sends every row
      // to the fallback would pass the token checks, not this one.
      CHECK(fast_here * 3 > rows_here, "sampling fast vocab %d: only %d of %d rows took the fast path", vocab, fast_here, rows_here);
      fast += fast_here;
      total += rows_here;
    }
    ++seed;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("gpu sampling fast path: %d rows checked against the CPU sampler on %s (%d of %d decided by the fast path) in %.1f s\n", rows,
              g.name.c_str(), fast, total, s);
}

}  // namespace tandem_test::gpu
