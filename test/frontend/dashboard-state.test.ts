/** DashboardState, the pure aggregator behind /dashboard: fleet states, bounds, percentiles. */
import { describe, expect, it } from 'vitest';
import { DashboardState, DRAIN_SILENCE_MS, GONE_RETENTION_MS } from '../../frontend/dashboard/dashboard-state.js';
import { LOAD_REPORT_STALE_MS } from '../../proto/wire.js';
import { REQUEST_RING_SIZE, ROUTING_DECISIONS_KEPT } from '../../frontend/dashboard/snapshot.js';
import { percentiles } from '../../frontend/dashboard/ring.js';

const A = 'aaaaaaaaaaaaaaaa';
const B = 'bbbbbbbbbbbbbbbb';

function state(): DashboardState {
  return new DashboardState({ instanceId: 'f000000000000000', startedAt: 0, routerMode: 'kv', draining: () => false, inflight: () => 0 });
}

function worker(s: DashboardState, id: string, t: number) {
  return s.view(t).models.flatMap((m) => m.pools.flatMap((p) => p.workers)).find((w) => w.instanceId === id);
}

describe('DashboardState', () => {
  it('fleet: a card removed while the worker still runs requests is draining, then gone once it falls silent', () => {
    const s = state();
    s.cardAdded('m', 'agg', A, 100, 1000);
    s.cardAdded('m', 'decode', B, 100, 1000);
    s.load({ workerId: A, numRunning: 3, numWaiting: 1, activeBlocks: 40, totalBlocks: 100 }, 1100);
    expect(worker(s, A, 1100)).toMatchObject({ state: 'ready', running: 3, waiting: 1, kvUsedBlocks: 40, kvTotalBlocks: 100 });
    s.cardRemoved(A, 1200);
    expect(worker(s, A, 1200)?.state).toBe('draining');
    expect(worker(s, A, 1100 + DRAIN_SILENCE_MS)?.state).toBe('gone');
    // An idle worker whose card goes is gone at once.
    s.cardRemoved(B, 1300);
    expect(worker(s, B, 1300)?.state).toBe('gone');
    expect(s.view(1300).models[0]!.pools.map((p) => p.role)).toEqual(['aggregated', 'decode']);
  });

  it("fleet: a model shows its card's architecture and total/active parameters (a MoE's active share)", () => {
    const s = state();
    const info = { architecture: 'Qwen3MoeForCausalLM', parameters: { total: 30_532_110_336, active: 3_353_020_416 } };
    s.cardAdded('moe', 'agg', A, 100, 1000, { loras: [], info });
    s.cardAdded('dense', 'agg', B, 100, 1000);
    const models = s.view(1000).models;
    expect(models.find((m) => m.name === 'moe')).toMatchObject(info);
    expect(models.find((m) => m.name === 'dense')).not.toHaveProperty('architecture');
  });

  it('percentiles are nearest-rank: p50 of 1..10 is 5, p90 is 9, p99 is 10', () => {
    expect(percentiles([10, 9, 8, 7, 6, 5, 4, 3, 2, 1])).toEqual({ p50: 5, p90: 9, p99: 10 });
    expect(percentiles([])).toEqual({ p50: null, p90: null, p99: null });
  });

  it('a request: TTFT, ITL, cache hit rate per worker and the inspector record', () => {
    const s = state();
    s.cardAdded('m', 'agg', A, 100, 0);
    s.routingDecided('r1', A, [{ instanceId: A, overlapBlocks: 2, cost: 1.5 }, { instanceId: B, overlapBlocks: 0, cost: 3 }], 4, 'frontend');
    s.requestStarted({ requestId: 'r1', model: 'm', arrivedAt: 1000, instanceId: A }, 1010);
    s.firstToken('r1', 1100);
    // 11 tokens, last at 1600: (1600 − 1100) / 10 = 50 ms between tokens.
    s.requestEnded('r1', { finishReason: 'length', promptTokens: 64, completionTokens: 11, cachedTokens: 32 }, 1600);
    const snap = s.view(1600);
    expect(snap.traffic.ttft.p50).toBe(100);
    expect(snap.traffic.itl.p50).toBe(50);
    expect(worker(s, A, 1600)?.prefixHitRate).toBe(0.5);
    expect(s.request('r1')).toMatchObject({ workers: [A], cachedTokens: 32, timings: { queueMs: 10, ttftMs: 100, decodeMs: 500, totalMs: 600 }, routing: { winner: A, promptBlocks: 4 } });
    expect(snap.routing.decisions.at(-1)?.candidates).toHaveLength(2);
  });

  it('everything kept is bounded: decisions, finished requests', () => {
    const s = state();
    const n = REQUEST_RING_SIZE + 10;
    for (let i = 0; i < n; i++) {
      s.requestStarted({ requestId: `r${i}`, model: 'm', arrivedAt: i, instanceId: A }, i);
      s.requestEnded(`r${i}`, { finishReason: 'stop', promptTokens: 1, completionTokens: 1, cachedTokens: 0 }, i);
    }
    expect(s.view(n).routing.decisions).toHaveLength(ROUTING_DECISIONS_KEPT);
    expect(s.request('r0')).toBeUndefined();
    expect(s.request(`r${n - 1}`)).toBeDefined();
    expect(s.request(`r${n - REQUEST_RING_SIZE}`)).toBeDefined();
  });

  it('disaggregation: share, fallbacks and hand-off latency', () => {
    const s = state();
    const end = (id: string, fallback: boolean) => {
      s.requestStarted({ requestId: id, model: 'm', arrivedAt: 0, instanceId: B, prefillInstanceId: A }, 0);
      s.requestEnded(id, { finishReason: 'stop', promptTokens: 10, completionTokens: 2, cachedTokens: 0, disagg: { fallback, prefillSeconds: 0.2, transferSeconds: 0.01, transferBytes: 1e6 } }, 500);
    };
    end('d1', false);
    end('d2', false);
    end('f1', true);
    s.requestStarted({ requestId: 'a1', model: 'm', arrivedAt: 0, instanceId: B }, 0);
    s.requestEnded('a1', { finishReason: 'stop', promptTokens: 10, completionTokens: 2, cachedTokens: 0 }, 500);
    const snap = s.view(1000);
    expect(snap.disagg.share).toBe(0.5);
    expect(snap.disagg.fallbacks).toBe(1);
    expect(snap.disagg.transferLatencyMs.p50).toBe(10);
    expect(s.request('d1')).toMatchObject({ prefillWorker: A, workers: [B], timings: { prefillMs: 200, transferMs: 10 } });
  });

  it('planner status appears once a planner publishes', () => {
    const s = state();
    expect(s.view(0).planner).toBeUndefined();
    s.plannerStatus('p000000000000000', { timestampMs: 5, pools: [{ name: 'decode', current: 1, desired: 2 }], decisions: [{ pool: 'decode', from: 1, to: 2, reason: 'kv usage 0.9 > 0.8' }] }, 10);
    expect(s.view(10).planner).toMatchObject({ pools: [{ name: 'decode', current: 1, desired: 2 }], decisions: [{ pool: 'decode', to: 2, reason: 'kv usage 0.9 > 0.8' }] });
  });
});

