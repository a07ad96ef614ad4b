// Prefill attention on tensor cores (FlashAttention-2 on mma.sync m16n8k16, bf16 in, f32
// accumulators) over the paged KV pool, for head_dim D = 64 and 128. launch_attention
// (attention.cuh) sends prefill items here when D and the GQA group fit; decode and other head
// dims stay on the CUDA-core kernel.
//
// Work: one CTA of 4 warps per (rows, KV head). A CTA's rows are tokens x the `group` query
// heads of its KV head, token-major (row r: token r / group, head kv_head * group + r % group),
// so every K/V tile it loads feeds the whole GQA group. ROWS = 64 MT rows, warp w owning
// [16 MT w, 16 MT (w + 1)) as MT m16 tiles. step_plan cuts a sequence's new tokens into items
// of attention_tile_tokens(group, D) = floor(64 / group) tokens (<= 64 rows); with MT = 2 a CTA
// takes an even-numbered item of a sequence and the one after it (<= 128 rows), and the CTA of
// an odd-numbered item has nothing to do (a pass loop covers any longer item). Grid (items,
// KV heads), issued last item first: the longest key ranges start first, the causal tail is short.
//
// Keys [0, last position of the CTA] in tiles of BN (STAGES-deep cp.async ring, one
// __syncthreads per tile): wait for tile j, barrier (tile j visible to all; all warps done with
// tile j - 1), issue tile j + STAGES - 1 into tile j - 1's stage, compute tile j. K and V rows
// are gathered through the block table, 16-byte chunks zero-filled past the end; the pool
// block of each key is looked up one iteration before its copy is issued (sIds), so copies
// never wait on the table. A tile is computed in sub-tiles of BNC keys (registers), per warp:
//   S = Q K^T: Q fragments by ldmatrix (kept in registers when MT * D <= 128, else reloaded per
//   sub-tile), K rows as the B operand (non-transposed ldmatrix.x4: two n8 key tiles x k16).
//   Causal mask (only on sub-tiles reaching past the warp's first row position): key > row
//   position -> -inf. Online softmax on the accumulators: a row lives in one quad (lanes
//   4g..4g+3), row max by shfl_xor 1, 2; p = exp2(s * c - m * c) with c = scale * log2 e; O and
//   the per-lane partial sum l rescaled by exp2((m_old - m_new) * c); the quad sums l at the end.
//   O += P V: accumulator tiles 2kk, 2kk + 1 are the A fragment of k16 step kk (bf16 pairs in
//   registers, no shared memory), V by ldmatrix.x4.trans (two n8 d tiles x k16 per load).
//   A warp whose rows all precede a sub-tile skips it (warp-uniform; no barrier inside).
// Scaling: Q is rounded to bf16 unscaled; the softmax scale is applied to the f32 scores,
// folded with log2 e into the exp2 argument (one FFMA per score).
// Output: O / l as bf16 pairs from the accumulators (rows past the CTA's tokens unwritten).
// Shared memory (bf16): Q[ROWS][D], STAGES x (K[BN][D], V[BN][D]), then ids[STAGES][BN] (int32).
// Rows of 16-byte chunks XOR-swizzled (chunk ^ row % 8): cp.async stores and every ldmatrix
// phase (8 rows, one chunk column) are bank-conflict-free.
// Configurations (registers without spills on sm_80 and sm_90a; see AttnMma64 / AttnMma128):
//   D = 64:  MT 2, BN = BNC = 64, 3 stages: 128 rows, 64.8 KB, Q in registers;
//   D = 128: MT 2, BN = BNC = 32, 3 stages: 128 rows, 80.4 KB, Q reloaded (O alone is 128
//            registers a thread; 64-key sub-tiles spill).
// PTX that the SIMT harness does not check: cp.async, ldmatrix, mma.sync (kernel_lang.h), and
// ex2.approx / cvt.rn.bf16x2.f32 below (exp2f and the integer rounding in SIMT).
//
// Everything here is a template or inline, so a test translation unit may include it next to
// kernels_simt.cc and force a configuration (attention_mma_run).
#pragma once

