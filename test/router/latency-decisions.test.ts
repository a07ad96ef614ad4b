/**
 * Decisions of `--router-cost latency`, table-driven, each worked by hand (Dynamo's polynomial:
 * prefillMs(t) = 4.21e-7·t² + 0.01518·t + 16.50; decodeMs(p) = −25.74p² + 54.01p + 5.74;
 * itlWeight 1, block size 16, idle decode step 5.74 ms).
 *
 * Workers: `fast` (calibrated TTFT ratio 1) and `slow` (ratio 2: every measured TTFT twice the
 * model's). Request: 2048 tokens.
 *
 *   equal cache, both idle     fast = 49.37 + 5.74 = 55.1;  slow = 2·49.37 + 5.74 = 104.5  → fast
 *   slow caches 1920 of 2048   slow = 2·prefillMs(128) + 5.74 = 2·18.45 + 5.74 = 42.6 < 55.1 → slow
 *   … and slow has 6144 tokens queued: the running step holds them (¾ of it is left), and the
 *   queued sequence will be decoding by our step (D = 1: +5.74 per step, ITL impact 2·5.74 − 5.74):
 *                              slow = 2·(0.75·(prefillMs(6144) + 5.74) + prefillMs(128) + 5.74) + 5.74
 *                                   = 2·(0.75·131.4 + 24.19) + 5.74 = 251.2 > 55.1 → fast
 *   … with only 512 queued:    slow = 2·(0.75·30.12 + 24.19) + 5.74 = 99.3 > 55.1 → fast;
 *                              even 128 queued: 2·(0.75·24.19 + 24.19) + 5.74 = 90.4 → fast:
 *                              on a 2× slow worker the saving (49.4 − 36.9 = 12.5 ms) is worth
 *                              less than any queue at all.
 *   blocks cost, equal cache   both 128 blocks: a tie, broken at random (it cannot see speed).
 */
import { describe, expect, it } from 'vitest';
import { KvRouter, type RouteResult, type WorkerCandidate } from '../../router/kv-router.js';
import { prompt, tokens } from './fixtures.js';

const BS = 16;
const FAST_SLOW: WorkerCandidate[] = [{ instanceId: 'fast' }, { instanceId: 'slow' }];

function routed(r: RouteResult) {
  if (r.kind !== 'routed') throw new Error(`expected routed, got ${r.kind}`);
  return r.decision;
}

interface Setup {
  cost?: 'blocks' | 'latency';
  /** Tokens of the request's 2048-token prompt that `slow` holds (learned from a past request). */
  slowCached?: number;
  /** Prompt tokens queued on `slow` (booked, first token not back). */
  slowQueued?: number;
  itlTargetMs?: number;
  itlWeight?: number;
  /** Calibrated TTFT ratio of `slow` (default 2). */
  slowRatio?: number;
  /** Sequences decoding on `fast` (booked, prefilled). */
  fastDecoding?: number;
}

/** A router with `slow` calibrated to 2× the model; the rest as `s` says. */
function setUp(s: Setup): KvRouter {
  const router = new KvRouter({
    blockSize: BS,
    useKvEvents: false, // approximate mode: a routed prefix is cached where it went
    cost: s.cost ?? 'latency',
    latency: { ...(s.itlTargetMs !== undefined ? { itlTargetMs: s.itlTargetMs } : {}), ...(s.itlWeight !== undefined ? { itlWeight: s.itlWeight } : {}) },
  });
  if (s.slowCached !== undefined) {
    const past = routed(router.route({ requestId: 'past', tokens: prompt(1, s.slowCached, 99, 64) }, [{ instanceId: 'slow' }], 0));
    router.onFirstToken(past.requestId, 1);
    router.onFinished(past.requestId, 2);
  }
  if (s.slowQueued !== undefined) routed(router.route({ requestId: 'queued', tokens: tokens(500, s.slowQueued) }, [{ instanceId: 'slow' }], 3));
  for (let i = 0; i < (s.fastDecoding ?? 0); i++) {
    const d = routed(router.route({ requestId: `dec${i}`, tokens: tokens(600 + i, 256) }, [{ instanceId: 'fast' }], 4));
    router.onFirstToken(d.requestId, 5);
  }
  // The bookings above were timed arbitrarily: start calibration afresh, slow at 2×.
  for (const id of ['fast', 'slow']) router.latency?.calibration.removeWorker(id);
  for (let i = 0; i < 40; i++) router.latency?.calibration.observe('slow', 'ttft', 10, 10 * (s.slowRatio ?? 2), 10);
  return router;
}

