/**
 * Prefix affinity (docs/design.md "Router", tiers and conversations): a request whose prefix a
 * worker already holds, in its pool or in its host/disk tier, goes to that worker unless the
 * worker is truly overloaded. Pure: rows in, a narrower pool out.
 *
 * Why a rule on top of the cost: a conversation's next turn arrives seconds to minutes after
 * the last, and by then the holder's load is whatever the other traffic made it. The cost
 * weighs the prefix it saves (a few hundred blocks at most) against the holder's active blocks,
 * which swing by more than that with the traffic alone, so follow-ups scattered (measured on
 * Mooncake's conversation trace: 57–73% of the cache ceiling with an unbounded host tier,
 * bench/mooncake-fleet.ts). Yet sending a follow-up to a holder that has room costs it nothing
 * in time to first token: active blocks slow a step a little, and only a full pool or a prefill
 * queue makes the request wait.
 *
 * A holder is a candidate that holds at least `minHeldShare` of the prompt's blocks (device
 * hits, in-flight credit and tier hits together). It is truly overloaded, and the cost decides
 * as usual, when it:
 *   - is over its load threshold (not in the eligible pool the caller gives), or
 *   - has no KV room for the blocks this request adds (`kvRoomBlocks` < 0: pool − used − new)
 *     and holds less than `waitShare` (0.5) of the prompt, or
 *   - carries more than `maxLoadRatio` (2) × the mean load of the candidates that do not hold
 *     it, load = active blocks + pending prefill blocks (so a hot prefix that every request
 *     shares spreads once its holders run ahead of the rest: a burst never piles onto one
 *     worker, and a worker that holds nothing is not starved while others do).
 * Otherwise the request goes to the holders only (lowest cost among them). When every
 * candidate holds the prefix, or none does, the rule changes nothing. When every candidate is
 * over its load threshold (`saturated`: the request will wait in some worker's queue whatever
 * the choice) the KV-room condition is dropped: it waits where its prefix is, and onboards it
 * when it starts (on Mooncake's trace past saturation: 57-63% → 89-99% of the cache ceiling,
 * TTFT p90 3-10% lower; bench/mooncake-fleet.ts). The load bound still holds.
 *
 * Why a holder of most of the prompt keeps it without room (`waitShare`): its pool frees blocks
 * as its streams end, while a worker with room recomputes what the holder would have copied
 * in, and near saturation that worker is about to be as full (the load bound still sends the
 * request elsewhere when the holder carries far more than the rest). On Mooncake's trace with
 * a host tier, at the knee (16× and 20×, four 1,200-request windows), the room rule sent 64
 * of the first window's 1,200 requests away from their holder at 16× and kept the tier at 72%
 * of the cache ceiling there; waiving it for holders of half the prompt or more raised the
 * cached share in every window (16.6 → 20.1% of prompt tokens at 16× in the first) and lowered
 * TTFT p90 in 7 of 8 window × speed runs (722 → 655 ms in the first at 16×; without a tier −4%
 * to +6%, the size of the swings any small policy change makes in that trace). docs/router.md
 * has the table.
 *
 * Worked example (tests: test/router/prefix-affinity.test.ts). 100-block prompt, minHeldShare
 * 0.3, waitShare 0.5, three workers with 400-block pools:
 *   A holds 60 blocks in its host tier, active 250, pending 0 → load 250, room 400 − 250 − 40 = 110
 *   B holds nothing,                   active 100, pending 20 → load 120
 *   C holds nothing,                   active 110, pending 0  → load 110
 * The others' mean load is (120 + 110) / 2 = 115; A's 250 ≤ 2 × 115 = 230? No: A is overloaded
 * and the cost decides (B = 120 + 100 loses to C = 110 + 100). With A at active 230 instead:
 * 230 ≤ 230 and room 130 → A takes it although its cost (40 + 230 = 270) is above C's (210).
 * With A's pool at 370 used (room −10) A still takes it: it holds 60% ≥ waitShare and waits there
 * for 10 blocks to free. Holding 40 blocks instead (40% < 50%), it would be overloaded.
 */
import type { CostRow } from './cost.js';

export interface PrefixAffinityPolicy {
  /** `--router-prefix-affinity`: share of the prompt's blocks a holder must hold; 0 = off. */
  minHeldShare: number;
  /** A holder carrying more than this × the mean load of the candidates that do not hold the prefix is overloaded. */
  maxLoadRatio: number;
  /** A holder of at least this share of the prompt keeps it without KV room (waits there); absent = always needs room. */
  waitShare?: number;
  /**
   * What load is: `blocks` (default), active + pending prefill blocks; `cost`, the latency
   * cost's calibrated milliseconds over what the request would cost on an idle nominal worker
   * (which know a slow worker from a fast one; see `holderLimit`).
   */
  load?: 'blocks' | 'cost';
}

