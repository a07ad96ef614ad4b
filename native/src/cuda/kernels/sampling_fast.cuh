// The sampler's fast path: the vocabulary of each row split over many blocks (chunks of
// kFastChunk tokens), so a batch-1 step reads its 152k logits with a hundred SMs instead of one
// (sampling.cuh's kernel is one block per row). Same contract, token for token: the CPU
// sampler's order of operations (core/sampler.h, native/README.md "Sampling order") and the
// one-block kernel's arithmetic (the same prepared values, keys, glibc expf and uniform draw).
//
//   A  sample_fast_prep   grid (chunks, rows): penalties, bias and mask of the chunk into the
//                         row's work (as the one-block kernel prepares the whole row), the
//                         chunk's arg max (and raw max for logprobs). The row's last block:
//                         m, the greedy token; a greedy row without logprobs is done here.
//   B  sample_fast_pass   grid (chunks, rows): with the row's m, per chunk: the mass of every
//                         token and of the kept ones (e > 0, e >= min_p) in double, log Z's
//                         share, and the chunk's best kFastCand entries of the order (w desc,
//                         id asc), sorted. Merged by last blocks in two levels (groups of
//                         kFastGroup chunks, then the row): the row's best kFastCand, exact.
//                         The row's last block decides:
//                           top-k <= kFastCand, top-p whose boundary lies in the best
//                           kFastCand (with or without top-k, min-p): the kept prefix, sorted
//                           by id, walked in id order to the uniform draw;
//                           neither top-k nor top-p: the kept mass per chunk picks the chunk
//                           the draw lands in, walked in id order;
//                           logprobs (top n <= kFastCand when the row is not prepared)
//                         and marks the row done; anything else stays for the fallback.
//   C  sample_kernel      (sampling.cuh) for the rows not done: every other block returns at once.
// Sums in double in fixed orders (per thread in id order, fixed block reductions, chunks in
// order), as the one-block kernel: only the order of the double sums differs from the CPU's.
#pragma once

#include <algorithm>
#include <cstddef>

#include "../decode_api.h"
#include "../kernel_api.h"
#include "last_block.cuh"
#include "sampling.cuh"

