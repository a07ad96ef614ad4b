/**
 * Prefix affinity (router/prefix-affinity.ts): a follow-up turn goes to the worker holding its
 * prefix in any tier unless that worker is truly overloaded (over its load threshold, out of KV
 * room while holding less than half the prompt, or past 2× the mean load of the workers that do
 * not hold it), and the cost rows say which. The worked example of the
 * file comment, then the rule inside `KvRouter.select` on host-tier holdings.
 */
import { describe, expect, it } from 'vitest';
import type { CostRow } from '../../router/cost.js';
import type { LoadMetrics } from '../../proto/wire.js';
import { KvRouter, type RouteResult } from '../../router/kv-router.js';
import { DEFAULT_PREFIX_AFFINITY, affinityPool, markHolders } from '../../router/prefix-affinity.js';
import { blockHashes } from '../../router/hashing.js';
import { FakeKvWorker, tokens } from './fixtures.js';

const BS = 16;

function row(instanceId: string, o: Partial<CostRow>): CostRow {
  return { instanceId, cachedBlocks: 0, pendingPrefillBlocks: 0, activeDecodeBlocks: 0, newPrefillBlocks: 0, prefillBlocks: 0, cost: 0, overloaded: false, ...o };
}

describe('prefix affinity, worked example (100-block prompt, share 0.3, 400-block pools)', () => {
  const rows = (aActive: number) => [
    row('A', { hostBlocks: 60, activeDecodeBlocks: aActive, cost: 40 + aActive }),
    row('B', { activeDecodeBlocks: 100, pendingPrefillBlocks: 20, cost: 220 }),
    row('C', { activeDecodeBlocks: 110, cost: 210 }),
  ];
  const views = (aActive: number) => [
    { totalBlocks: 400, usedBlocks: aActive },
    { totalBlocks: 400, usedBlocks: 100 },
    { totalBlocks: 400, usedBlocks: 110 },
  ];

  it("A holds 60 of 100 blocks; at load 250 > 2 × the others' mean 115 = 230 it is overloaded and the cost decides", () => {
    const r = rows(250);
    markHolders(r, views(250), 100, DEFAULT_PREFIX_AFFINITY);
    expect(r.map((x) => x.prefixHolder === true)).toEqual([true, false, false]);
    expect(r[0]!.kvRoomBlocks).toBe(400 - 250 - 40);
    expect(affinityPool([0, 1, 2], r, DEFAULT_PREFIX_AFFINITY)).toEqual([0, 1, 2]);
  });

  it('at load 230 ≤ 230 with room 130, A alone is the pool although its cost 270 > C 210', () => {
    const r = rows(230);
    markHolders(r, views(230), 100, DEFAULT_PREFIX_AFFINITY);
    expect(r[0]!.kvRoomBlocks).toBe(130);
    expect(affinityPool([0, 1, 2], r, DEFAULT_PREFIX_AFFINITY)).toEqual([0]);
  });

  it('no KV room for the 40 blocks it adds (used 370 of 400): holding 60% ≥ waitShare 0.5, A keeps it and waits for room', () => {
    const r = rows(230);
    markHolders(r, [{ totalBlocks: 400, usedBlocks: 370 }, ...views(230).slice(1)], 100, DEFAULT_PREFIX_AFFINITY);
    expect(r[0]).toMatchObject({ kvRoomBlocks: -10, waitsForRoom: true });
    expect(affinityPool([0, 1, 2], r, DEFAULT_PREFIX_AFFINITY)).toEqual([0]);
    // Without the waiver (the rule before), no room meant overloaded whatever the load ratio.
    const strict = { ...DEFAULT_PREFIX_AFFINITY, waitShare: undefined };
    const again = rows(230);
    markHolders(again, [{ totalBlocks: 400, usedBlocks: 370 }, ...views(230).slice(1)], 100, strict);
    expect(again[0]!.waitsForRoom).toBeUndefined();
    expect(affinityPool([0, 1, 2], again, strict)).toEqual([0, 1, 2]);
  });

  it('holding 40% (< waitShare) with no room → overloaded: the cost decides', () => {
    const r = [row('A', { hostBlocks: 40, activeDecodeBlocks: 230, cost: 290 }), ...rows(230).slice(1)];
    markHolders(r, [{ totalBlocks: 400, usedBlocks: 370 }, ...views(230).slice(1)], 100, DEFAULT_PREFIX_AFFINITY);
    expect(r[0]).toMatchObject({ prefixHolder: true, kvRoomBlocks: 400 - 370 - 60 });
    expect(r[0]!.waitsForRoom).toBeUndefined();
    expect(affinityPool([0, 1, 2], r, DEFAULT_PREFIX_AFFINITY)).toEqual([0, 1, 2]);
  });

  it('holding 29 of 100 blocks is below the 0.3 share: not a holder; share 0 turns the rule off', () => {
    const r = [row('A', { cachedBlocks: 29 }), row('B', {})];
    markHolders(r, [{ totalBlocks: 400, usedBlocks: 0 }, { totalBlocks: 400, usedBlocks: 0 }], 100, DEFAULT_PREFIX_AFFINITY);
    expect(r[0]!.prefixHolder).toBeUndefined();
    const held = [row('A', { cachedBlocks: 90 }), row('B', {})];
    const off = { ...DEFAULT_PREFIX_AFFINITY, minHeldShare: 0 };
    markHolders(held, [{ totalBlocks: 400, usedBlocks: 0 }, { totalBlocks: 400, usedBlocks: 0 }], 100, off);
    expect(held[0]!.prefixHolder).toBeUndefined();
    expect(affinityPool([0, 1], held, off)).toEqual([0, 1]);
  });
});

