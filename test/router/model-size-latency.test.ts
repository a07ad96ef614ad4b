/**
 * The latency cost charges a mixture of experts its active share, as the mocker does and the
 * planner sizes (perf-model `stepTimeModel`): the model card's `parameters` reach the router
 * through `KvRouter.useModelParameters`. Worked by hand with Dynamo's polynomial and
 * Qwen3-30B-A3B's counts (30,532,110,336 total, 3,353,020,416 active: share 0.10982):
 *
 *   idle worker, 1000-token prompt, nothing cached:
 *     TTFT = prefillMs(1000) = 32.106 ms (dense)  →  0.10982 · 32.106 = 3.526 ms
 *     ITL  = decodeMs(0, 1) = 5.74 ms            →  max(1, 0.10982 · 5.74 = 0.630) = 1 ms (the decode floor)
 *   host-tier onboarding per token = (1 − 0.65) · prefillMs(1024) / 1024 = 0.35 · 32.491 / 1024 = 0.011105 ms  →  × 0.10982
 *   an ITL target of 10 ms: dense, a worker at KV 0.5 predicts 26.3 ms (over: ineligible while
 *   another is within); charged the active share, 2.9 ms (within)
 */
import { describe, expect, it } from 'vitest';
import { DECODE_FLOOR_MS, PolynomialPerfModel, type PerfModel } from '../../perf-model/index.js';
import type { LoadMetrics } from '../../proto/wire.js';
import { KvRouter, type RouteResult } from '../../router/kv-router.js';
import { tokens } from './fixtures.js';

const QWEN3_30B_A3B = { total: 30_532_110_336, active: 3_353_020_416 };
const SHARE = QWEN3_30B_A3B.active / QWEN3_30B_A3B.total;

function routed(r: RouteResult) {
  if (r.kind !== 'routed') throw new Error(`expected routed, got ${r.kind}`);
  return r.decision;
}

function latencyRouter(perfModel?: PerfModel, onboard?: Record<string, number>): KvRouter {
  return new KvRouter({
    blockSize: 16,
    useKvEvents: false,
    cost: 'latency',
    latency: { ...(perfModel !== undefined ? { perfModel } : {}), ...(onboard !== undefined ? { estimator: { blockSize: 16, maxBatchedTokens: 8192, onboardMsPerToken: onboard } } : {}) },
  });
}

/** The chosen row's latency prediction for a 1000-token prompt on one idle worker. */
function predict(router: KvRouter, id: string) {
  const d = routed(router.select({ requestId: id, tokens: tokens(7, 1000) }, [{ instanceId: 'w' }]));
  return d.costs[0]!.latency!;
}

describe('latency cost: the served model\'s size', () => {
  it('a Qwen3-30B-A3B card: TTFT of an idle 1000-token prefill 32.106 ms → 3.526 ms; ITL 5.74 ms → the 1 ms floor', () => {
    const router = latencyRouter();
    const dense = predict(router, 'a');
    expect(dense.ttftMs).toBeCloseTo(32.106, 3);
    expect(dense.itlMs).toBeCloseTo(5.74, 3);
    router.useModelParameters(QWEN3_30B_A3B);
    const moe = predict(router, 'b');
    expect(moe.ttftMs).toBeCloseTo(3.526, 3);
    expect(moe.ttftMs / dense.ttftMs).toBeCloseTo(SHARE, 9);
    expect(moe.itlMs).toBe(DECODE_FLOOR_MS);
  });

  it('tier onboarding follows the model: 0.011105 ms per host-tier token × 0.10982', () => {
    const router = latencyRouter();
    const before = router.latency!.config.estimator.onboardMsPerToken!.cpu!;
    expect(before).toBeCloseTo((0.35 * new PolynomialPerfModel().prefillMs(1024)) / 1024, 9);
    expect(before).toBeCloseTo(0.011105, 6);
    router.useModelParameters(QWEN3_30B_A3B);
    expect(router.latency!.config.estimator.onboardMsPerToken!.cpu! / before).toBeCloseTo(SHARE, 9);
    // Configured onboarding costs stay as given.
    const given = latencyRouter(undefined, { cpu: 0.5 });
    given.useModelParameters(QWEN3_30B_A3B);
    expect(given.latency!.config.estimator.onboardMsPerToken).toEqual({ cpu: 0.5 });
  });

  it('an ITL target of 10 ms: the dense reading puts a half-full worker over it (26.3 ms), the active share within (2.9 ms)', () => {
    const router = new KvRouter({ blockSize: 16, useKvEvents: false, cost: 'latency', latency: { itlTargetMs: 10 } });
    const load: LoadMetrics = { workerId: 'half', numRunning: 0, numWaiting: 0, kvUsage: 0.5, activeBlocks: 0, totalBlocks: 0, queuedPrefillTokens: 0, timestampMs: 0 };
    const at = (id: string) => routed(router.select({ requestId: id, tokens: tokens(9, 64) }, [{ instanceId: 'half', load }])).costs[0]!.latency!;
    const dense = at('d');
    expect(dense.itlMs).toBeCloseTo(26.31, 2);
    expect(dense.overTarget).toBe(true);
    router.useModelParameters(QWEN3_30B_A3B);
    const moe = at('m');
    expect(moe.itlMs).toBeCloseTo(dense.itlMs * SHARE, 6);
    expect(moe.overTarget).toBe(false);
  });

  it('a measured profile is the model\'s own: the counts change nothing; a dense card changes nothing', () => {
    const flat: PerfModel = { prefillMs: () => 40, decodeMs: () => 8 };
    const profiled = latencyRouter(flat);
    profiled.useModelParameters(QWEN3_30B_A3B);
    expect(predict(profiled, 'p').ttftMs).toBe(40);
    const dense = latencyRouter();
    dense.useModelParameters({ total: 8e9, active: 8e9 });
    expect(predict(dense, 'd').ttftMs).toBeCloseTo(32.106, 3);
  });

  it('the blocks cost has no latency model: the counts are ignored', () => {
    const router = new KvRouter({ blockSize: 16, useKvEvents: false, cost: 'blocks' });
    router.useModelParameters(QWEN3_30B_A3B);
    expect(router.latency).toBeUndefined();
  });
});
