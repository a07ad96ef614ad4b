/**
 * KvRouterService against real mocker workers (in-process, memory discovery, direct event
 * plane, gRPC request plane): the router's index of each worker must equal the worker's real
 * block set, after a lost event (replay), after a router restart (dumps), and a worker that
 * leaves discovery must leave the index.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { KvEvent } from '../../proto/wire.js';
import { KvRouterService } from '../../router/adapters/kv-router-service.js';
import type { DistributedRuntime } from '../../runtime/distributed-runtime.js';
import { metricValue } from '../harness/http.js';
import { BLOCK, Stack, tokens, waitFor } from './stack.js';

describe('KV router service: recovery against real workers', () => {
  let stack: Stack;

  beforeAll(async () => {
    stack = await Stack.start(2);
  });
  afterAll(async () => {
    await stack?.close();
  });

  let routerRt: DistributedRuntime | undefined;

  async function service(dropEvent?: (e: KvEvent) => boolean): Promise<KvRouterService> {
    routerRt = await stack.runtime('router');
    const svc = await KvRouterService.start(routerRt, { namespace: 'tandem', component: 'backend', blockSize: BLOCK, tickIntervalMs: 50, ...(dropEvent ? { dropEvent } : {}) });
    await waitFor('every worker followed', () => svc.workers().length === stack.workers.length);
    return svc;
  }

  const sameView = (svc: KvRouterService, id: string) => {
    const want = stack.blockSet(id);
    return want.length > 0 && JSON.stringify(svc.blocksOf(id).sort()) === JSON.stringify(want);
  };

  it('a dropped event is recovered by replay, and the view equals the worker block set and its dump', async () => {
    const [a, b] = stack.workers;
    let dropped: KvEvent | undefined;
    const svc = await service((e) => {
      // Lose the first live event of worker A after its initial dump.
      if (dropped === undefined && e.workerId === a!.id && svc.router.stats().sequencer.dumpsRequested > 0 && e.eventId >= 1) {
        dropped = e;
        return true;
      }
      return false;
    });
    try {
      await waitFor('initial dumps', async () => {
        await svc.settled();
        return svc.router.eventIndex!.hasWorker(a!.id) || svc.router.stats().sequencer.dumpsRequested >= 2;
      });
      for (let i = 0; i < 4; i++) await stack.generate(a!.id, tokens(100 + i, 5 * BLOCK));
      await stack.generate(b!.id, tokens(200, 3 * BLOCK));
      await waitFor('an event to be dropped', () => dropped !== undefined);
      // Later events reveal the gap; the router asks for exactly the missing range.
      for (let i = 0; i < 2; i++) await stack.generate(a!.id, tokens(300 + i, 4 * BLOCK));
      await waitFor('router view of A = A block set', async () => {
        await svc.settled();
        return sameView(svc, a!.id);
      });
      await waitFor('router view of B = B block set', () => sameView(svc, b!.id));
      const stats = svc.router.stats().sequencer;
      expect(stats.gapsDetected).toBeGreaterThanOrEqual(1);
      expect(stats.gapsRecovered).toBeGreaterThanOrEqual(1);
      // The worker's own dump (what a fresh router would load) names the same blocks.
      const rt = await stack.runtime('dumper');
      const client = await rt.namespace('tandem').component('backend').endpoint('kv_events').client();
      await client.waitForInstances(2);
      let dump: { events: Array<{ type: string; blocks: Array<{ blockHash: string }> }> } | undefined;
      for await (const item of client.generate<{ type: 'dump' }, typeof dump>({ type: 'dump' }, { routing: { mode: 'direct', instanceId: a!.id } })) dump = item;
      client.close();
      const dumped = dump!.events.flatMap((e) => e.blocks.map((x) => x.blockHash)).sort();
      expect(svc.blocksOf(a!.id).sort()).toEqual(dumped);
      svc.tick();
      const text = await routerRt!.metrics.metrics();
      expect(metricValue(text, 'tandem_router_gaps_recovered_total', { kind: 'replay' })).toBeGreaterThanOrEqual(1);
      expect(metricValue(text, 'tandem_router_events_dropped_total', { reason: 'test_hook' })).toBe(1);
      expect(metricValue(text, 'tandem_router_index_blocks')).toBe(stack.blockSet(a!.id).length + stack.blockSet(b!.id).length);
    } finally {
      await svc.close();
    }
  });

  it('a restarted router rebuilds its index from dumps', async () => {
    const [a, b] = stack.workers;
    const first = await service();
    await stack.generate(a!.id, tokens(400, 6 * BLOCK));
    await waitFor('first router sees A', () => sameView(first, a!.id));
    await first.close();

    const second = await service();
    try {
      await waitFor('restarted router = both block sets', async () => {
        await second.settled();
        return sameView(second, a!.id) && sameView(second, b!.id);
      });
      // Everything came from dumps: no live event was needed.
      expect(second.router.stats().sequencer.dumpsRequested).toBeGreaterThanOrEqual(2);
      expect(second.router.stats().index.entries).toBe(stack.blockSet(a!.id).length + stack.blockSet(b!.id).length);
    } finally {
      await second.close();
    }
  });

  it('routes a prompt to the worker that caches its prefix and counts it in tandem_router_* metrics', async () => {
    const [a] = stack.workers;
    const svc = await service();
    try {
      const prefix = tokens(500, 8 * BLOCK);
      await stack.generate(a!.id, prefix);
      await waitFor('prefix indexed', () => sameView(svc, a!.id));
      const result = svc.route({ requestId: 'r1', tokens: [...prefix, ...tokens(501, 2 * BLOCK)] });
      expect(result.kind).toBe('routed');
      if (result.kind !== 'routed') return;
      expect(result.decision.instanceId).toBe(a!.id);
      expect(result.decision.overlapBlocks).toBe(8);
      expect(svc.load(a!.id).activeSequences).toBe(1);
      svc.finished('r1');
      expect(svc.load(a!.id).activeSequences).toBe(0);
      svc.tick();
      const text = await routerRt!.metrics.metrics();
      expect(metricValue(text, 'tandem_router_decisions_total', { result: 'routed' })).toBe(1);
      expect(metricValue(text, 'tandem_router_overlap_blocks_sum')).toBe(8);
      expect(metricValue(text, 'tandem_router_events_applied_total')).toBeGreaterThan(0);
    } finally {
      await svc.close();
    }
  });

  it('a worker that leaves discovery leaves the index', async () => {
    const extra = await stack.addWorker();
    const svc = await service();
    try {
      await waitFor('three workers', () => svc.workers().length === 3);
      await stack.generate(extra.id, tokens(600, 4 * BLOCK));
      await waitFor('extra indexed', () => sameView(svc, extra.id));
      await extra.worker.close();
      await extra.rt.shutdown();
      stack.workers.splice(stack.workers.indexOf(extra), 1);
      await waitFor('extra gone', () => !svc.workers().includes(extra.id));
      expect(svc.blocksOf(extra.id)).toEqual([]);
      expect(svc.router.stats().index.perWorker[extra.id]).toBeUndefined();
    } finally {
      await svc.close();
    }
  });
});