const request = (cachedPrefix: number) => ({ requestId: 'r', tokens: prompt(1, cachedPrefix, 7, 2048 - cachedPrefix) });

describe('--router-cost latency decisions', () => {
  const table: Array<{ name: string; setup: Setup; cachedPrefix: number; winner: string; slowMs?: number; fastMs?: number }> = [
    { name: 'equal cache: the faster worker wins', setup: {}, cachedPrefix: 0, winner: 'fast', fastMs: 55.1, slowMs: 104.5 },
    { name: 'long cached prefix on the slow worker, no queue: the saving wins', setup: { slowCached: 1920 }, cachedPrefix: 1920, winner: 'slow', slowMs: 42.6, fastMs: 55.1 },
    { name: 'long cached prefix on the slow worker behind a 6144-token queue: the queue loses', setup: { slowCached: 1920, slowQueued: 6144 }, cachedPrefix: 1920, winner: 'fast', slowMs: 251.2 },
    { name: 'long cached prefix on the slow worker behind a 512-token queue: still the queue loses', setup: { slowCached: 1920, slowQueued: 512 }, cachedPrefix: 1920, winner: 'fast', slowMs: 99.3 },
  ];
  for (const row of table) {
    it(row.name, () => {
      const router = setUp(row.setup);
      const d = routed(router.route(request(row.cachedPrefix), FAST_SLOW, 10));
      expect(d.instanceId).toBe(row.winner);
      const cost = (id: string) => d.costs.find((c) => c.instanceId === id)!;
      if (row.fastMs !== undefined) expect(cost('fast').cost).toBeCloseTo(row.fastMs, 0);
      if (row.slowMs !== undefined) expect(cost('slow').cost).toBeCloseTo(row.slowMs, 0);
      // Every cost row carries what it predicted.
      for (const c of d.costs) expect(c.latency).toMatchObject({ ttftMs: expect.any(Number), itlMs: expect.any(Number), overTarget: false });
    });
  }

  it('the blocks cost cannot tell the two apart at equal cache (a coin flip), the latency cost always can', () => {
    const winners = new Set<string>();
    for (let seed = 0; seed < 16; seed++) {
      const router = new KvRouter({ blockSize: BS, seed });
      winners.add(routed(router.route(request(0), FAST_SLOW, 10)).instanceId);
    }
    expect(winners).toEqual(new Set(['fast', 'slow']));
    for (let seed = 0; seed < 16; seed++) expect(routed(setUp({}).route(request(0), FAST_SLOW, 10)).instanceId).toBe('fast');
  });

  it('an ITL target makes a worker over it ineligible while another is within it; with none within, the lowest cost wins', () => {
    // Scored on TTFT alone (itlWeight 0), slow at 4×. fast decodes 12 streams of 256-token
    // prompts (17 blocks each) in a 430-block pool, which holds them, the 8 blocks each will
    // add as it decodes (128 output tokens) and this request's 129: no KV wait. KV use
    // 204/430 = 0.47, 0.77 after this request's 128 blocks, so its predicted ITL is
    // decodeMs(0.77) = 32.1 ms; slow is idle (5.74).
    // TTFT: fast = 0.75·25.6 + 49.4 + 25.6 = 94.1; slow = 4·49.4 = 197.5.
    const pools = (fastBlocks: number): WorkerCandidate[] => [{ instanceId: 'fast', totalBlocks: fastBlocks }, { instanceId: 'slow', totalBlocks: 100_000 }];
    const base = { fastDecoding: 12, itlWeight: 0, slowRatio: 4 };
    const noTarget = setUp(base);
    const free = routed(noTarget.route(request(0), pools(430), 10));
    const fastRow = free.costs.find((c) => c.instanceId === 'fast')!;
    const slowRow = free.costs.find((c) => c.instanceId === 'slow')!;
    expect(fastRow.latency!.itlMs).toBeGreaterThan(30);
    expect(slowRow.latency!.itlMs).toBeLessThan(10);
    expect(fastRow.latency!.kvWaitMs).toBe(0);
    expect(fastRow.cost).toBeCloseTo(94.1, 0);
    expect(free.instanceId).toBe('fast');

    const sla = setUp({ ...base, itlTargetMs: 20 });
    const d = routed(sla.route(request(0), pools(430), 10));
    expect(d.costs.find((c) => c.instanceId === 'fast')!.latency!.overTarget).toBe(true);
    expect(d.instanceId).toBe('slow');

    const tight = setUp({ ...base, itlTargetMs: 1 });
    const all = routed(tight.route(request(0), pools(430), 10));
    expect(all.costs.every((c) => c.latency!.overTarget)).toBe(true);
    expect(all.instanceId).toBe('fast');
  });

  it('a worker whose KV pool would make the request wait is charged 5× its predicted wait: a 1-stream worker loses to a 5× slower one with room, a 6-stream one beats an 8× slower one', () => {
    // fast: a 153-block pool holding a 17-block stream that will add 8 blocks as it decodes
    // (128 output tokens) → this 2048-token request (128 + 1 blocks) is 1 block short and
    // would wait for KV; slow has room. The predicted wait alone
    // reads short (the drain model's waits run 2–5× long), so it counts KV_WAIT_PESSIMISM (5)
    // times: fast cost = TTFT + 4 × wait + ITL impact.
    const pick = (fastDecoding: number, slowRatio: number) => {
      const pools: WorkerCandidate[] = [{ instanceId: 'fast', totalBlocks: fastDecoding * (17 + 8) + 128 }, { instanceId: 'slow', totalBlocks: 100_000 }];
      const d = routed(setUp({ fastDecoding, slowRatio }).route(request(0), pools, 10));
      const fast = d.costs.find((c) => c.instanceId === 'fast')!;
      const slow = d.costs.find((c) => c.instanceId === 'slow')!;
      expect(fast.latency!.kvWaitMs).toBeGreaterThan(0);
      expect(slow.latency!.kvWaitMs).toBe(0);
      expect(fast.cost).toBeCloseTo(fast.latency!.ttftMs + 4 * fast.latency!.kvWaitMs + fast.latency!.itlImpactMs, 6);
      return { d, fast, slow };
    };
    // One 17-block stream: a predicted 86 ms wait → fast costs 556 ms against the 5× slower
    // worker's 252: slow. Its plain prediction would have been the lower one.
    const one = pick(1, 5);
    expect(one.fast.latency!.ttftMs + one.fast.latency!.itlImpactMs).toBeLessThan(one.slow.cost);
    expect(one.d.instanceId).toBe('slow');
    // Six streams: the same 1-block shortfall drains in a predicted 28 ms → fast costs 324 ms and
    // beats a worker 8× slower (400 ms). The old rule left fast out whenever anyone had room,
    // which made the latency cost count blocks again in the middle band.
    const six = pick(6, 8);
    expect(six.fast.cost).toBeLessThan(six.slow.cost);
    expect(six.d.instanceId).toBe('fast');
  });

  it('calibration follows the requests it routed: first token and stream end feed TTFT and ITL ratios', () => {
    const router = new KvRouter({ blockSize: BS, cost: 'latency' });
    const d = routed(router.route(request(0), [{ instanceId: 'w' }], 1000));
    const predicted = d.costs[0]!.latency!.ttftMs;
    router.onFirstToken('r', 1000 + 2 * predicted);
    expect(router.latency!.calibration.of('w', 1000 + 2 * predicted).ttftRatio).toBeCloseTo(2 ** 0.2, 6);
    router.onFinished('r', 1000 + 2 * predicted + 11 * 4 * d.costs[0]!.latency!.itlMs, 12);
    expect(router.latency!.calibration.of('w', 1000 + 2 * predicted).itlRatio).toBeCloseTo(4 ** 0.2, 6);
    expect(router.latency!.pendingCount).toBe(0);
  });

  it('a request predicted to wait for KV does not calibrate TTFT: it measures the queueing model, not the worker', () => {
    const router = new KvRouter({ blockSize: BS, cost: 'latency' });
    const w: WorkerCandidate[] = [{ instanceId: 'w', totalBlocks: 140 }];
    routed(router.route({ requestId: 'held', tokens: tokens(5, 256) }, w, 0)); // 17 blocks held
    const d = routed(router.route(request(0), w, 1)); // needs 129 more: 6 short
    expect(d.costs[0]!.latency!.kvWaitMs).toBeGreaterThan(0);
    router.onFirstToken('r', 1 + 10 * d.costs[0]!.latency!.ttftMs);
    expect(router.latency!.calibration.of('w', 2000).ttftSamples).toBe(0);
  });
});
