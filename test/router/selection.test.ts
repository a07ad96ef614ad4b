/**
 * Selection as documentation. Every example uses block_size 16 and the docs/design.md cost
 *   cost = prefill_load_scale × max(0, new_prefill_blocks − overlap_credit × cached_blocks) + active_decode_blocks
 * with new_prefill_blocks = request_blocks + the worker's pending prefill blocks.
 */
import { describe, expect, it } from 'vitest';
import type { LoadMetrics } from '../../proto/wire.js';
import { workerCost } from '../../router/cost.js';
import { KvRouter, type KvRouterConfig, type RouteResult } from '../../router/kv-router.js';
import { SeededRandom } from '../../runtime/random.js';
import { lowestCostIndex, softmaxIndex, softmaxProbabilities } from '../../router/selector.js';
import { FakeKvWorker, tokens } from './fixtures.js';

const BS = 16;
const request = tokens(7, 8 * BS); // 128 tokens = 8 blocks

/** A router whose index knows each worker's cached prompts (loaded through dumps). */
function routerWith(cached: Record<string, number[][]>, config: Partial<KvRouterConfig> = {}): KvRouter {
  const router = new KvRouter({ blockSize: BS, ...config });
  for (const [id, prompts] of Object.entries(cached)) {
    const worker = new FakeKvWorker(id, BS);
    for (const p of prompts) worker.store(p);
    router.addWorker(id, 0);
    router.applyDump(worker.dump(), 0);
  }
  return router;
}

const load = (workerId: string, kvUsage: number): LoadMetrics => ({
  workerId,
  numRunning: 0,
  numWaiting: 0,
  kvUsage,
  activeBlocks: 0,
  totalBlocks: 1000,
  queuedPrefillTokens: 0,
  timestampMs: 0,
});

function routed(r: RouteResult) {
  if (r.kind !== 'routed') throw new Error(`expected routed, got ${r.kind}`);
  return r.decision;
}

describe('cost formula, worked by hand', () => {
  it('scale 2, credit 1: 2 × max(0, 8 + 10 − 6) + 11 = 35', () => {
    const row = workerCost(8, { instanceId: 'a', cachedBlocks: 6, pendingPrefillBlocks: 10, activeDecodeBlocks: 11 }, { prefillLoadScale: 2, overlapScoreCredit: 1 });
    expect(row).toMatchObject({ newPrefillBlocks: 18, prefillBlocks: 12, cost: 35 });
  });

  it('credit 0.5 halves what a cache hit is worth: 2 × (18 − 3) + 11 = 41', () => {
    expect(workerCost(8, { instanceId: 'a', cachedBlocks: 6, pendingPrefillBlocks: 10, activeDecodeBlocks: 11 }, { prefillLoadScale: 2, overlapScoreCredit: 0.5 }).cost).toBe(41);
  });

  it('the prefill term never goes negative: credit 2 × 6 cached > 8 blocks → cost = active only', () => {
    expect(workerCost(8, { instanceId: 'a', cachedBlocks: 6, pendingPrefillBlocks: 0, activeDecodeBlocks: 3 }, { prefillLoadScale: 1, overlapScoreCredit: 2 }).cost).toBe(3);
  });
});