namespace tandem::gpu::TD_NS {

#if TD_CUDA
inline constexpr int kFastChunk = 1024;  // tokens per block
inline constexpr unsigned kFastThreads = 256;
inline constexpr int kFastCand = 64;     // best entries kept per chunk, group and row
#else
inline constexpr int kFastChunk = 256;   // small, so the checks' vocabularies span groups of chunks
inline constexpr unsigned kFastThreads = 64;
inline constexpr int kFastCand = 16;     // small, so the checks reach the fallback too
#endif
inline constexpr int kFastGroup = 8;      // chunks merged by one level-1 block
inline constexpr int kFastMaxGroups = 64;  // rows of more chunks than 8 x 64 go to the fallback

/** What the row's blocks share between the launches (per row, in SampleFastArgs::scratch). */
struct FastRowState {
  float m;        // max of the prepared row
  float m_raw;    // max of the raw row (logprobs)
  int32_t token;  // greedy token
  int32_t status; // 0 pending, 1 done (fast path), 2 for the fallback
};

struct FastChunkStats {
  double mass;       // sum of e over the chunk
  double kept_mass;  // over its kept tokens (e > 0, e >= min_p)
  double z;          // sum of exp(raw - m_raw) (log Z)
  float amax_v;      // arg max of the prepared chunk
  int32_t amax_i;
  float raw_max;
  int32_t last_kept;  // highest kept id, -1 if none
};

/** Byte layout of one row's scratch; the same on host and device. */
struct FastLayout {
  int chunks = 0, groups = 0;
  int64_t entries = 0, stats = 0, group_entries = 0, state = 0, row_bytes = 0;
};

TD_HOST_DEVICE FastLayout fast_layout(int vocab) {
  FastLayout l;
  l.chunks = (vocab + kFastChunk - 1) / kFastChunk;
  l.groups = (l.chunks + kFastGroup - 1) / kFastGroup;
  int64_t at = 0;
  l.entries = at;
  at += static_cast<int64_t>(l.chunks) * kFastCand * 8;
  l.stats = at;
  at += static_cast<int64_t>(l.chunks) * static_cast<int64_t>(sizeof(FastChunkStats));
  l.group_entries = at;
  at += static_cast<int64_t>(l.groups) * kFastCand * 8;
  l.state = at;
  at += 16;
  l.row_bytes = (at + 15) / 16 * 16;
  return l;
}

/** Counters per row: A's, B's row, B's groups. */
TD_HOST_DEVICE int fast_counters_per_row(const FastLayout& l) { return 2 + l.groups; }

TD_DEVICE unsigned char* fast_row(const SampleFastArgs& f, const FastLayout& l, int row) {
  return static_cast<unsigned char*>(f.scratch) + static_cast<int64_t>(row) * l.row_bytes;
}


// ---- pass A -----------------------------------------------------------------------------------

template <int kUnused = 0>
TD_GLOBAL void sample_fast_prep(SampleArgs a, SampleFastArgs f) {
  TD_SHARED(ArgMax, ascr, 32);
  TD_SHARED(float, fscr, 32);
  TD_SHARED(int, flag, 1);
  const int nt = static_cast<int>(blockDim.x), tid = static_cast<int>(threadIdx.x);
  const int chunk = static_cast<int>(blockIdx.x), row_index = static_cast<int>(blockIdx.y);
  const FastLayout l = fast_layout(a.vocab);
  const SampleRowDesc row = a.rows[row_index];
  const int vocab = a.vocab, c0 = chunk * kFastChunk, c1 = td::imin(vocab, c0 + kFastChunk);
  const float* raw = a.logits + static_cast<int64_t>(row.logit_row) * a.logit_stride;
  const bool prepare = sample_row_prepared(row);
  const float* w = raw;
  if (prepare) {
    // The chunk's share of the one-block kernel's prepare, the same code over [c0, c1).
    float* work = a.work + static_cast<int64_t>(row_index) * vocab;
    sample_prepare(a, row, raw, work, c0, c1);
    w = work;
  }
  ArgMax best{-INFINITY, 0x7fffffff};
  for (int i = c0 + tid; i < c1; i += nt) best = better(best, ArgMax{w[i], i});
  best = block_argmax(best, ascr);
  float raw_max = best.value;
  if (prepare && row.num_top >= 0) {
    float mx = -INFINITY;
    for (int i = c0 + tid; i < c1; i += nt) mx = fmaxf(mx, raw[i]);
    raw_max = block_max(mx, fscr);
  }
  unsigned char* base = fast_row(f, l, row_index);
  auto* stats = reinterpret_cast<FastChunkStats*>(base + l.stats);
  if (tid == 0) {
    stats[chunk].amax_v = best.value;
    stats[chunk].amax_i = best.index;
    stats[chunk].raw_max = raw_max;
  }
  const int cpr = fast_counters_per_row(l);
  if (!last_block_arrive(f.counters + static_cast<int64_t>(row_index) * cpr, l.chunks, flag)) return;
  if (tid != 0) return;
  ArgMax all{-INFINITY, 0x7fffffff};
  float rmax = -INFINITY;
  for (int c = 0; c < l.chunks; ++c) {
    all = better(all, ArgMax{load_volatile(&stats[c].amax_v), load_volatile(&stats[c].amax_i)});
    rmax = fmaxf(rmax, load_volatile(&stats[c].raw_max));
  }
  auto* st = reinterpret_cast<FastRowState*>(base + l.state);
  st->m = all.value;
  st->m_raw = prepare ? rmax : all.value;
  int token = all.index < vocab ? all.index : 0;
  if (row.temperature > 0.0f && all.value == -INFINITY) token = 0;  // every token masked out
  st->token = token;
  const bool greedy_done = !(row.temperature > 0.0f && all.value != -INFINITY);
  if (greedy_done && row.num_top < 0) {
    a.out_tokens[row_index] = token;
    a.out_logprobs[row_index] = NAN;
    for (int k = 0; k < a.top_stride; ++k) {
      a.out_top_ids[static_cast<int64_t>(row_index) * a.top_stride + k] = -1;
      a.out_top_logprobs[static_cast<int64_t>(row_index) * a.top_stride + k] = NAN;
    }
    st->status = 1;
  } else {
    st->status = 0;
  }
}

// ---- pass B -----------------------------------------------------------------------------------

/** Sorts buf[0, n) ascending (entries past n read as ~0) and keeps the first kFastCand in out. */
TD_DEVICE void fast_sort_keep(uint64_t* buf, int n, uint64_t* out) {
  const int p = sample_pow2(td::imax(n, 2));
  for (int j = n + static_cast<int>(threadIdx.x); j < p; j += static_cast<int>(blockDim.x)) buf[j] = ~0ull;
  td::sync_threads();
  sample_bitonic_sort(buf, p);
  for (int j = static_cast<int>(threadIdx.x); j < kFastCand; j += static_cast<int>(blockDim.x)) out[j] = j < p ? buf[j] : ~0ull;
  td::sync_threads();
}

template <int kUnused = 0>
TD_GLOBAL void sample_fast_pass(SampleArgs a, SampleFastArgs f) {
  TD_DYNAMIC_SHARED(uint64_t, buf);
  TD_SHARED(double, dscr, 32);
  TD_SHARED(int, iscr, 32);
  TD_SHARED(int, flag, 1);
  TD_SHARED(double, dvar, 4);
  const int nt = static_cast<int>(blockDim.x), tid = static_cast<int>(threadIdx.x);
  const int chunk = static_cast<int>(blockIdx.x), row_index = static_cast<int>(blockIdx.y);
  const FastLayout l = fast_layout(a.vocab);
  const SampleRowDesc row = a.rows[row_index];
  const int vocab = a.vocab, c0 = chunk * kFastChunk, c1 = td::imin(vocab, c0 + kFastChunk);
  unsigned char* base = fast_row(f, l, row_index);
  auto* st = reinterpret_cast<FastRowState*>(base + l.state);
  if (st->status != 0) return;  // done in pass A (the whole row reads the same value)
  const float* raw = a.logits + static_cast<int64_t>(row.logit_row) * a.logit_stride;
  const bool prepare = sample_row_prepared(row);
  const float* w = prepare ? a.work + static_cast<int64_t>(row_index) * vocab : raw;
  const float m = st->m, m_raw = st->m_raw;
  const bool sampled = row.temperature > 0.0f && m != -INFINITY;
  const bool minp_on = row.min_p > 0.0f;
  const float min_p = fminf(row.min_p, 1.0f);
  const SampleSrc src{w, vocab, m, sampled ? 1.0f / row.temperature : 1.0f};
  auto* stats = reinterpret_cast<FastChunkStats*>(base + l.stats);
  auto* chunk_entries = reinterpret_cast<uint64_t*>(base + l.entries);
  auto* group_entries = reinterpret_cast<uint64_t*>(base + l.group_entries);

  // ---- per chunk: masses, log Z's share, the best entries.
  double mass = 0.0, kept_mass = 0.0, z = 0.0;
  int last_kept = -1;
  for (int i = c0 + tid; i < c1; i += nt) {
    if (sampled) {
      const float e = src.e_of(w[i]);
      mass += static_cast<double>(e);
      if (e > 0.0f && !(minp_on && !(e >= min_p))) {
        kept_mass += static_cast<double>(e);
        last_kept = i;
      }
    }
    if (row.num_top >= 0) z += exp(static_cast<double>(raw[i] - m_raw));
  }
  mass = block_sum(mass, dscr);
  kept_mass = block_sum(kept_mass, dscr);
  z = block_sum(z, dscr);
  last_kept = block_max_int(last_kept, iscr);
  for (int i = c0 + tid; i < c0 + kFastChunk; i += nt) buf[i - c0] = i < c1 ? sample_entry(sample_key(w[i]), i) : ~0ull;
  td::sync_threads();
  fast_sort_keep(buf, kFastChunk, chunk_entries + static_cast<int64_t>(chunk) * kFastCand);
  if (tid == 0) {
    stats[chunk].mass = mass;
    stats[chunk].kept_mass = kept_mass;
    stats[chunk].z = z;
    stats[chunk].last_kept = last_kept;
  }

  // ---- level 1: the group's last block merges its chunks' entries.
  const int cpr = fast_counters_per_row(l);
  int* counters = f.counters + static_cast<int64_t>(row_index) * cpr;
  const int group = chunk / kFastGroup, g0 = group * kFastGroup, gn = td::imin(kFastGroup, l.chunks - g0);
  if (!last_block_arrive(counters + 2 + group, gn, flag)) return;
  for (int j = tid; j < gn * kFastCand; j += nt) buf[j] = load_volatile(chunk_entries + static_cast<int64_t>(g0) * kFastCand + j);
  td::sync_threads();
  fast_sort_keep(buf, gn * kFastCand, group_entries + static_cast<int64_t>(group) * kFastCand);

  // ---- level 2: the row's last block: the row's best entries, then the decision.
  if (!last_block_arrive(counters + 1, l.groups, flag)) return;
  for (int j = tid; j < l.groups * kFastCand; j += nt) buf[j] = load_volatile(group_entries + j);
  td::sync_threads();
  fast_sort_keep(buf, l.groups * kFastCand, buf);  // buf[0, kFastCand): the row's best, in order
  const int ncand = td::imin(kFastCand, vocab);
  const bool topk_on = row.top_k > 0 && row.top_k < vocab;
  const bool topp_on = row.top_p < 1.0f;
  bool resolved = true;
  int token = st->token;
  if (sampled) {
    const double u = sample_uniform(row);
    if (topk_on || topp_on) {
      // The kept prefix of the order: top-k, then top-p's boundary (thread 0, in order).
      if (tid == 0) {
        int b = ncand;
        bool ok = true;
        double total = 0.0;
        if (topk_on) {
          if (row.top_k > ncand) ok = false;
          b = td::imin(row.top_k, ncand);
          for (int j = 0; j < b; ++j) total += static_cast<double>(src.e_of(sample_key_value(entry_key(buf[j]))));
        } else {
          for (int c = 0; c < l.chunks; ++c) total += load_volatile(&stats[c].mass);
        }
        if (ok && topp_on) {
          const double target = static_cast<double>(row.top_p) * total;
          double cum = 0.0;
          int found = -1;
          for (int j = 0; j < b; ++j) {
            cum += static_cast<double>(src.e_of(sample_key_value(entry_key(buf[j]))));
            if (cum >= target) {
              found = j + 1;
              break;
            }
          }
          if (found > 0) b = found;
          else if (!topk_on && ncand < vocab) ok = false;  // the boundary lies past the best entries
        }
        flag[0] = ok ? b : -1;
      }
      td::sync_threads();
      const int b = flag[0];
      td::sync_threads();
      if (b < 0) {
        resolved = false;
      } else {
        // Kept entries re-keyed by id (the rest after them), sorted, walked in id order.
        uint64_t* kept = buf + kFastCand;
        for (int j = tid; j < kFastCand; j += nt) {
          uint64_t ent = ~0ull;
          if (j < b) {
            const float e = src.e_of(sample_key_value(entry_key(buf[j])));
            if (e > 0.0f && !(minp_on && !(e >= min_p))) ent = (static_cast<uint64_t>(static_cast<uint32_t>(entry_id(buf[j]))) << 32) | entry_key(buf[j]);
          }
          kept[j] = ent;
        }
        td::sync_threads();
        sample_bitonic_sort(kept, kFastCand);
        if (tid == 0) {
          double total = 0.0;
          int n = 0;
          for (; n < kFastCand && kept[n] != ~0ull; ++n) total += static_cast<double>(src.e_of(sample_key_value(static_cast<uint32_t>(kept[n]))));
          const double target = u * total;
          int pick = n > 0 ? static_cast<int>(kept[n - 1] >> 32) : 0;
          double cum = 0.0;
          for (int j = 0; j < n; ++j) {
            cum += static_cast<double>(src.e_of(sample_key_value(static_cast<uint32_t>(kept[j]))));
            if (target < cum) {
              pick = static_cast<int>(kept[j] >> 32);
              break;
            }
          }
          iscr[0] = pick;
        }
        td::sync_threads();
        token = iscr[0];
        td::sync_threads();
      }
    } else {
      // Every kept token: the chunk the draw lands in, then its tokens in id order.
      if (tid == 0) {
        double total = 0.0;
        int last = -1;
        for (int c = 0; c < l.chunks; ++c) {
          total += load_volatile(&stats[c].kept_mass);
          last = td::imax(last, load_volatile(&stats[c].last_kept));
        }
        const double target = u * total;
        double cum = 0.0;
        int at = -1;
        for (int c = 0; c < l.chunks; ++c) {
          const double kept = load_volatile(&stats[c].kept_mass);
          if (target < cum + kept) {
            at = c;
            break;
          }
          cum += kept;
        }
        iscr[0] = at;
        iscr[1] = last >= 0 ? last : 0;
        dvar[0] = target - cum;
      }
      td::sync_threads();
      const int at = iscr[0], fallback_token = iscr[1];
      const double rest = dvar[0];
      td::sync_threads();
      if (at < 0) {
        token = fallback_token;  // rounding: past every chunk's sum
      } else {
        const int a0 = at * kFastChunk, a1 = td::imin(vocab, a0 + kFastChunk);
        const int per = (a1 - a0 + nt - 1) / nt;
        const int lo = td::imin(a1, a0 + tid * per), hi = td::imin(a1, lo + per);
        double seg = 0.0;
        for (int i = lo; i < hi; ++i) {
          const float e = src.e_of(w[i]);
          if (e > 0.0f && !(minp_on && !(e >= min_p))) seg += static_cast<double>(e);
        }
        double unused;
        const double before = block_exclusive_scan(seg, dscr, unused);
        int found = 0x7fffffff;
        double run = before;
        for (int i = lo; i < hi; ++i) {
          const float e = src.e_of(w[i]);
          if (!(e > 0.0f && !(minp_on && !(e >= min_p)))) continue;
          run += static_cast<double>(e);
          if (rest < run) {
            found = i;
            break;
          }
        }
        const int first = block_min_int(found, iscr);
        token = first != 0x7fffffff ? first : load_volatile(&stats[at].last_kept);
      }
    }
  }

  // ---- logprobs.
  const int top_n = row.num_top > 0 ? td::imin(td::imin(row.num_top, vocab), a.top_stride) : 0;
  if (top_n > 0 && (prepare || top_n > ncand)) resolved = false;
  if (resolved) {
    double zt = 0.0;
    if (row.num_top >= 0) {
      for (int c = 0; c < l.chunks; ++c) zt += load_volatile(&stats[c].z);
    }
    sample_write_row(a, row_index, token, row.num_top >= 0, m_raw + static_cast<float>(log(zt)), raw, buf, top_n);
  }
  if (tid == 0) st->status = resolved ? 1 : 2;
}

/** Dynamic shared memory of pass B: the largest sort (a chunk, a group, the row's groups) + the kept ids. */
inline size_t sample_fast_shared_bytes(const FastLayout& l) {
  const int n = std::max({kFastChunk, kFastGroup * kFastCand, l.groups * kFastCand + kFastCand});
  size_t p = 1;
  while (p < static_cast<size_t>(n)) p <<= 1;
  return p * 8;
}

/** Scratch bytes and counters the fast path needs for `rows` rows of `vocab` tokens. */
inline int64_t sample_fast_scratch_bytes(int rows, int vocab) { return static_cast<int64_t>(rows) * fast_layout(vocab).row_bytes; }
inline int64_t sample_fast_counter_count(int rows, int vocab) { return static_cast<int64_t>(rows) * fast_counters_per_row(fast_layout(vocab)); }

/** A, B, then the one-block kernel for the rows left (all rows when the row is too long for A/B). */
inline void launch_sample_fast(const SampleArgs& a, const SampleFastArgs& f, void* stream) {
  if (a.num_rows <= 0) return;
  const FastLayout l = fast_layout(a.vocab);
  if (l.groups > kFastMaxGroups || a.num_rows > 65535) {
    launch_sample(a, stream);
    return;
  }
  const td::Grid grid{static_cast<unsigned>(l.chunks), static_cast<unsigned>(a.num_rows), 1};
  td::launch(sample_fast_prep<0>, grid, kFastThreads, 0, stream, a, f);
  td::launch(sample_fast_pass<0>, grid, kFastThreads, sample_fast_shared_bytes(l), stream, a, f);
  SampleArgs rest = a;
  rest.skip_status = static_cast<const unsigned char*>(f.scratch) + l.state + offsetof(FastRowState, status);
  rest.skip_stride_bytes = l.row_bytes;
  launch_sample(rest, stream);
}

}  // namespace tandem::gpu::TD_NS