#include <cstdint>

#include "../kernel_api.h"
#include "../kernel_lang.h"
#include "launch.h"

#if TD_CUDA
#define TD_ATTN_UNROLL _Pragma("unroll")
#else
#define TD_ATTN_UNROLL _Pragma("GCC unroll 16")
#endif

namespace tandem::gpu::TD_NS {

inline constexpr float kAttnLog2e = 1.4426950408889634f;

/** exp2(x); x = -inf gives 0. CUDA: ex2.approx.ftz (MUFU.EX2); SIMT: exp2f. */
TD_DEVICE float attn_exp2(float x) {
#if TD_CUDA
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}

/** bf16 pair, lo at the lower address, round to nearest even (CUDA: one cvt.rn.bf16x2.f32). */
TD_DEVICE uint32_t attn_pack_bf16x2(float lo, float hi) {
#if TD_CUDA
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#else
  return td::pack_bf16x2(lo, hi);
#endif
}

template <int D_, int MT_, int BN_, int BNC_, int STAGES_>
struct AttnMmaConfig {
  static constexpr int D = D_, MT = MT_, BN = BN_, BNC = BNC_, STAGES = STAGES_;
  static constexpr int WARPS = 4, THREADS = 32 * WARPS;
  static constexpr int ROWS = 16 * MT * WARPS;      // query rows of a CTA
  static constexpr int CHUNKS = D / 8;              // 16-byte chunks per row
  static constexpr int RPP = THREADS / CHUNKS;      // rows one copy pass covers
  static constexpr int KV_PASSES = BN / RPP;        // copy passes per K (or V) tile
  static constexpr int Q_ELEMS = ROWS * D, KV_ELEMS = BN * D, STAGE_ELEMS = 2 * KV_ELEMS;
  static constexpr size_t SMEM_BYTES =
      static_cast<size_t>(Q_ELEMS + STAGES * STAGE_ELEMS) * sizeof(td::bf16_bits) + STAGES * BN * sizeof(int32_t);
  static constexpr bool Q_IN_REGS = MT * D <= 128;  // Q fragments: MT * D / 4 registers
  static constexpr int QF_MT = Q_IN_REGS ? MT : 1, QF_KS = Q_IN_REGS ? D / 16 : 1;
  static constexpr int KS = D / 16;                 // k16 steps of Q K^T
  static constexpr int NT = BNC / 8;                // n8 key tiles of S (one compute sub-tile)
  static constexpr int DT = D / 8;                  // n8 d tiles of O
  static_assert(D % 16 == 0 && BN % 16 == 0 && BN <= THREADS && ROWS <= 256 && MT <= 2, "tiles, row deltas a byte each");
  static_assert(RPP % 8 == 0 && BN % RPP == 0 && THREADS % CHUNKS == 0, "copy passes keep one swizzle");
  static_assert((D & (D - 1)) == 0, "fragment offsets: a k step is an XOR on the chunk bits of a row offset");
  static_assert(STAGES >= 2 && BN % BNC == 0 && BNC % 16 == 0, "pipeline, sub-tiles");
};

/** Element offset of 16-byte chunk c of row r in a swizzled [rows][D] tile. */
template <int D>
TD_DEVICE int attn_swz(int r, int c) {
  return r * D + ((c ^ (r & 7)) << 3);
}

/**
 * One sub-tile of BNC keys for one warp: S = Q K^T, causal mask (when `masked`: key_rel is the
 * sub-tile's first key minus the CTA's first position; row deltas a byte each), online softmax
 * into (m_run, l_run, o), O += P V. k_off and v_off include the stage and sub-tile rows.
 */
template <class C>
TD_DEVICE void attn_mma_subtile(const td::bf16_bits* sQ, const td::bf16_bits* sKV, int q_off, int k_off, int v_off,
                                const uint32_t (&qf)[C::QF_MT][C::QF_KS][4], int key_rel, bool masked, uint32_t row_delta,
                                float scale_log2, float (&o)[C::MT][C::DT][4], float (&m_run)[C::MT][2], float (&l_run)[C::MT][2]) {
  constexpr int D = C::D, MT = C::MT, KS = C::KS, NT = C::NT, DT = C::DT;
  const int tq = static_cast<int>(td::lane_id() & 3u);

  // S = Q K^T (raw scores, f32).
  float s[MT][NT][4];
  TD_ATTN_UNROLL
  for (int mt = 0; mt < MT; ++mt) {
    TD_ATTN_UNROLL
    for (int nt = 0; nt < NT; ++nt) {
      TD_ATTN_UNROLL
      for (int i = 0; i < 4; ++i) s[mt][nt][i] = 0.0f;
    }
  }
  TD_ATTN_UNROLL
  for (int ks = 0; ks < KS; ++ks) {
    uint32_t qa[MT][4];
    TD_ATTN_UNROLL
    for (int mt = 0; mt < MT; ++mt) {
      if constexpr (C::Q_IN_REGS) {
        TD_ATTN_UNROLL
        for (int i = 0; i < 4; ++i) qa[mt][i] = qf[mt][ks][i];
      } else {
        td::ldmatrix_x4(qa[mt], sQ + ((q_off ^ (ks << 4)) + mt * 16 * D));
      }
    }
    const td::bf16_bits* sk = sKV + (k_off ^ (ks << 4));
    TD_ATTN_UNROLL
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t kb[4];
      td::ldmatrix_x4(kb, sk + np * 16 * D);
      const uint32_t b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
      TD_ATTN_UNROLL
      for (int mt = 0; mt < MT; ++mt) {
        td::mma_bf16_16816(s[mt][2 * np], qa[mt], b0, s[mt][2 * np]);
        td::mma_bf16_16816(s[mt][2 * np + 1], qa[mt], b1, s[mt][2 * np + 1]);
      }
    }
  }

