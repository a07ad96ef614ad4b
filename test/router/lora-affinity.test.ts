/**
 * Multi-LoRA in the KV router (router/lora-affinity.ts): a worker without the request's adapter
 * pays its adapter load time, in blocks the perf model recomputes in that time (or in ms under
 * the latency cost), from what that worker measured and reported, else --router-lora-load-ms;
 * and a routed adapter request names a worker to load the adapter on ahead of need, by routing
 * intent (it would have won with half the penalty) or by popularity (share × workers holders).
 */
import { describe, expect, it } from 'vitest';
import type { LoadMetrics } from '../../proto/wire.js';
import { loraIdOf } from '../../router/hashing.js';
import { KvRouter, type RouteResult, type WorkerCandidate } from '../../router/kv-router.js';
import { LoraDemand, loraPrefetchTarget } from '../../router/lora-affinity.js';
import { idleReport, tokens } from './fixtures.js';

const BS = 16;
const A = loraIdOf('sql', '00112233aabbccdd');
const B = loraIdOf('chat', '00112233aabbccdd');
/** The default polynomial's marginal prefill cost of one 16-token block after 1024 tokens, ms. */
const MS_PER_BLOCK = 0.256843;

function routed(r: RouteResult) {
  if (r.kind !== 'routed') throw new Error(`expected routed, got ${r.kind}`);
  return r.decision;
}

function fleet(ids: string[], config: ConstructorParameters<typeof KvRouter>[0] = {}): KvRouter {
  const router = new KvRouter({ blockSize: BS, ...config });
  for (const w of ids) {
    router.addWorker(w, 0);
    router.applyDump({ workerId: w, nextEventId: 0, events: [] }, 0);
  }
  return router;
}

const report = (workerId: string, loraLoadMs?: number): LoadMetrics => idleReport(workerId, loraLoadMs !== undefined ? { loraLoadMs } : {});

describe('adapter load penalty from the load time', () => {
  const prompt = tokens(1, 8 * BS);

  it('--router-lora-load-ms 50 → a non-holder pays 50 / 0.2568 = 194.7 blocks; a worker that reports 20 ms pays 77.9', () => {
    const router = fleet(['w0', 'w1', 'w2']);
    const cands: WorkerCandidate[] = [{ instanceId: 'w0' }, { instanceId: 'w1' }, { instanceId: 'w2', load: report('w2', 20) }];
    const d = routed(router.select({ requestId: 'a', tokens: prompt, loraId: A, loraResident: ['w1'] }, cands));
    const cost = new Map(d.costs.map((r) => [r.instanceId, r.cost]));
    expect(d.instanceId).toBe('w1');
    expect(cost.get('w1')).toBe(8);
    expect(cost.get('w0')! - 8).toBeCloseTo(50 / MS_PER_BLOCK, 1);
    expect(cost.get('w2')! - 8).toBeCloseTo(20 / MS_PER_BLOCK, 1);
  });

  it('the holder keeps the request until its load outweighs a load: 150 booked blocks (> 117 for 30 ms) send it to the idle worker', () => {
    const router = fleet(['w0', 'w1'], { loraLoadMs: 30 });
    const cands: WorkerCandidate[] = [{ instanceId: 'w0' }, { instanceId: 'w1' }];
    // 100 blocks decoding on the holder: 8 + 101 = 109 < 8 + 116.8: it stays.
    routed(router.route({ requestId: 'busy1', tokens: tokens(2, 100 * BS) }, [{ instanceId: 'w1' }], 0));
    router.onFirstToken('busy1', 0);
    expect(routed(router.select({ requestId: 'b', tokens: prompt, loraId: A, loraResident: ['w1'] }, cands)).instanceId).toBe('w1');
    // 50 more: 8 + 152 = 160 > 124.8.
    routed(router.route({ requestId: 'busy2', tokens: tokens(3, 50 * BS) }, [{ instanceId: 'w1' }], 0));
    router.onFirstToken('busy2', 0);
    expect(routed(router.select({ requestId: 'c', tokens: prompt, loraId: A, loraResident: ['w1'] }, cands)).instanceId).toBe('w0');
  });

  it('under --router-cost latency the penalty is the load time itself, in ms', () => {
    const router = fleet(['w0', 'w1'], { cost: 'latency', loraLoadMs: 40 });
    const d = routed(router.select({ requestId: 'l', tokens: prompt, loraId: A, loraResident: ['w1'] }, [{ instanceId: 'w0' }, { instanceId: 'w1' }]));
    const rows = new Map(d.costs.map((r) => [r.instanceId, r]));
    expect(rows.get('w0')!.cost - rows.get('w1')!.cost).toBeCloseTo(40, 6);
  });
});

