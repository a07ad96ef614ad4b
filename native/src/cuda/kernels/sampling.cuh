// The GPU sampler: one block per row, the CPU sampler's semantics (core/sampler.h) without
// sorting the vocabulary. Per row:
//   prepare  rows with penalties, bias or a mask: work = logits with the mask (-inf) applied,
//            then the penalties (one thread per distinct history token), then the bias (one
//            thread, in order, so duplicates add up); masked tokens skip both, as the mask
//            overrides them on the CPU too. Other rows read their logits in place.
//   max      block arg max (ties to the lowest id): the greedy token, and m for e = exp((w-m)/T).
//   bucket   (only with top-k, top-p or min-p) one pass of per-bucket count, mass and key range,
//            15 buckets by sqrt((m - w) / T) plus one for e == 0. Buckets are upper sets of
//            the order (w desc, id asc), so a boundary (the k-th token, the first whose
//            cumulative mass reaches top_p * total) lies in the first bucket whose cumulative
//            count / mass reaches it; that bucket is then
//              - gathered with everything above it when that fits the shared buffer (a
//                complete prefix: it serves the following searches and the draw too),
//              - else gathered alone (the buckets above it summed up),
//              - else split again, 16 ways over its key range (one more pass), until it fits
//                or holds a single value, whose ties are resolved by an id-ordered scan.
//            A gathered set is bitonic-sorted by (w desc, id asc) and scanned in order.
//   draw     kept = (rank <= min(top-k, top-p boundary)) and e >= min_p; target =
//            uniform(seed, position) * mass(kept); the kept tokens are walked in id order to
//            the first whose cumulative mass exceeds it. When the kept set lies in a gathered
//            prefix, it is re-sorted by id in shared memory; else two tiled passes (tile sums,
//            then the one tile holding target) with segmented scans in id order.
//   logprobs log Z of the raw logits (double sum), the sampled token's logprob, and the top n
//            found like the top-k boundary on the raw logits, then gathered and sorted.
// Passes over a row (reads of vocab floats): greedy 1; temperature only 1 + 1 partial;
// top-k / top-p / min-p whose kept set fits the buffer 3; larger kept sets ~5-6 (an extra
// split per 16x narrowing, plus the tiled draw); +1 (read + write) for a prepared row; logprobs
// +1 (log Z), with top n +2 (max of raw if prepared, bucket pass fused with log Z, gather).
// Deterministic: sums in double in fixed orders (per-thread sequential, then fixed-order
// block reductions); atomics only on integers (counts, key min/max, gather slots).
// Exact: e is computed with the CPU's float expression and glibc's expf algorithm
// (sample_expf), so both samplers see the same e; only the order of the double sums differs,
// which can change a decision only when a sum lands within rounding of a boundary.
// A row whose every token is masked samples token 0 (the CPU sampler does the same).
#pragma once

#include <stdexcept>

#include "../kernel_api.h"
#include "launch.h"
#include "sampling_search.cuh"