describe('DashboardState: truthful numbers', () => {
  it('a load report expires: running 3 at 1100 shows 3 until 1100 + 3000 ms, then 0 (the worker went silent)', () => {
    const s = state();
    s.cardAdded('m', 'decode', A, 100, 1000);
    s.load({ workerId: A, numRunning: 3, numWaiting: 2, activeBlocks: 40, totalBlocks: 100 }, 1100);
    expect(worker(s, A, 1100 + LOAD_REPORT_STALE_MS - 1)).toMatchObject({ running: 3, waiting: 2, kvUsedBlocks: 40, loadFresh: true });
    expect(worker(s, A, 1100 + LOAD_REPORT_STALE_MS)).toMatchObject({ state: 'ready', running: 0, waiting: 0, kvUsedBlocks: 0, kvTotalBlocks: 100, loadFresh: false });
    expect(s.view(1100 + LOAD_REPORT_STALE_MS).traffic.queued).toBe(0);
    // A heartbeat brings it back.
    s.load({ workerId: A, numRunning: 0, numWaiting: 0, activeBlocks: 5, totalBlocks: 100 }, 5000);
    expect(worker(s, A, 5000)).toMatchObject({ running: 0, kvUsedBlocks: 5, loadFresh: true });
  });

  it('view changes nothing: 2 requests in (1000, 2000], read 5 times at 1500 by new clients, still 2 req/s at the 2000 tick', () => {
    const s = state();
    s.advance(1000);
    s.requestStarted({ requestId: 'a', model: 'm', arrivedAt: 1100, instanceId: A }, 1100);
    for (let i = 0; i < 5; i++) s.view(1500); // page loads, /dashboard/api/snapshot
    s.requestStarted({ requestId: 'b', model: 'm', arrivedAt: 1900, instanceId: A }, 1900);
    s.advance(2000);
    expect(s.view(2000).traffic.requestRate).toBe(2);
    // A read between ticks reports the last completed window, not a shorter one of its own.
    expect(s.view(2400).traffic.requestRate).toBe(2);
  });

  it('view does not forget; advance does: a worker gone at 1000 is listed until 1000 + 60 s, then dropped by the tick', () => {
    const s = state();
    s.cardAdded('m', 'agg', A, 10, 0);
    s.cardRemoved(A, 1000);
    const after = 1001 + GONE_RETENTION_MS;
    expect(worker(s, A, after)).toBeUndefined();
    expect(worker(s, A, 1000)?.state).toBe('gone'); // still there: the view evicted nothing
    s.advance(after);
    expect(worker(s, A, 1000)).toBeUndefined();
  });

  it('the disaggregated share matches the count: 2 disaggregated of 4 finished is 50 %, also a minute after the load', () => {
    const s = state();
    for (const [id, disagg] of [['d1', { fallback: false }], ['d2', { fallback: false }], ['f1', { fallback: true }], ['a1', undefined]] as const) {
      s.requestStarted({ requestId: id, model: 'm', arrivedAt: 0, instanceId: B }, 0);
      s.requestEnded(id, { finishReason: 'stop', promptTokens: 10, completionTokens: 2, cachedTokens: 0, ...(disagg ? { disagg } : {}) }, 500);
    }
    s.advance(1000);
    s.advance(61_000);
    const snap = s.view(61_000);
    expect(snap.disagg.disaggregatedTotal).toBe(2);
    expect(snap.traffic.finishedTotal).toBe(4);
    expect(snap.disagg.share).toBe(0.5);
  });
});

describe('DashboardState: late routing decisions', () => {
  it("a standalone router's decision that arrives after the request started still fills its record", () => {
    const s = state();
    s.requestStarted({ requestId: 'r', model: 'm', arrivedAt: 0, instanceId: A }, 1);
    s.remoteDecision('0123456789abcdef', { requestId: 'r', component: 'backend', instanceId: A, promptBlocks: 3, candidates: [{ instanceId: A, overlapBlocks: 1, cost: 2 }, { instanceId: B, overlapBlocks: 0, cost: 5 }], timestampMs: 1 });
    s.requestEnded('r', { finishReason: 'stop', promptTokens: 48, completionTokens: 1, cachedTokens: 0 }, 2);
    expect(s.request('r')?.routing).toMatchObject({ decidedBy: '0123456789abcdef', winner: A, promptBlocks: 3 });
    expect(s.view(3).routing.decisions[0]?.candidates).toHaveLength(2);
  });
});
