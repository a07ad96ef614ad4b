/**
 * In-flight prefix credit, as documentation. A worker publishes KV events only after it has
 * prefilled a prompt, so a burst of requests sharing a prefix arrives before any event says the
 * prefix is there. The router already books every routed sequence's block hashes per worker
 * (ActiveSequences), so it credits those too:
 *
 *   cached_blocks = max(indexed overlap, in-flight overlap)
 *
 * in the unchanged docs/design.md cost
 *   cost = prefill_load_scale × max(0, new_prefill_blocks − overlap_credit × cached_blocks) + active_decode_blocks
 *
 * Worked example (block_size 16, scale 1, credit 1). Every prompt is 8 blocks: a 6-block shared
 * system prefix + 2 private blocks.
 *   B decodes an unrelated 11-block sequence: active 11 + 1 = 12, nothing pending → B = 8 + 12 = 20.
 *   A was just sent R1 (same prefix); its prefill is running, no KV event yet:
 *     indexed 0, in-flight 6 → cached 6; pending 8; active 8 + 1 = 9
 *     A = max(0, 8 + 8 − 6) + 9 = 19 → A wins (without the credit: 16 + 9 = 25, B would win and
 *     the group would be split over two workers).
 *   R2 is booked on A with overlap 6, so A's pending prefill grows by 8 − 6 = 2, not 8.
 */
import { describe, expect, it } from 'vitest';
import { ActiveSequences } from '../../router/active-sequences.js';
import { blockHashes } from '../../router/hashing.js';
import { KvRouter, type RouteResult, type WorkerCandidate } from '../../router/kv-router.js';
import { FakeKvWorker, prompt, tokens } from './fixtures.js';

const BS = 16;
const AB: WorkerCandidate[] = [{ instanceId: 'a' }, { instanceId: 'b' }];
/** 6-block shared system prefix + 2 private blocks (seeded by `n`). */
const groupPrompt = (n: number) => prompt(42, 6 * BS, n, 2 * BS);

function routed(r: RouteResult) {
  if (r.kind !== 'routed') throw new Error(`expected routed, got ${r.kind}`);
  return r.decision;
}

function emptyRouter(): KvRouter {
  const router = new KvRouter({ blockSize: BS });
  for (const id of ['a', 'b']) {
    router.addWorker(id, 0);
    router.applyDump(new FakeKvWorker(id, BS).dump(), 0);
  }
  return router;
}

