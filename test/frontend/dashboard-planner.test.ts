/**
 * Planner → event plane → frontend dashboard, on the real runtime (memory discovery, direct
 * event plane over gRPC): the planner's `PlannerStatusPublisher` publishes `planner_status`,
 * the frontend that started before it hears it, and its snapshot carries the planner panel.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFrontend, type FrontendHandle } from '../../frontend/frontend.js';
import { plannerStatusEvent, PlannerStatusPublisher } from '../../planner/live/index.js';
import type { Decision } from '../../planner/policy/decision.js';
import { DistributedRuntime } from '../../runtime/distributed-runtime.js';
import { MemoryDiscoveryStore } from '../../runtime/discovery/memory-discovery.js';
import { pollUntil } from '../harness/http.js';
import { ByteCodec } from './fakes.js';

function decision(over: Partial<Decision>): Decision {
  return { pool: 'decode', atMs: 0, current: 1, desired: 2, target: 2, action: 'up', rule: 'load', limitedBy: [], reason: 'kv usage 0.92 > 0.8', ...over } as Decision;
}

describe('planner status on the dashboard', () => {
  const store = new MemoryDiscoveryStore();
  let frontendRt: DistributedRuntime;
  let plannerRt: DistributedRuntime;
  let frontend: FrontendHandle;
  let publisher: PlannerStatusPublisher;

  beforeAll(async () => {
    const opts = { discovery: 'memory', eventPlane: 'direct', memoryStore: store, host: '127.0.0.1', logLevel: 'silent' } as const;
    frontendRt = await DistributedRuntime.create({ name: 'frontend', ...opts });
    const codec = new ByteCodec();
    frontend = await startFrontend({ runtime: frontendRt, host: '127.0.0.1', httpPort: 0, codecLoader: async () => codec });
    plannerRt = await DistributedRuntime.create({ name: 'planner', ...opts });
    publisher = await PlannerStatusPublisher.start(plannerRt, 'tandem');
  });
  afterAll(async () => {
    await publisher?.close();
    await frontend?.close();
    await plannerRt?.shutdown();
    await frontendRt?.shutdown();
  });

  it('plannerStatusEvent: observed rate is requests / interval; hold decisions are not listed', () => {
    const e = plannerStatusEvent(
      { nowMs: 1000, traffic: { requests: 30, intervalS: 10, meanIsl: 512, meanOsl: 64 }, pools: {} },
      [decision({}), decision({ pool: 'prefill', action: 'hold', current: 1, target: 1 })],
      { rate: 3.5, isl: 500, osl: 60, plannedRate: 4 },
    );
    expect(e.observed).toEqual({ rate: 3, isl: 512, osl: 64 });
    expect(e.predicted).toEqual({ rate: 3.5, isl: 500, osl: 60 });
    expect(e.pools).toEqual([{ name: 'decode', current: 1, desired: 2 }, { name: 'prefill', current: 1, desired: 1 }]);
    expect(e.decisions).toEqual([{ pool: 'decode', from: 1, to: 2, reason: 'kv usage 0.92 > 0.8' }]);
  });

  it("the frontend's snapshot shows what the planner published", async () => {
    const event = plannerStatusEvent({ nowMs: Date.now(), traffic: { requests: 10, intervalS: 5 }, pools: {} }, [decision({})], undefined);
    await pollUntil(
      'planner panel in the snapshot',
      async () => {
        publisher.publish(event); // the direct plane may take a moment to open the stream
        const snap = (await (await fetch(`${frontend.url}/dashboard/api/snapshot`)).json()) as { planner?: { source: string; pools: unknown[]; decisions: Array<{ reason: string }> } };
        return snap.planner !== undefined && snap.planner.decisions.length > 0;
      },
      15_000,
      200,
    );
    const snap = (await (await fetch(`${frontend.url}/dashboard/api/snapshot`)).json()) as { planner: { source: string; pools: unknown[]; decisions: Array<{ reason: string; to: number }> } };
    expect(snap.planner.source).toBe(plannerRt.instanceId);
    expect(snap.planner.pools).toEqual([{ name: 'decode', current: 1, desired: 2 }]);
    expect(snap.planner.decisions.at(-1)).toMatchObject({ to: 2, reason: 'kv usage 0.92 > 0.8' });
  });
});