describe('adapter loads ahead of need', () => {
  const prompt = tokens(4, 8 * BS);

  it('routing intent: the holder is busier than an idle worker by less than a load → routed to the holder, the idle worker prefetches', () => {
    const router = fleet(['w0', 'w1'], { loraLoadMs: 50 });
    routed(router.route({ requestId: 'busy', tokens: tokens(5, 60 * BS) }, [{ instanceId: 'w1' }], 0));
    const d = routed(router.select({ requestId: 'p', tokens: prompt, loraId: A, loraResident: ['w1'] }, [{ instanceId: 'w0' }, { instanceId: 'w1' }]));
    // Holder: 8 + pending 60 + active 61 = 129; w0 without the penalty: 8 < 129, with it 8 + 194.7 > 129.
    expect(d.instanceId).toBe('w1');
    expect(d.loraPrefetch).toBe('w0');
  });

  it('an idle fleet with one holder and a rare adapter: no prefetch', () => {
    const router = fleet(['w0', 'w1', 'w2', 'w3']);
    const cands = ['w0', 'w1', 'w2', 'w3'].map((instanceId) => ({ instanceId }));
    // Mostly adapter B traffic; A is 1 request in 20 (share 0.05 → wants 1 holder, has 1).
    for (let i = 0; i < 19; i++) routed(router.select({ requestId: `b${i}`, tokens: prompt, loraId: B, loraResident: ['w0', 'w1', 'w2', 'w3'] }, cands));
    const d = routed(router.select({ requestId: 'a', tokens: prompt, loraId: A, loraResident: ['w2'] }, cands));
    expect(d.instanceId).toBe('w2');
    expect(d.loraPrefetch).toBeUndefined();
  });

  it('popularity: an adapter with 40% of recent adapter requests on 4 workers wants 2 holders; with 1 it prefetches', () => {
    const router = fleet(['w0', 'w1', 'w2', 'w3']);
    const cands = ['w0', 'w1', 'w2', 'w3'].map((instanceId) => ({ instanceId }));
    for (let i = 0; i < 6; i++) routed(router.select({ requestId: `b${i}`, tokens: prompt, loraId: B, loraResident: ['w0', 'w1', 'w2', 'w3'] }, cands));
    for (let i = 0; i < 3; i++) routed(router.select({ requestId: `a${i}`, tokens: prompt, loraId: A, loraResident: ['w2', 'w3'] }, cands));
    // Now A is 4 of 10 (0.4 × 4 = 1.6 → 2 holders); on one holder it asks for a second.
    const d = routed(router.select({ requestId: 'a-last', tokens: prompt, loraId: A, loraResident: ['w2'] }, cands));
    expect(d.instanceId).toBe('w2');
    expect(d.loraPrefetch).toBeDefined();
    expect(d.loraPrefetch).not.toBe('w2');
  });

  it('LoraDemand counts the last `window` requests only', () => {
    const demand = new LoraDemand(4);
    for (const id of [1, 1, 2, 2]) demand.note(id);
    expect(demand.share(1)).toBe(0.5);
    for (const id of [2, 2]) demand.note(id);
    expect(demand.share(1)).toBe(0);
    expect(demand.share(2)).toBe(1);
  });

  it('never a prefetch when the request goes to a non-holder (it loads anyway) or to an overloaded worker', () => {
    const row = (id: string, cost: number, overloaded = false) => ({ instanceId: id, cachedBlocks: 0, pendingPrefillBlocks: 0, activeDecodeBlocks: 0, newPrefillBlocks: 0, prefillBlocks: 0, cost, overloaded });
    expect(loraPrefetchTarget([row('h', 100), row('x', 10 + 50)], [0, 50], 1, 1, 0)).toBeUndefined();
    expect(loraPrefetchTarget([row('h', 100), row('x', 10 + 50, true)], [0, 50], 0, 1, 0)).toBeUndefined();
    expect(loraPrefetchTarget([row('h', 200), row('x', 10 + 200)], [0, 200], 0, 1, 0)).toBe('x');
  });

  it('routing intent needs the holder busier by half a load: 90 blocks of a 200-block load is not enough, 110 is', () => {
    const row = (id: string, cost: number) => ({ instanceId: id, cachedBlocks: 0, pendingPrefillBlocks: 0, activeDecodeBlocks: 0, newPrefillBlocks: 0, prefillBlocks: 0, cost, overloaded: false });
    expect(loraPrefetchTarget([row('h', 100), row('x', 10 + 200)], [0, 200], 0, 1, 0)).toBeUndefined();
    expect(loraPrefetchTarget([row('h', 120), row('x', 10 + 200)], [0, 200], 0, 1, 0)).toBe('x');
  });
});