export const DEFAULT_PREFIX_AFFINITY: PrefixAffinityPolicy = { minHeldShare: 0.3, maxLoadRatio: 2, waitShare: 0.5 };

/** What the rule reads about one candidate, beside its cost row. */
export interface AffinityView {
  /** The worker's KV pool in blocks, when known. */
  totalBlocks: number | undefined;
  /** Blocks in use there: the larger of the router's bookings and the worker's report. */
  usedBlocks: number;
}

/** Blocks of the prompt the row's worker holds in any tier. */
export function heldBlocks(row: CostRow): number {
  return row.cachedBlocks + (row.hostBlocks ?? 0) + (row.diskBlocks ?? 0);
}

/**
 * Marks each row with what the rule saw (`prefixHolder`, `kvRoomBlocks`) so a decision's cost
 * table says why a holder won or lost. No other side effect.
 */
export function markHolders(rows: CostRow[], views: readonly AffinityView[], requestBlocks: number, policy: PrefixAffinityPolicy): void {
  if (!(policy.minHeldShare > 0) || requestBlocks <= 0) return;
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i]!;
    const held = heldBlocks(row);
    if (held <= 0 || held < policy.minHeldShare * requestBlocks) continue;
    row.prefixHolder = true;
    const v = views[i]!;
    if (v.totalBlocks !== undefined) row.kvRoomBlocks = v.totalBlocks - v.usedBlocks - (requestBlocks - held);
    if (policy.waitShare !== undefined && held >= policy.waitShare * requestBlocks) row.waitsForRoom = true;
  }
}

/**
 * The pool narrowed to the holders that are not truly overloaded, or `pool` itself when there
 * are none. A holder whose pool size is unknown has no proven room: it is left to the cost,
 * unless it holds `waitShare` of the prompt (it needs no room).
 */
export function affinityPool(pool: readonly number[], rows: readonly CostRow[], policy: PrefixAffinityPolicy, saturated = false): readonly number[] {
  if (!(policy.minHeldShare > 0) || pool.length < 2) return pool;
  let others = 0;
  let load = 0;
  for (const i of pool) {
    if (rows[i]!.prefixHolder === true) continue;
    load += loadOf(rows[i]!, policy);
    others++;
  }
  // Nobody holds it, or everybody does: nothing to prefer.
  if (others === 0 || others === pool.length) return pool;
  const mean = load / others;
  const sticky = pool.filter((i) => {
    const r = rows[i]!;
    return r.prefixHolder === true && (saturated || r.waitsForRoom === true || (r.kvRoomBlocks !== undefined && r.kvRoomBlocks >= 0)) && loadOf(r, policy) <= holderLimit(r, mean, policy);
  });
  return sticky.length > 0 ? sticky : pool;
}

/**
 * The most load a holder may carry and keep the request. Blocks: `maxLoadRatio` × the others'
 * mean load. Latency (ms over an idle nominal worker): the same, plus the prefill its prefix
 * saves, plus (`maxLoadRatio` − 1) × the others' mean load capped at the cold request's cost.
 * In the holder's cost that reads
 *
 *   cost(holder) ≤ cold + r·L + (r − 1)·min(L, cold)      L = the others' mean load, r = maxLoadRatio
 *
 * so with the others idle (L = 0) a holder keeps the request only where it costs no more than
 * an idle worker computing the whole prompt, which the cost would choose anyway; from L ≥ cold
 * on it is r × the others' mean cost (cold + L), the bound the latency cost used alone before.
 * Why: that fixed bound let a busy holder keep requests an idle worker would have started at
 * once (bench/latency-routing-virtual.ts, homogeneous fleet, 10/s trace: 164 of 350 requests
 * on a holder the cost ranked second, TTFT p50 0.83× and p90 0.95× of the block cost's over
 * fifteen seeds); a bound that was tighter at every load spread the hot prefixes at 30–40/s
 * shared-prefix and the pools thrashed. docs/router.md has the tables.
 */
function holderLimit(row: CostRow, othersMeanLoad: number, policy: PrefixAffinityPolicy): number {
  const p = row.latency;
  if (policy.load !== 'cost' || p === undefined) return policy.maxLoadRatio * othersMeanLoad;
  return policy.maxLoadRatio * othersMeanLoad + (p.coldMs - p.idleMs) + (policy.maxLoadRatio - 1) * Math.min(othersMeanLoad, p.coldMs);
}

function loadOf(row: CostRow, policy: PrefixAffinityPolicy): number {
  if (policy.load !== 'cost') return row.activeDecodeBlocks + row.pendingPrefillBlocks;
  return row.latency !== undefined ? Math.max(0, row.cost - row.latency.idleMs) : row.cost;
}