describe('selector', () => {
  it('overlap wins when load is equal: A (6 of 8 blocks cached) costs 2, B costs 8', () => {
    const router = routerWith({ a: [request.slice(0, 6 * BS)], b: [] });
    const d = routed(router.select({ requestId: 'r', tokens: request }, [{ instanceId: 'a' }, { instanceId: 'b' }]));
    expect(d.instanceId).toBe('a');
    expect(d.overlapBlocks).toBe(6);
    expect(d.costs.map((c) => [c.instanceId, c.cost])).toEqual([
      ['a', 8 - 6 + 0],
      ['b', 8 - 0 + 0],
    ]);
  });

  it('load beats overlap: A also decodes 20 blocks, so A = 2 + 20 = 22 loses to B = 8', () => {
    const router = routerWith({ a: [request.slice(0, 6 * BS)], b: [] });
    // 19 full blocks on A (304 tokens): active = 19 distinct + 1 private = 20; prefill done.
    routed(router.route({ requestId: 'busy', tokens: tokens(99, 19 * BS) }, [{ instanceId: 'a' }], 0));
    router.onFirstToken('busy', 1);
    const d = routed(router.select({ requestId: 'r', tokens: request }, [{ instanceId: 'a' }, { instanceId: 'b' }]));
    expect(d.costs.map((c) => c.cost)).toEqual([22, 8]);
    expect(d.instanceId).toBe('b');
  });

  it('pending prefill counts: A has 10 blocks queued for prefill, so A = 8 + 10 − 6 + 11 = 23 loses to B = 8', () => {
    const router = routerWith({ a: [request.slice(0, 6 * BS)], b: [] });
    routed(router.route({ requestId: 'queued', tokens: tokens(98, 10 * BS) }, [{ instanceId: 'a' }], 0));
    const d = routed(router.select({ requestId: 'r', tokens: request }, [{ instanceId: 'a' }, { instanceId: 'b' }]));
    expect(d.costs[0]).toMatchObject({ pendingPrefillBlocks: 10, activeDecodeBlocks: 11, cost: 23 });
    expect(d.instanceId).toBe('b');
  });

  it('overloaded worker loses despite cache hit (A costs 2 but reports 97% KV usage)', () => {
    const router = routerWith({ a: [request.slice(0, 6 * BS)], b: [] });
    const d = routed(router.select({ requestId: 'r', tokens: request }, [{ instanceId: 'a', load: load('a', 0.97) }, { instanceId: 'b', load: load('b', 0.5) }]));
    expect(d.instanceId).toBe('b');
    expect(d.costs[0]).toMatchObject({ cost: 2, overloaded: true });
  });

  it('booked blocks count toward the threshold before the worker reports them', () => {
    const router = routerWith({ a: [], b: [] });
    // 100 blocks of 100 total booked on A → estimated usage 1.0 ≥ 0.95
    routed(router.route({ requestId: 'big', tokens: tokens(5, 99 * BS) }, [{ instanceId: 'a', totalBlocks: 100 }], 0));
    const d = routed(router.select({ requestId: 'r', tokens: request }, [{ instanceId: 'a', totalBlocks: 100 }, { instanceId: 'b', totalBlocks: 100 }]));
    expect(d.instanceId).toBe('b');
  });

  it('all workers over threshold, no refusal set → the least-bad one gets it (saturated), as round-robin would queue it', () => {
    // A caches 6 of 8 blocks (cost 2), B nothing (cost 8): both report ≥ 95%, A still wins.
    const router = routerWith({ a: [request.slice(0, 6 * BS)], b: [] });
    const d = routed(router.route({ requestId: 'r', tokens: request }, [{ instanceId: 'a', load: load('a', 0.99) }, { instanceId: 'b', load: load('b', 0.96) }], 0));
    expect(d).toMatchObject({ instanceId: 'a', saturated: true });
    expect(d.costs.map((c) => c.overloaded)).toEqual([true, true]);
    expect(router.stats()).toMatchObject({ activeSequences: 1, allBusy: 0, saturated: 1 });
    expect(router.route({ requestId: 'r2', tokens: request }, [], 0)).toEqual({ kind: 'no_candidates' });
  });

  it('opt-in refusal (busy threshold 0.9): every worker reporting ≥ 0.9 → all_busy with a Retry-After hint, nothing booked', () => {
    const router = routerWith({ a: [], b: [] }, { busyRetryAfterMs: 750, refusal: { kvUsage: 0.9 } });
    const both = [{ instanceId: 'a', load: load('a', 0.99) }, { instanceId: 'b', load: load('b', 0.92) }];
    expect(router.route({ requestId: 'r', tokens: request }, both, 0)).toMatchObject({ kind: 'all_busy', retryAfterMs: 750 });
    expect(router.stats()).toMatchObject({ activeSequences: 0, allBusy: 1 });
    // One at 0.85: below the refusal bound, but over --router-max-kv-usage? No (0.85 < 0.95): it takes it.
    const d = routed(router.route({ requestId: 'r', tokens: request }, [both[0]!, { instanceId: 'b', load: load('b', 0.85) }], 0));
    expect(d.instanceId).toBe('b');
    // A pinned request is booked wherever it went, refusal or not.
    expect(routed(router.select({ requestId: 'p', tokens: request }, [both[0]!], { pinned: true })).instanceId).toBe('a');
  });

  it('decode leg after remote prefill gets no overlap credit', () => {
    const router = routerWith({ a: [request.slice(0, 6 * BS)], b: [] });
    const d = routed(router.select({ requestId: 'r', tokens: request, noOverlapCredit: true }, [{ instanceId: 'a' }, { instanceId: 'b' }]));
    expect(d.costs.map((c) => c.cost)).toEqual([8, 8]);
  });

  it('select books nothing; admit books once; onFinished rolls back', () => {
    const router = routerWith({ a: [] });
    const d = routed(router.select({ requestId: 'r', tokens: request }, [{ instanceId: 'a' }]));
    expect(router.workerLoad('a').activeSequences).toBe(0);
    expect(router.admit(d, 0)).toMatchObject({ type: 'add', requestId: 'r', workerId: 'a' });
    expect(router.admit(d, 0)).toBeUndefined();
    expect(router.workerLoad('a')).toMatchObject({ activeSequences: 1, activeBlocks: 9, pendingPrefillBlocks: 8 });
    expect(router.onFinished('r', 1)).toEqual({ type: 'free', requestId: 'r' });
    expect(router.workerLoad('a').activeSequences).toBe(0);
  });
});