describe('prefix affinity under the latency cost: the bound grows from "no worse than an idle cold worker" to 1.5× the others\' mean cost', () => {
  // A 72-block prompt; A holds 48 blocks (67%). On an idle nominal worker the request costs
  // 30 ms with A's prefix (idleMs) and 42 ms with nothing held (coldMs): A's prefix saves 12.
  const latency = (idleMs: number, coldMs: number) => ({ ttftMs: 0, itlMs: 0, itlImpactMs: 0, kvWaitMs: 0, queuedTokens: 0, ttftRatio: 1, itlRatio: 1, overTarget: false, idleMs, coldMs });
  const policy = { ...DEFAULT_PREFIX_AFFINITY, maxLoadRatio: 1.5, load: 'cost' as const };
  const rows = (aCost: number, othersLoad: number) => [
    row('A', { cachedBlocks: 48, cost: aCost, latency: latency(30, 42) }),
    row('B', { cost: 42 + othersLoad, latency: latency(42, 42) }),
    row('C', { cost: 42 + othersLoad, latency: latency(42, 42) }),
  ];
  const pool = (aCost: number, othersLoad: number) => {
    const r = rows(aCost, othersLoad);
    markHolders(r, [{ totalBlocks: 1024, usedBlocks: 100 }, { totalBlocks: 1024, usedBlocks: 0 }, { totalBlocks: 1024, usedBlocks: 0 }], 72, policy);
    return affinityPool([0, 1, 2], r, policy);
  };

  it('others idle (load 0): A busy at 48 ms (load 18 > saved 12) is left to the cost, which starts the request on an idle worker', () => {
    expect(pool(48, 0)).toEqual([0, 1, 2]);
    // The bound before (1.5 × the others' mean cost 42 = 63) kept it on A.
    expect(48).toBeLessThanOrEqual(1.5 * 42);
  });

  it('others idle: A at 42 ms (no worse than an idle cold worker) keeps it', () => {
    expect(pool(42, 0)).toEqual([0]);
  });

  it('others at load 20: A keeps it up to 42 + 1.5·20 + 0.5·20 = 82 ms', () => {
    expect(pool(82, 20)).toEqual([0]);
    expect(pool(82.5, 20)).toEqual([0, 1, 2]);
  });

  it('others at load 60 ≥ cold: the bound is 1.5 × their mean cost (42 + 60) = 153 ms, as before', () => {
    expect(pool(153, 60)).toEqual([0]);
    expect(pool(153.5, 60)).toEqual([0, 1, 2]);
  });
});

/** A router that knows `holder` keeps `prompt`'s blocks in its host tier (medium 'cpu' events). */
function routerWithHostHolder(prompt: number[], holder: string, others: string[]): KvRouter {
  const router = new KvRouter({ blockSize: BS });
  for (const id of [holder, ...others]) {
    router.addWorker(id, 0);
    router.applyDump({ workerId: id, nextEventId: 0, events: [] }, 0);
  }
  const stored = new FakeKvWorker(holder, BS).store(prompt)!;
  router.applyEvent({ ...stored, data: { ...stored.data, medium: 'cpu' } as typeof stored.data }, 0);
  return router;
}