  // Causal mask, only where the tile reaches past the warp's first row position.
  if (masked) {
    const int key0 = key_rel + 2 * tq;  // key - first_pos of column 2 tq of key tile 0
    TD_ATTN_UNROLL
    for (int mt = 0; mt < MT; ++mt) {
      TD_ATTN_UNROLL
      for (int i = 0; i < 4; ++i) {
        const int delta = static_cast<int>((row_delta >> (8 * (2 * mt + (i >> 1)))) & 0xffu);
        TD_ATTN_UNROLL
        for (int nt = 0; nt < NT; ++nt) {
          if (key0 + nt * 8 + (i & 1) > delta) s[mt][nt][i] = -INFINITY;
        }
      }
    }
  }

  // Online softmax: s becomes p = exp(scale (s - m_new)); O and l are rescaled.
  TD_ATTN_UNROLL
  for (int mt = 0; mt < MT; ++mt) {
    TD_ATTN_UNROLL
    for (int h = 0; h < 2; ++h) {
      float mx = -INFINITY;
      TD_ATTN_UNROLL
      for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
      mx = fmaxf(mx, td::shfl_xor(mx, 1));
      mx = fmaxf(mx, td::shfl_xor(mx, 2));
      const float m_new = fmaxf(m_run[mt][h], mx);
      // Every row sees key 0 in its first tile, so m_new is finite here; the guard keeps a
      // fully masked row at p = 0 instead of NaN all the same.
      const float ms = m_new == -INFINITY ? 0.0f : m_new * scale_log2;
      const float corr = attn_exp2(m_run[mt][h] * scale_log2 - ms);
      m_run[mt][h] = m_new;
      float sum = 0.0f;
      TD_ATTN_UNROLL
      for (int nt = 0; nt < NT; ++nt) {
        TD_ATTN_UNROLL
        for (int e = 0; e < 2; ++e) {
          const float p = attn_exp2(s[mt][nt][2 * h + e] * scale_log2 - ms);
          s[mt][nt][2 * h + e] = p;
          sum += p;
        }
      }
      l_run[mt][h] = l_run[mt][h] * corr + sum;
      TD_ATTN_UNROLL
      for (int dt = 0; dt < DT; ++dt) {
        o[mt][dt][2 * h] *= corr;
        o[mt][dt][2 * h + 1] *= corr;
      }
    }
  }