describe('in-flight prefix credit: cached_blocks = max(indexed, in-flight)', () => {
  it('worked example: A (R1 still prefilling the prefix) = 8 + 8 − 6 + 9 = 19 beats B (busy decoding) = 8 + 12 = 20', () => {
    const router = emptyRouter();
    routed(router.route({ requestId: 'other', tokens: tokens(5, 11 * BS) }, [{ instanceId: 'b' }], 0));
    router.onFirstToken('other', 0);
    routed(router.route({ requestId: 'r1', tokens: groupPrompt(1) }, [{ instanceId: 'a' }], 0));

    const d = routed(router.route({ requestId: 'r2', tokens: groupPrompt(2) }, AB, 1));
    const [a, b] = d.costs;
    expect(a).toMatchObject({ indexedBlocks: 0, inflightBlocks: 6, cachedBlocks: 6, pendingPrefillBlocks: 8, activeDecodeBlocks: 9, prefillBlocks: 10, cost: 19 });
    expect(b).toMatchObject({ cachedBlocks: 0, pendingPrefillBlocks: 0, activeDecodeBlocks: 12, cost: 20 });
    expect(d.instanceId).toBe('a');
    expect(d.overlapBlocks).toBe(6);
    // R2 adds only its 2 uncached blocks to A's queued prefill; its 2 private blocks + tail to active.
    expect(router.workerLoad('a')).toMatchObject({ activeSequences: 2, pendingPrefillBlocks: 8 + 2, activeBlocks: 6 + 2 + 2 + 2 });
  });

  it('without a booking on A (R1 finished and its blocks were never announced) A gets no credit and B wins', () => {
    const router = emptyRouter();
    routed(router.route({ requestId: 'other', tokens: tokens(5, 11 * BS) }, [{ instanceId: 'b' }], 0));
    router.onFirstToken('other', 0);
    routed(router.route({ requestId: 'r1', tokens: groupPrompt(1) }, [{ instanceId: 'a' }], 0));
    router.onFinished('r1', 1);
    const d = routed(router.select({ requestId: 'r2', tokens: groupPrompt(2) }, AB));
    expect(d.costs.map((c) => [c.inflightBlocks, c.cost])).toEqual([
      [0, 8],
      [0, 20],
    ]);
    expect(d.instanceId).toBe('a'); // idle A (8) still beats busy B (20): plain load
  });

  it('the larger source wins, never the sum: indexed 4 and in-flight 6 → cached 6', () => {
    const router = emptyRouter();
    const worker = new FakeKvWorker('a', BS);
    router.applyEvent(worker.store(groupPrompt(3).slice(0, 4 * BS))!, 0);
    routed(router.route({ requestId: 'r1', tokens: groupPrompt(1) }, [{ instanceId: 'a' }], 0));
    const d = routed(router.select({ requestId: 'r2', tokens: groupPrompt(2) }, AB));
    expect(d.costs[0]).toMatchObject({ indexedBlocks: 4, inflightBlocks: 6, cachedBlocks: 6 });
  });

  it('a burst of one group settles on one worker while the other is equally idle', () => {
    const router = emptyRouter();
    // B carries one unrelated prefilled 10-block sequence (B = 8 + 11 = 19), A nothing: the
    // group's first request goes to A (8), and every later one follows it although no event has
    // come yet: the i-th costs A max(0, 8 − 6) + (6 + 2i + i) = 8 + 3i ≤ 17 < 19.
    routed(router.route({ requestId: 'other', tokens: tokens(6, 10 * BS) }, [{ instanceId: 'b' }], 0));
    router.onFirstToken('other', 0);
    const picks: string[] = [];
    for (let i = 0; i < 4; i++) {
      const d = routed(router.route({ requestId: `g${i}`, tokens: groupPrompt(i) }, AB, i));
      picks.push(d.instanceId);
      expect(d.costs.map((c) => c.cost)).toEqual([i === 0 ? 8 : 8 + 3 * i, 19]);
      router.onFirstToken(`g${i}`, i); // prefill done, KV events still in flight
    }
    expect(picks).toEqual(['a', 'a', 'a', 'a']);
    expect(router.workerLoad('a').activeBlocks).toBe(6 + 4 * 2 + 4);
  });
});

describe('ActiveSequences.sharedPrefixBlocks', () => {
  const seqOf = (p: number[]) => blockHashes(p, BS).seq;

  it('counts the leading blocks some active sequence on that worker holds', () => {
    const s = new ActiveSequences({ blockSize: BS, ttlMs: 1000 });
    const p1 = prompt(1, 10 * BS, 1, 3 * BS); // 13 blocks
    s.apply({ type: 'add', requestId: 'r1', workerId: 'w', blockHashes: seqOf(p1), promptTokens: p1.length, overlapBlocks: 0 }, 0);
    for (let n = 0; n <= 12; n++) {
      // A request sharing the first n blocks of p1, then its own.
      const q = [...p1.slice(0, n * BS), ...tokens(900 + n, 5 * BS)];
      expect(s.sharedPrefixBlocks('w', seqOf(q))).toBe(n);
    }
    expect(s.sharedPrefixBlocks('w', seqOf(p1))).toBe(13);
    expect(s.sharedPrefixBlocks('w', seqOf(p1.slice(0, 7 * BS)))).toBe(7);
    expect(s.sharedPrefixBlocks('other', seqOf(p1))).toBe(0);
    expect(s.sharedPrefixBlocks('w', [])).toBe(0);
  });

  it('takes the longest of several sequences and forgets a freed one', () => {
    const s = new ActiveSequences({ blockSize: BS, ttlMs: 1000 });
    const long = prompt(2, 9 * BS, 1, 1 * BS);
    const short = [...long.slice(0, 3 * BS), ...tokens(77, 4 * BS)];
    s.apply({ type: 'add', requestId: 'short', workerId: 'w', blockHashes: seqOf(short), promptTokens: short.length, overlapBlocks: 0 }, 0);
    s.apply({ type: 'add', requestId: 'long', workerId: 'w', blockHashes: seqOf(long), promptTokens: long.length, overlapBlocks: 0 }, 0);
    expect(s.sharedPrefixBlocks('w', seqOf(long))).toBe(10);
    s.apply({ type: 'free', requestId: 'long' }, 1);
    expect(s.sharedPrefixBlocks('w', seqOf(long))).toBe(3);
  });
});