function routed(r: RouteResult) {
  if (r.kind !== 'routed') throw new Error(`expected routed, got ${r.kind}`);
  return r.decision;
}

describe('KvRouter with prefix affinity: a follow-up turn and its host-tier holder', () => {
  // The last turn left 48 blocks in A's host tier; the follow-up adds 12 new blocks.
  const history = tokens(5, 48 * BS);
  const followUp = [...history, ...tokens(6, 12 * BS)];

  it("goes to the holder although the holder's active blocks make its cost higher; the row says why", () => {
    const three = ['A', 'B', 'C'].map((id) => ({ instanceId: id, totalBlocks: 512 }));
    const busy = (router: KvRouter) => {
      // Other traffic: A decodes 100 blocks, B 30, C 80 (one private block each on top).
      for (const [id, n, seed] of [['A', 100, 7], ['B', 30, 8], ['C', 80, 9]] as const) {
        routed(router.route({ requestId: `busy-${id}`, tokens: tokens(seed, n * BS) }, [{ instanceId: id, totalBlocks: 512 }], 0));
        router.onFirstToken(`busy-${id}`, 0);
      }
    };
    const router = routerWithHostHolder(history, 'A', ['B', 'C']);
    expect(router.tiers.hits('A', blockHashes(followUp, BS).seq, 0)).toEqual({ hostBlocks: 48, diskBlocks: 0 });
    busy(router);
    // A has not reported its tier costs, so its host hits weigh the default 0.65:
    // A = 60 − 0.65 × 48 + 101 = 129.8, B = 60 + 31 = 91, C = 60 + 81 = 141. The others' loads
    // 31 and 81 average 56: A's 101 ≤ 2 × 56 = 112, with room 512 − 101 − 12 = 399 → A takes it.
    const d = routed(router.select({ requestId: 'turn2', tokens: followUp }, three));
    const [a, b] = ['A', 'B'].map((id) => d.costs.find((c) => c.instanceId === id)!);
    expect(a!.cost).toBeCloseTo(129.8, 5);
    expect(b!.cost).toBe(91);
    expect(d).toMatchObject({ instanceId: 'A', affinity: true });
    expect(a).toMatchObject({ prefixHolder: true, hostBlocks: 48, kvRoomBlocks: 399 });
    // Without the rule the cost decides: B.
    const plain = routerWithHostHolder(history, 'A', ['B', 'C']);
    (plain.config as { prefixAffinity: typeof DEFAULT_PREFIX_AFFINITY }).prefixAffinity = { ...DEFAULT_PREFIX_AFFINITY, minHeldShare: 0 };
    busy(plain);
    expect(routed(plain.select({ requestId: 'turn2', tokens: followUp }, three)).instanceId).toBe('B');
  });

  it('a holder past 2× the load of those without the prefix is truly overloaded: A at 101 blocks vs B at 31 (limit 62)', () => {
    const router = routerWithHostHolder(history, 'A', ['B']);
    for (const [id, n, seed] of [['A', 100, 7], ['B', 30, 8]] as const) {
      routed(router.route({ requestId: `busy-${id}`, tokens: tokens(seed, n * BS) }, [{ instanceId: id, totalBlocks: 512 }], 0));
      router.onFirstToken(`busy-${id}`, 0);
    }
    const d = routed(router.select({ requestId: 'turn2', tokens: followUp }, ['A', 'B'].map((id) => ({ instanceId: id, totalBlocks: 512 }))));
    expect(d.instanceId).toBe('B');
    expect(d.affinity).toBeUndefined();
  });

  it('a holder of less than half the prompt with no KV room for the new blocks is truly overloaded: the cost sends the turn elsewhere', () => {
    // A holds the 48-block history; this turn adds 60 new blocks (108 in all: A holds 44%).
    const longTurn = [...history, ...tokens(6, 60 * BS)];
    // A's pool is 240 blocks and 190 are booked: the 60 new ones do not fit (room −10). B
    // carries 100, so A's 190 ≤ 2 × 100 and the load bound alone would keep A. The cost prefers
    // B (A = 108 − 0.65 × 48 + 190 = 266.8, B = 108 + 100 = 208).
    const fill = (pool: number) => {
      const router = routerWithHostHolder(history, 'A', ['B']);
      routed(router.route({ requestId: 'fill-A', tokens: tokens(9, 189 * BS) }, [{ instanceId: 'A', totalBlocks: pool }], 0));
      routed(router.route({ requestId: 'fill-B', tokens: tokens(10, 99 * BS) }, [{ instanceId: 'B', totalBlocks: pool }], 0));
      for (const id of ['fill-A', 'fill-B']) router.onFirstToken(id, 0);
      return routed(router.select({ requestId: 'turn2', tokens: longTurn }, ['A', 'B'].map((id) => ({ instanceId: id, totalBlocks: pool }))));
    };
    const d = fill(240);
    expect(d.instanceId).toBe('B');
    expect(d.affinity).toBeUndefined();
    const a = d.costs.find((c) => c.instanceId === 'A')!;
    expect(a).toMatchObject({ prefixHolder: true, kvRoomBlocks: -10 });
    expect(a.cost).toBeCloseTo(266.8, 5);
    expect(d.costs.find((c) => c.instanceId === 'B')!.cost).toBe(208);
    expect(a.waitsForRoom).toBeUndefined();
    // The room is what decides: with 300-block pools A has room 50 and keeps the turn.
    expect(fill(300)).toMatchObject({ instanceId: 'A', affinity: true });
  });

  it('a holder of most of the prompt keeps the turn without KV room while its load is within the bound: it waits for blocks there', () => {
    // A holds 48 of the follow-up's 61 blocks (79%). A's pool: 160 blocks, 150 booked, no room
    // for 13 more; B carries 100 blocks, so A's 150 ≤ 2 × 100 and the load bound holds.
    const router = routerWithHostHolder(history, 'A', ['B']);
    routed(router.route({ requestId: 'fill-A', tokens: tokens(9, 149 * BS) }, [{ instanceId: 'A', totalBlocks: 160 }], 0));
    routed(router.route({ requestId: 'fill-B', tokens: tokens(10, 99 * BS) }, [{ instanceId: 'B', totalBlocks: 160 }], 0));
    const cands = ['A', 'B'].map((id) => ({ instanceId: id, totalBlocks: 160 }));
    const d = routed(router.select({ requestId: 'turn2', tokens: followUp }, cands));
    expect(d).toMatchObject({ instanceId: 'A', affinity: true });
    expect(d.costs.find((c) => c.instanceId === 'A')).toMatchObject({ prefixHolder: true, kvRoomBlocks: 160 - 150 - 12, waitsForRoom: true });
    // With the room rule for every holder the cost sends it to B.
    (router.config as { prefixAffinity: typeof DEFAULT_PREFIX_AFFINITY }).prefixAffinity = { ...DEFAULT_PREFIX_AFFINITY, waitShare: undefined };
    expect(routed(router.select({ requestId: 'turn2', tokens: followUp }, cands)).instanceId).toBe('B');
  });

  it('with every worker over its load threshold the turn waits wherever it goes: the holder takes it although it has no room', () => {
    // Both report 99% KV usage (over 0.95): the request is queued on one of them either way,
    // and on A its 48 blocks come back from the host tier when it starts. A: 150 of 160 booked
    // (room 160 − 158 reported − 12 < 0); B: 101 booked. Costs: A = 60 − 0.65 × 48 + 150 = 178.8,
    // B = 60 + 101 = 161; A's load 150 ≤ 2 × 101 → A (saturated, affinity).
    const full = (id: string): LoadMetrics => ({ workerId: id, numRunning: 4, numWaiting: 2, kvUsage: 0.99, activeBlocks: 158, totalBlocks: 160, queuedPrefillTokens: 0, timestampMs: 0 });
    const cands = ['A', 'B'].map((id) => ({ instanceId: id, totalBlocks: 160, load: full(id) }));
    const router = routerWithHostHolder(history, 'A', ['B']);
    routed(router.route({ requestId: 'fill-A', tokens: tokens(9, 149 * BS) }, [{ instanceId: 'A', totalBlocks: 160 }], 0));
    routed(router.route({ requestId: 'fill-B', tokens: tokens(10, 100 * BS) }, [{ instanceId: 'B', totalBlocks: 160 }], 0));
    for (const id of ['fill-A', 'fill-B']) router.onFirstToken(id, 0);
    const d = routed(router.select({ requestId: 'turn2', tokens: followUp }, cands));
    expect(d.costs.find((c) => c.instanceId === 'A')!.cost).toBeCloseTo(178.8, 5);
    expect(d.costs.find((c) => c.instanceId === 'B')!.cost).toBe(161);
    expect(d).toMatchObject({ instanceId: 'A', saturated: true, affinity: true });
  });
});