  // O += P V: key tiles 2kk, 2kk + 1 of the accumulators form the A fragment of step kk.
  TD_ATTN_UNROLL
  for (int kk = 0; kk < NT / 2; ++kk) {
    uint32_t pa[MT][4];
    TD_ATTN_UNROLL
    for (int mt = 0; mt < MT; ++mt) {
      pa[mt][0] = attn_pack_bf16x2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
      pa[mt][1] = attn_pack_bf16x2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
      pa[mt][2] = attn_pack_bf16x2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
      pa[mt][3] = attn_pack_bf16x2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
    }
    TD_ATTN_UNROLL
    for (int dp = 0; dp < DT / 2; ++dp) {
      uint32_t vb[4];
      td::ldmatrix_x4_trans(vb, sKV + (v_off ^ (dp << 4)) + kk * 16 * D);
      const uint32_t b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
      TD_ATTN_UNROLL
      for (int mt = 0; mt < MT; ++mt) {
        td::mma_bf16_16816(o[mt][2 * dp], pa[mt], b0, o[mt][2 * dp]);
        td::mma_bf16_16816(o[mt][2 * dp + 1], pa[mt], b1, o[mt][2 * dp + 1]);
      }
    }
  }
}

template <class C>
TD_GLOBAL void TD_LAUNCH_BOUNDS(C::THREADS) attention_mma_prefill_kernel(AttentionArgs a) {
  TD_DYNAMIC_SHARED(td::bf16_bits, smem);
  constexpr int D = C::D, MT = C::MT, BN = C::BN, BNC = C::BNC, CHUNKS = C::CHUNKS, RPP = C::RPP, KV_PASSES = C::KV_PASSES;
  constexpr int KS = C::KS, DT = C::DT, STAGES = C::STAGES;
  td::bf16_bits* sQ = smem;
  td::bf16_bits* sKV = smem + C::Q_ELEMS;  // stage s: K at s * STAGE_ELEMS, V KV_ELEMS after
  int32_t* sIds = reinterpret_cast<int32_t*>(sKV + STAGES * C::STAGE_ELEMS);  // [tile % STAGES][BN] pool block of each key

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5;
  const int gq = lane >> 2, tq = lane & 3;  // accumulator rows gq, gq + 8; columns 2 tq, 2 tq + 1
  const int kv_head = static_cast<int>(blockIdx.y);
  const int group = a.num_heads / a.geo.num_kv_heads;

  // This CTA's tokens: item `index` and, when MT = 2, the next item of the same sequence. Items
  // of a sequence are consecutive and all but the last hold the plan's tile size, so an item's
  // index within its sequence is first / (the previous item's count).
  const int num_items = a.num_prefill_items;
  const int index = num_items - 1 - static_cast<int>(blockIdx.x);
  const PrefillItem item = a.prefill_items[index];
  const SeqDesc seq = a.seqs[item.seq];
  int tokens = item.count;
  if (MT > 1) {
    const int in_seq = item.first > 0 && index > 0 ? item.first / td::imax(1, a.prefill_items[index - 1].count) : 0;
    if (in_seq % MT != 0) {
      tokens = 0;  // the previous item's CTA covers it
    } else {
      for (int k = 1; k < MT && index + k < num_items; ++k) {
        const PrefillItem next = a.prefill_items[index + k];
        if (next.seq != item.seq) break;
        tokens += next.count;
      }
    }
  }

  const int bs = a.geo.block_size;
  int bs_shift = -1;  // block_size = 2^bs_shift, or -1: divide
  for (int s = 0; s < 31; ++s) {
    if ((1 << s) == bs) bs_shift = s;
  }
  // Copy assignment: chunk (tid % CHUNKS) of tile rows tid / CHUNKS + i * RPP.
  const int cchunk = tid % CHUNKS, crow = tid / CHUNKS;
  const int s_copy = attn_swz<D>(crow, cchunk);  // RPP % 8 == 0: the same swizzle every pass
  const float scale_log2 = a.scale * kAttnLog2e;

  // ldmatrix row addresses (matrix q = lane / 8, row lane % 8 of it).
  // Q (A operand): matrix q is rows 8 (q & 1), k chunk q >> 1.
  // K (B operand, [key][d]): matrix q is keys 8 (q >> 1), d chunk q & 1.
  // V (B operand via .trans, [key][d]): matrix q is keys 8 (q & 1), d chunk q >> 1.
  // Offsets are of k step 0 / d tile pair 0; step ks is offset ^ (ks << 4): chunk 2 ks + c of a
  // row is (c ^ row % 8) ^ 2 ks, and the XOR only touches chunk bits (D is a power of two, so
  // whole rows added to an offset leave them alone). K and V offsets get the stage and sub-tile
  // rows added before the XOR, so it is not hoisted out of the tile loop as a register per step.
  const int q_off = attn_swz<D>(warp * 16 * MT + (lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4);
  const int k_off = attn_swz<D>((lane & 7) + (lane >> 4) * 8, (lane >> 3) & 1);
  const int v_off = C::KV_ELEMS + attn_swz<D>((lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4);

  const int tokens_per_pass = C::ROWS / group;
  for (int t0 = 0; t0 < tokens; t0 += tokens_per_pass) {
    const int n_tok = td::imin(tokens_per_pass, tokens - t0);
    const int rows_valid = n_tok * group;
    const int first_tok = item.first + t0;             // relative to the sequence's new tokens
    const int first_pos = seq.start_pos + first_tok;   // position of the first token
    const int kv_end = first_pos + n_tok;              // keys [0, kv_end)
    const int n_tiles = (kv_end + BN - 1) / BN;

    // Pool block of key `pos` (0 past the end: not read). Thread t < BN looks up key t of a
    // tile into sIds one iteration before the tile's copy is issued, so no copy waits on the table.
    auto block_of = [&](int pos) {
      return pos < kv_end ? a.block_tables[seq.table_offset + (bs_shift >= 0 ? pos >> bs_shift : pos / bs)] : 0;
    };
    auto issue = [&](int tile) {
      const int stage = tile % STAGES;
      td::bf16_bits* sk = sKV + stage * C::STAGE_ELEMS + s_copy;
      const int32_t* ids = sIds + stage * BN + crow;
      // Pointers from the (constant-bank) arguments here rather than kept live across the loop.
      const td::bf16_bits* kv_base =
          a.pool + static_cast<int64_t>(a.layer) * a.geo.layer_stride + static_cast<int64_t>(kv_head) * D + cchunk * 8;
      TD_ATTN_UNROLL
      for (int i = 0; i < KV_PASSES; ++i) {
        const int pos = tile * BN + crow + i * RPP;
        const bool ok = pos < kv_end;
        const int slot = bs_shift >= 0 ? pos & (bs - 1) : pos % bs;
        const td::bf16_bits* src =
            ok ? kv_base + static_cast<int64_t>(ids[i * RPP]) * a.geo.block_stride + static_cast<int64_t>(slot) * a.geo.token_stride
               : a.pool;
        td::cp_async16(sk + i * RPP * D, src, ok);
        td::cp_async16(sk + C::KV_ELEMS + i * RPP * D, ok ? src + a.geo.kv_stride : a.pool, ok);
      }
    };

    td::sync_threads();  // a previous pass is done with shared memory
    if (tid < BN) {
      TD_ATTN_UNROLL
      for (int t = 0; t < STAGES; ++t) sIds[t * BN + tid] = block_of(t * BN + tid);
    }
    td::sync_threads();
    TD_ATTN_UNROLL
    for (int t = 0; t < STAGES - 1; ++t) {
      if (t < n_tiles) issue(t);
      td::cp_async_commit();
    }

    // Q: f32 rows -> bf16, unscaled; rows past the tokens are zero (their results are dropped).
    const bool q_vec = (a.q_stride & 3) == 0 && (reinterpret_cast<uintptr_t>(a.q) & 15u) == 0;
    for (int e = tid; e < C::ROWS * CHUNKS; e += C::THREADS) {
      const int r = e / CHUNKS, c = e % CHUNKS;
      td::vec16 v{0u, 0u, 0u, 0u};
      if (r < rows_valid) {
        const int64_t row = seq.token_offset + first_tok + r / group;
        const int head = kv_head * group + r % group;
        const float* src = a.q + row * a.q_stride + static_cast<int64_t>(head) * D + c * 8;
        float f[8];
        if (q_vec) {
          const td::vec16 lo = *reinterpret_cast<const td::vec16*>(src);
          const td::vec16 hi = *reinterpret_cast<const td::vec16*>(src + 4);
          f[0] = td::bits_to_float(lo.x), f[1] = td::bits_to_float(lo.y), f[2] = td::bits_to_float(lo.z), f[3] = td::bits_to_float(lo.w);
          f[4] = td::bits_to_float(hi.x), f[5] = td::bits_to_float(hi.y), f[6] = td::bits_to_float(hi.z), f[7] = td::bits_to_float(hi.w);
        } else {
          TD_ATTN_UNROLL
          for (int x = 0; x < 8; ++x) f[x] = src[x];
        }
        v.x = attn_pack_bf16x2(f[0], f[1]);
        v.y = attn_pack_bf16x2(f[2], f[3]);
        v.z = attn_pack_bf16x2(f[4], f[5]);
        v.w = attn_pack_bf16x2(f[6], f[7]);
      }
      *reinterpret_cast<td::vec16*>(sQ + attn_swz<D>(r, c)) = v;
    }
    td::sync_threads();  // Q visible

    uint32_t qf[C::QF_MT][C::QF_KS][4];
    if constexpr (C::Q_IN_REGS) {
      TD_ATTN_UNROLL
      for (int mt = 0; mt < MT; ++mt) {
        TD_ATTN_UNROLL
        for (int ks = 0; ks < KS; ++ks) td::ldmatrix_x4(qf[mt][ks], sQ + ((q_off ^ (ks << 4)) + mt * 16 * D));
      }
    }

    // This thread's rows gq + 8h of m16 tile mt, their positions (rows past the tokens take
    // the last token's, so no row is ever fully masked), and the warp's position range.
    // Positions are first_pos + a delta < ROWS, packed a byte each (byte 2 mt + h).
    const int warp_row0 = warp * 16 * MT;
    uint32_t row_delta = 0;
    TD_ATTN_UNROLL
    for (int mt = 0; mt < MT; ++mt) {
      TD_ATTN_UNROLL
      for (int h = 0; h < 2; ++h) {
        row_delta |= static_cast<uint32_t>(td::imin(warp_row0 + mt * 16 + gq + 8 * h, rows_valid - 1) / group) << (8 * (2 * mt + h));
      }
    }
    const bool warp_active = warp_row0 < rows_valid;
    const int warp_min_pos = first_pos + td::imin(warp_row0, rows_valid - 1) / group;
    const int warp_max_pos = warp_active ? first_pos + td::imin(warp_row0 + 16 * MT - 1, rows_valid - 1) / group : -1;

    float o[MT][DT][4];
    float m_run[MT][2], l_run[MT][2];
    TD_ATTN_UNROLL
    for (int mt = 0; mt < MT; ++mt) {
      TD_ATTN_UNROLL
      for (int dt = 0; dt < DT; ++dt) {
        TD_ATTN_UNROLL
        for (int i = 0; i < 4; ++i) o[mt][dt][i] = 0.0f;
      }
      m_run[mt][0] = m_run[mt][1] = -INFINITY;
      l_run[mt][0] = l_run[mt][1] = 0.0f;
    }

    for (int j = 0; j < n_tiles; ++j) {
      // Groups committed: STAGES - 1 + j, one per tile; tile j is the (j + 1)-th, so the
      // STAGES - 2 after it may still be in flight.
      td::cp_async_wait<STAGES - 2>();
      td::sync_threads();  // tile j landed for every thread; every warp is done with tile j - 1
      if (j + STAGES - 1 < n_tiles) issue(j + STAGES - 1);  // into tile j - 1's stage
      td::cp_async_commit();
      // Ids of tile j + STAGES go where tile j's were (read before this barrier), stored after the math.
      const bool fetch = tid < BN && j + STAGES < n_tiles;
      const int next_id = fetch ? block_of((j + STAGES) * BN + tid) : 0;
      const int stage_off = (j % STAGES) * C::STAGE_ELEMS;
      for (int sub = 0; sub < BN / BNC; ++sub) {
        const int kbase = j * BN + sub * BNC;
        if (kbase > warp_max_pos) break;  // warp-uniform: every later key is masked for the warp
        attn_mma_subtile<C>(sQ, sKV, q_off, stage_off + sub * BNC * D + k_off, stage_off + sub * BNC * D + v_off, qf,
                            kbase - first_pos, kbase + BNC - 1 > warp_min_pos, row_delta, scale_log2, o, m_run, l_run);
      }
      if (fetch) sIds[(j % STAGES) * BN + tid] = next_id;
    }
    td::cp_async_wait<0>();

    const bool out_pair = (a.out_stride & 1) == 0 && (reinterpret_cast<uintptr_t>(a.out) & 3u) == 0;
    // O / l, bf16. The quad holds a row's partial sums (all lanes take part in the shuffles).
    TD_ATTN_UNROLL
    for (int mt = 0; mt < MT; ++mt) {
      TD_ATTN_UNROLL
      for (int h = 0; h < 2; ++h) {
        float l = l_run[mt][h];
        l += td::shfl_xor(l, 1);
        l += td::shfl_xor(l, 2);
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        const int r = warp_row0 + mt * 16 + gq + 8 * h;
        if (r < rows_valid) {
          const int64_t row = seq.token_offset + first_tok + r / group;
          const int head = kv_head * group + r % group;
          td::bf16_bits* dst = a.out + row * a.out_stride + static_cast<int64_t>(head) * D + 2 * tq;
          TD_ATTN_UNROLL
          for (int dt = 0; dt < DT; ++dt) {
            const float v0 = o[mt][dt][2 * h] * inv, v1 = o[mt][dt][2 * h + 1] * inv;
            if (out_pair) {
              *reinterpret_cast<uint32_t*>(dst + dt * 8) = attn_pack_bf16x2(v0, v1);
            } else {
              dst[dt * 8] = td::float_to_bf16(v0);
              dst[dt * 8 + 1] = td::float_to_bf16(v1);
            }
          }
        }
      }
    }
  }
}

/** Whether the tensor-core prefill takes this layer: head_dim 64 or 128, a whole GQA group of <= 64 heads. */
inline bool attention_mma_applies(const AttentionArgs& a) {
  const int d = a.geo.head_dim;
  if (d != 64 && d != 128) return false;
  if (a.geo.num_kv_heads <= 0 || a.num_heads % a.geo.num_kv_heads != 0) return false;
  const int group = a.num_heads / a.geo.num_kv_heads;
  return group >= 1 && group <= 64;
}

template <class C>
void attention_mma_launch(const AttentionArgs& a, void* stream) {
  td::launch(attention_mma_prefill_kernel<C>, {static_cast<unsigned>(a.num_prefill_items), static_cast<unsigned>(a.geo.num_kv_heads)},
             C::THREADS, C::SMEM_BYTES, stream, a);
}

using AttnMma64 = AttnMmaConfig<64, 2, 64, 64, 3>;
using AttnMma128 = AttnMmaConfig<128, 2, 32, 32, 3>;

/** The prefill items of `a` on tensor cores with configuration C (C::D == head_dim). */
template <class C>
void attention_mma_run(const AttentionArgs& a, void* stream) {
  if (a.num_prefill_items > 0) attention_mma_launch<C>(a, stream);
}

/** The prefill items of `a` on the configuration for its head_dim (attention_mma_applies(a)). */
inline void launch_attention_mma(const AttentionArgs& a, void* stream) {
  if (a.geo.head_dim == 64) {
    attention_mma_run<AttnMma64>(a, stream);
  } else {
    attention_mma_run<AttnMma128>(a, stream);
  }
}

}  // namespace tandem::gpu::TD_NS