namespace tandem::gpu::TD_NS {

// ---- the kernel -------------------------------------------------------------------------------

#if TD_CUDA
#define TD_SAMPLE_BOUNDS __launch_bounds__(kSampleThreads, 2)
#else
#define TD_SAMPLE_BOUNDS
#endif

// A template so the fast path's unit (decode_cuda.cu) can launch it for the rows it leaves.
template <int kUnused = 0>
TD_GLOBAL void TD_SAMPLE_BOUNDS sample_kernel(SampleArgs a, SampleConfig cfg) {
  if (a.skip_status != nullptr &&
      *reinterpret_cast<const int32_t*>(a.skip_status + static_cast<int64_t>(blockIdx.x) * a.skip_stride_bytes) == 1) {
    return;  // the fast path sampled this row (the whole block returns)
  }
  TD_DYNAMIC_SHARED(unsigned char, dyn);
  TD_SHARED(double, dscr, 32);
  TD_SHARED(long long, lscr, 32);
  TD_SHARED(int, iscr, 32);
  TD_SHARED(float, fscr, 32);
  TD_SHARED(ArgMax, ascr, 32);
  TD_SHARED(int, cnt, kSampleBuckets);
  TD_SHARED(double, mass, kSampleBuckets);
  TD_SHARED(uint32_t, kmin, kSampleBuckets);
  TD_SHARED(uint32_t, kmax, kSampleBuckets);
  TD_SHARED(int, cnt0, kSampleBuckets);
  TD_SHARED(double, mass0, kSampleBuckets);
  TD_SHARED(uint32_t, kmin0, kSampleBuckets);
  TD_SHARED(uint32_t, kmax0, kSampleBuckets);
  TD_SHARED(int, ivar, 4);
  TD_SHARED(double, dvar, 4);

  const int nt = static_cast<int>(blockDim.x), tid = static_cast<int>(threadIdx.x);
  SampleSmem sm;
  sm.mcol = reinterpret_cast<double*>(dyn);
  sm.buf = reinterpret_cast<uint64_t*>(dyn + sizeof(double) * kSampleBuckets * nt);
  sm.tiles = reinterpret_cast<double*>(dyn + sizeof(double) * (kSampleBuckets * nt + cfg.cap));
  sm.ccol = reinterpret_cast<uint16_t*>(dyn + sizeof(double) * (kSampleBuckets * nt + cfg.cap + cfg.tiles));
  sm.dscr = dscr;
  sm.lscr = lscr;
  sm.iscr = iscr;
  sm.fscr = fscr;
  sm.ascr = ascr;
  sm.cnt = cnt;
  sm.mass = mass;
  sm.kmin = kmin;
  sm.kmax = kmax;
  sm.cnt0 = cnt0;
  sm.mass0 = mass0;
  sm.kmin0 = kmin0;
  sm.kmax0 = kmax0;
  sm.ivar = ivar;
  sm.dvar = dvar;

  const int row_index = static_cast<int>(blockIdx.x);
  const SampleRowDesc row = a.rows[row_index];
  const int vocab = a.vocab;
  const float* raw = a.logits + static_cast<int64_t>(row.logit_row) * a.logit_stride;
  const bool prepare = sample_row_prepared(row);

  // ---- prepare: mask, penalties, bias into the row's work scratch.
  const float* w = raw;
  if (prepare) {
    float* work = a.work + static_cast<int64_t>(row_index) * vocab;
    sample_prepare(a, row, raw, work, 0, vocab);
    w = work;
  }

  // ---- max / greedy.
  ArgMax best{-INFINITY, 0x7fffffff};
  for (int i = tid; i < vocab; i += nt) best = better(best, ArgMax{w[i], i});
  best = block_argmax(best, ascr);
  const float m = best.value;
  int token = best.index < vocab ? best.index : 0;

  SampleBuf bf{false, 0, 0u, 0u, 0x7fffffff, 0, 0.0};
  if (row.temperature > 0.0f) {
    if (m == -INFINITY) {
      token = 0;  // every token masked out
    } else {
      const SampleSrc src{w, vocab, m, 1.0f / row.temperature};
      const bool topk_on = row.top_k > 0 && row.top_k < vocab;
      const bool topp_on = row.top_p < 1.0f;
      const bool minp_on = row.min_p > 0.0f;
      const float min_p = fminf(row.min_p, 1.0f);
      SampleBoundary prefix{false, 0u, 0, 0, 0.0};
      bool have_l0 = false;
      if (topk_on || topp_on || minp_on) {
        sample_stats<true, false>(sm, src, true, 0u, kKeyMax, cnt0, mass0, kmin0, kmax0);
        have_l0 = true;
        double total = 0.0;
        long long positive = 0;
        for (int b = 0; b < kSampleBuckets; ++b) {
          total += mass0[b];
          if (b < kSampleBuckets - 1) positive += cnt0[b];
        }
        // A top-k reaching into the tokens without mass keeps every token with mass.
        if (topk_on && positive > row.top_k) {
          SampleCriterion ck{kCritCount, row.top_k, 0.0};
          prefix = sample_search<true>(sm, src, cfg, bf, ck);
          total = prefix.mass;
        }
        if (topp_on) {
          SampleCriterion cp{kCritMassGe, 0, static_cast<double>(row.top_p) * total};
          const SampleBoundary pb = sample_search<true>(sm, src, cfg, bf, cp);
          prefix = sample_first(prefix, pb);
        }
      }
      // Kept: in the prefix, e >= min_p, and e > 0 (tokens without mass are never drawn).
      auto kept = [&](int i, float wv, float& e) {
        e = src.e_of(wv);
        if (!(e > 0.0f) || (minp_on && !(e >= min_p))) return false;
        return sample_in_prefix(prefix, sample_key(wv), i);
      };
      // Does the kept set fit a complete prefix of level-0 buckets in the buffer?
      int need = -1;
      long long need_cnt = 0;
      if (have_l0) {
        int b_need = kSampleBuckets - 2;
        for (int b = 0; b < kSampleBuckets - 1; ++b) {
          if (cnt0[b] == 0) continue;
          const bool has_prefix_end = prefix.found && kmin0[b] <= prefix.key && prefix.key <= kmax0[b];
          const bool has_minp_end = minp_on && !(src.e_of(sample_key_value(kmin0[b])) >= min_p);
          if (has_prefix_end || has_minp_end) {
            b_need = b;
            break;
          }
        }
        for (int b = 0; b <= b_need; ++b) need_cnt += cnt0[b];
        need = b_need;
        while (need >= 0 && cnt0[need] == 0) --need;
      }
      const double u = sample_uniform(row);
      if (need >= 0 && need_cnt <= cfg.cap) {
        const uint32_t lo = kmin0[need];
        if (!(bf.complete() && bf.klo <= lo)) sample_gather(sm, src, bf, static_cast<int>(need_cnt), lo, kKeyMax, 0x7fffffff, 0, 0.0);
        // Re-sort the kept entries by id (the rest to the end), then scan them in id order.
        const int p = sample_pow2(bf.n);
        int nk = 0;
        for (int j = tid; j < p; j += nt) {
          uint64_t ent = ~0ull;
          if (j < bf.n) {
            const uint64_t e0 = sm.buf[j];
            const uint32_t key = entry_key(e0);
            const int32_t id = entry_id(e0);
            float e;
            if (kept(id, sample_key_value(key), e)) {
              ent = (static_cast<uint64_t>(static_cast<uint32_t>(id)) << 32) | key;
              ++nk;
            }
          }
          sm.buf[j] = ent;
        }
        nk = block_sum(nk, iscr);
        td::sync_threads();
        sample_bitonic_sort(sm.buf, p);
        bf.valid = false;
        const int per = (nk + nt - 1) / nt;
        const int lo_j = td::imin(nk, tid * per), hi_j = td::imin(nk, lo_j + per);
        double local = 0.0;
        for (int j = lo_j; j < hi_j; ++j) local += static_cast<double>(src.e_of(sample_key_value(static_cast<uint32_t>(sm.buf[j]))));
        double total;
        const double base = block_exclusive_scan(local, dscr, total);
        const double target = u * total;
        int found = 0x7fffffff;
        double run = 0.0;
        for (int j = lo_j; j < hi_j; ++j) {
          run += static_cast<double>(src.e_of(sample_key_value(static_cast<uint32_t>(sm.buf[j]))));
          if (target < base + run) {
            found = j;
            break;
          }
        }
        const int first = block_min_int(found, iscr);
        const int j = first != 0x7fffffff ? first : nk - 1;
        token = j >= 0 ? static_cast<int>(sm.buf[j] >> 32) : 0;
        td::sync_threads();
      } else {
        // Tiled draw: tile sums in id order, then the tile holding target.
        const int tiles = cfg.tiles;
        double total = 0.0;
        int last = -1;
        for (int t = 0; t < tiles; ++t) {
          int c;
          double mt;
          sample_tile_sums(src, t, kept, c, mt);
          double tot;
          (void)block_exclusive_scan(mt, dscr, tot);
          if (tid == 0) sm.tiles[t] = tot;
          total += tot;
          if (c > 0) {
            const int first = (t * nt + tid) * kSampleTileVec;
            for (int j = kSampleTileVec - 1; j >= 0; --j) {
              const int i = first + j;
              float e;
              if (i < vocab && kept(i, w[i], e)) {
                last = i;
                break;
              }
            }
          }
        }
        last = block_max_int(last, iscr);
        const double target = u * total;
        SampleCriterion cd{kCritMassGt, 0, target};
        double base = 0.0;
        int chosen = -1;
        for (int t = 0; t < tiles && chosen < 0; ++t) {
          const double tt = sm.tiles[t];
          if (target < base + tt) {
            long long tc;
            double tm;
            chosen = sample_tile_find(sm, src, t, kept, cd, 0, base, tc, tm, nullptr, nullptr);
          }
          base += tt;
        }
        token = chosen >= 0 ? chosen : (last >= 0 ? last : 0);
        td::sync_threads();
      }
    }
  }

  // ---- logprobs of the raw logits.
  int top_n = 0;
  if (row.num_top >= 0) {
    float m_raw = m;
    if (prepare) {
      float mx = -INFINITY;
      for (int i = tid; i < vocab; i += nt) mx = fmaxf(mx, raw[i]);
      m_raw = block_max(mx, fscr);
    }
    const SampleSrc rs{raw, vocab, m_raw, 1.0f};
    top_n = td::imin(td::imin(row.num_top, vocab), td::imin(a.top_stride, cfg.cap));
    double z;
    if (top_n > 0) {
      z = sample_stats<false, true>(sm, rs, true, 0u, kKeyMax, cnt0, mass0, kmin0, kmax0);
      bf.valid = false;
      SampleCriterion cn{kCritCount, top_n, 0.0};
      const SampleBoundary nb = sample_search<false>(sm, rs, cfg, bf, cn);
      if (!(bf.complete() && bf.klo <= nb.key)) sample_gather(sm, rs, bf, top_n, nb.key, kKeyMax, nb.id, 0, 0.0);
    } else {
      double zl = 0.0;
      for (int i = tid; i < vocab; i += nt) zl += exp(static_cast<double>(raw[i] - m_raw));
      z = block_sum(zl, dscr);
    }
    const float log_z = m_raw + static_cast<float>(log(z));
    sample_write_row(a, row_index, token, true, log_z, raw, sm.buf, top_n);
  } else {
    sample_write_row(a, row_index, token, false, 0.0f, raw, sm.buf, 0);
  }
}

#undef TD_SAMPLE_BOUNDS

/** Dynamic shared memory of one sampling block, in bytes. */
inline size_t sample_shared_bytes(unsigned threads, int cap, int tiles) {
  return sizeof(double) * (static_cast<size_t>(kSampleBuckets) * threads + static_cast<size_t>(cap) + static_cast<size_t>(tiles)) +
         sizeof(uint16_t) * static_cast<size_t>(kSampleBuckets) * threads;
}

inline void launch_sample(const SampleArgs& a, void* stream) {
  if (a.num_rows <= 0) return;
  const unsigned threads = kSampleThreads;
  // Per-thread bucket counts are 16-bit: at most 65535 tokens per thread (33M with 512 threads).
  if (a.vocab <= 0 || static_cast<long long>(a.vocab) > 65535LL * threads) throw std::invalid_argument("sample: vocab out of range");
  SampleConfig cfg;
  cfg.cap = kSampleCap;
  cfg.tiles = static_cast<int>(td::ceil_div(a.vocab, static_cast<long long>(threads) * kSampleTileVec));
  td::launch(sample_kernel<0>, {static_cast<unsigned>(a.num_rows)}, threads, sample_shared_bytes(threads, cfg.cap, cfg.tiles), stream, a, cfg);
}

}  // namespace tandem::gpu::TD_NS
