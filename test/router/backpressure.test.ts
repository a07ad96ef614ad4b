/**
 * Backpressure (router/overload.ts). A worker is passed over when what it reports is at or
 * above --router-max-kv-usage (0.95) while another is below. The router's own bookings
 * over-count (a booked request may still sit in the worker's queue, where round-robin would
 * have put it too), so alone they decide only before a worker reports, or past 2× its pool.
 * With every worker over, the least-bad one still gets the request (saturated): refusing is
 * the opt-in refusal policy's (--router-busy-threshold, --router-max-waiting) alone.
 */
import { describe, expect, it } from 'vitest';
import type { LoadMetrics } from '../../proto/wire.js';
import { KvRouter, type RouteResult } from '../../router/kv-router.js';
import { DEFAULT_OVERLOAD_POLICY, overloadReason } from '../../router/overload.js';
import { tokens } from './fixtures.js';

const BS = 16;
const report = (workerId: string, kvUsage: number, totalBlocks = 100): LoadMetrics => ({
  workerId,
  numRunning: 1,
  numWaiting: 3,
  kvUsage,
  activeBlocks: Math.round(kvUsage * totalBlocks),
  totalBlocks,
  queuedPrefillTokens: 0,
  timestampMs: 0,
});

function routed(r: RouteResult) {
  if (r.kind !== 'routed') throw new Error(`expected routed, got ${r.kind}`);
  return r.decision;
}

describe('overloadReason', () => {
  const booked = (activeBlocks: number) => ({ activeBlocks, pendingPrefillTokens: 0 });

  it('a fresh report decides: 0.97 reported → busy even with nothing booked; 0.5 reported → not busy with 150% booked', () => {
    expect(overloadReason(report('a', 0.97), booked(0), 100, DEFAULT_OVERLOAD_POLICY)).toBe('kv_usage');
    expect(overloadReason(report('a', 0.5), booked(150), 100, DEFAULT_OVERLOAD_POLICY)).toBeUndefined();
  });

  it('no report (or a stale one left out by the adapter): bookings stand in at the same threshold', () => {
    expect(overloadReason(undefined, booked(95), 100, DEFAULT_OVERLOAD_POLICY)).toBe('kv_usage');
    expect(overloadReason(undefined, booked(94), 100, DEFAULT_OVERLOAD_POLICY)).toBeUndefined();
  });

  it('bookings past 2× the pool mean a burst outran the reports: busy whatever the report says', () => {
    expect(overloadReason(report('a', 0.1), booked(200), 100, DEFAULT_OVERLOAD_POLICY)).toBe('booked');
    expect(overloadReason(report('a', 0.1), booked(199), 100, DEFAULT_OVERLOAD_POLICY)).toBeUndefined();
  });
});

describe('KvRouter backpressure', () => {
  it('routes where round-robin would run: workers reporting 60% are not busy although bookings exceed their pools', () => {
    const router = new KvRouter({ blockSize: BS });
    const candidates = ['a', 'b'].map((id) => ({ instanceId: id, totalBlocks: 100, load: report(id, 0.6) }));
    // 2 × 120 distinct booked blocks: 120% of each pool, which the old booked-usage rule refused.
    for (let i = 0; i < 12; i++) routed(router.route({ requestId: `r${i}`, tokens: tokens(i, 19 * BS) }, candidates, 0));
    expect(router.workerLoad('a').activeBlocks).toBe(120);
    expect(router.workerLoad('b').activeBlocks).toBe(120);
    const d = routed(router.route({ requestId: 'next', tokens: tokens(99, 8 * BS) }, candidates, 0));
    expect(d.costs.every((c) => !c.overloaded)).toBe(true);
  });

  it('never refuses by default: every worker reporting full → routed to the least-bad one, counted as saturated', () => {
    const router = new KvRouter({ blockSize: BS, busyRetryAfterMs: 500 });
    const full = ['a', 'b'].map((id) => ({ instanceId: id, totalBlocks: 100, load: report(id, 0.96) }));
    const first = routed(router.route({ requestId: 'r1', tokens: tokens(1, 8 * BS) }, full, 0));
    expect(first.saturated).toBe(true);
    // The first booking made its worker the worse one: the next goes to the other (no pile-up).
    const second = routed(router.route({ requestId: 'r2', tokens: tokens(2, 8 * BS) }, full, 0));
    expect(second.instanceId).not.toBe(first.instanceId);
    expect(router.stats()).toMatchObject({ activeSequences: 2, allBusy: 0, saturated: 2 });
    // One worker drains below the threshold: it takes the next request, not saturated.
    const d = routed(router.route({ requestId: 'r3', tokens: tokens(3, 8 * BS) }, [full[0]!, { ...full[1]!, load: report('b', 0.9) }], 1));
    expect(d).toMatchObject({ instanceId: 'b' });
    expect(d.saturated).toBeUndefined();
  });

  it('opt-in refusal: all_busy only when every worker reports at or over the busy threshold (or max waiting), then books nothing', () => {
    const router = new KvRouter({ blockSize: BS, busyRetryAfterMs: 500, refusal: { kvUsage: 0.96, maxWaiting: 10 } });
    const full = ['a', 'b'].map((id) => ({ instanceId: id, totalBlocks: 100, load: report(id, 0.96) }));
    expect(router.route({ requestId: 'r', tokens: tokens(1, 8 * BS) }, full, 0)).toMatchObject({ kind: 'all_busy', retryAfterMs: 500 });
    expect(router.stats().activeSequences).toBe(0);
    // b below the KV bound but with 10 waiting: busy by the other bound.
    const waiting = { ...full[1]!, load: { ...report('b', 0.5), numWaiting: 10 } };
    expect(router.route({ requestId: 'r', tokens: tokens(1, 8 * BS) }, [full[0]!, waiting], 0)).toMatchObject({ kind: 'all_busy' });
    // A worker with no fresh report: its bookings stand in (none here, so it is not busy).
    const d = routed(router.route({ requestId: 'r', tokens: tokens(1, 8 * BS) }, [full[0]!, { instanceId: 'b', totalBlocks: 100 }], 1));
    expect(d.instanceId).toBe('b');
  });
});