describe('tie-break and temperature', () => {
  it('exact ties are broken at random, reproducibly from the seed', () => {
    const pick = (seed: number) => {
      const rng = new SeededRandom(seed);
      return Array.from({ length: 1000 }, () => lowestCostIndex([5, 3, 3, 9], rng));
    };
    const picks = pick(42);
    expect(picks).toEqual(pick(42));
    expect(new Set(picks)).toEqual(new Set([1, 2]));
    const ones = picks.filter((i) => i === 1).length;
    expect(ones).toBeGreaterThan(420);
    expect(ones).toBeLessThan(580);
  });

  it('softmax over normalized costs: [0, 10] at T = 1 → p = [1, e⁻¹] / (1 + e⁻¹) = [0.731, 0.269]', () => {
    const p = softmaxProbabilities([0, 10], 1);
    expect(p[0]).toBeCloseTo(1 / (1 + Math.exp(-1)), 6);
    expect(p[0]).toBeCloseTo(0.7311, 4);
    const rng = new SeededRandom(7);
    let first = 0;
    for (let i = 0; i < 4000; i++) if (softmaxIndex([0, 10], 1, rng) === 0) first++;
    expect(first / 4000).toBeGreaterThan(0.7);
    expect(first / 4000).toBeLessThan(0.76);
  });

  it('normalization makes the temperature scale-free: [0, 1000] behaves like [0, 10]', () => {
    expect(softmaxProbabilities([0, 1000], 1)).toEqual(softmaxProbabilities([0, 10], 1));
    expect(softmaxProbabilities([4, 4, 4], 0.5)).toEqual([1 / 3, 1 / 3, 1 / 3]);
  });

  it('a low temperature approaches argmin, a high one approaches uniform', () => {
    expect(softmaxProbabilities([0, 5, 10], 0.01)[0]).toBeGreaterThan(0.999);
    const hot = softmaxProbabilities([0, 5, 10], 100);
    expect(Math.max(...hot) - Math.min(...hot)).toBeLessThan(0.01);
  });
});
