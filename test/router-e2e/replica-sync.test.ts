/**
 * Two standalone router replicas (`startRouterServer`, the core of `runtime router`) with
 * replica sync, in front of three real mocker workers. A frontend-side `RemoteKvBackend`
 * sends a steady stream of requests: routes round-robin over the replicas, lifecycle calls to
 * the replica that routed. At checkpoints (and at the end) both replicas must hold the same
 * load estimate for every worker, including the bookings the other replica made.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { WorkerActiveLoad } from '../../router/active-sequences.js';
import type { KvRouterService } from '../../router/adapters/kv-router-service.js';
import { KvRouterHub } from '../../router/adapters/kv-router-hub.js';
import { RemoteKvBackend } from '../../router/adapters/kv-routing-backend.js';
import { startRouterServer, type RunningRouter } from '../../router/adapters/router-server.js';
import { BLOCK, Stack, tokens, waitFor } from './stack.js';

const TARGET = { component: 'backend', blockSize: BLOCK };

describe('router replicas with --router-replica-sync', () => {
  let stack: Stack;
  const replicas: RunningRouter[] = [];
  let backend: RemoteKvBackend;

  beforeAll(async () => {
    stack = await Stack.start(3);
    for (const name of ['router-a', 'router-b']) {
      replicas.push(await startRouterServer(await stack.runtime(name), { namespace: 'tandem', replicaSync: true }));
    }
    backend = await RemoteKvBackend.open(await stack.runtime('frontend'), 'tandem');
    await backend.waitForReplicas(2, 10_000);
    // Each replica follows the workers from start-up, as `runtime router --worker-component backend` does.
    for (const r of replicas) {
      const svc = await r.hub.service('backend', BLOCK);
      await waitFor('workers followed', () => svc.workers().length === 3);
    }
  }, 60_000);

  afterAll(async () => {
    await backend?.close();
    for (const r of replicas) await r.close();
    await stack?.close();
  });

  const services = (): KvRouterService[] => replicas.map((r) => r.hub.started('backend')!);
  const loads = (svc: KvRouterService): WorkerActiveLoad[] => stack.workers.map((w) => svc.load(w.id));
  const agree = () => {
    const [a, b] = services();
    return JSON.stringify(loads(a!)) === JSON.stringify(loads(b!));
  };

  it('both replicas agree on every worker load under a steady stream of routes', async () => {
    const candidates = stack.workers.map((w) => w.id);
    const inflight: string[] = [];
    const routedBy = new Map<string, string>();
    const prefix = tokens(5, 8 * BLOCK);
    let outstanding = 0;
    for (let i = 0; i < 90; i++) {
      const id = `sync-${i}`;
      const out = await backend.route(TARGET, id, [...prefix, ...tokens(10_000 + i, 3 * BLOCK + (i % 7))], candidates);
      expect(out.kind).toBe('routed');
      if (out.kind === 'routed') routedBy.set(id, out.instanceId);
      inflight.push(id);
      outstanding++;
      // Keep about ten requests in flight: the oldest gets its first token, the one before finishes.
      if (inflight.length >= 10) {
        backend.firstToken(TARGET, inflight[5]!);
        backend.finished(TARGET, inflight.shift()!);
        outstanding--;
      }
      if (i % 30 === 29) {
        // finished() reaches the replicas as a message: on a loaded machine both can agree on a
        // load that still counts a finished request, so wait for the count as well.
        await waitFor(`replicas agree at request ${i}`, () => agree() && services().every((s) => s.router.stats().activeSequences === outstanding), 15_000);
        const [a, b] = services();
        expect(a!.router.stats().activeSequences).toBe(outstanding);
        expect(b!.router.stats().activeSequences).toBe(outstanding);
      }
      await new Promise((r) => setTimeout(r, 2));
    }
    await waitFor('replicas agree at the end', agree, 5_000);
    // The estimate is real load, spread by both replicas' decisions together.
    const [a] = services();
    const total = loads(a!).reduce((s, l) => s + l.activeSequences, 0);
    expect(total).toBe(outstanding);
    expect(new Set(routedBy.values()).size).toBe(3);
    // Both replicas routed: each saw the other's bookings only through router_sync.
    expect(replicas.every((r) => r.hub.started('backend')!.router.stats().decisions > 20)).toBe(true);

    for (const id of inflight) backend.finished(TARGET, id);
    await waitFor('all bookings released on both replicas', () => services().every((s) => s.router.stats().activeSequences === 0), 5_000);
  });

  it('a frontend with an embedded router and --router-replica-sync shares its bookings with the replicas', async () => {
    // A frontend serves nothing under `router`: announceSync registers router/sync_peer so the
    // direct event plane of the replicas hears its router_sync stream.
    const hub = await KvRouterHub.start(await stack.runtime('frontend-embedded'), { namespace: 'tandem', replicaSync: true, announceSync: true });
    try {
      const local = await hub.service('backend', BLOCK);
      await waitFor('workers followed', () => local.workers().length === 3);
      // The replicas dial the new peer's router_sync stream when it appears in discovery: hold a
      // probe booking until both replicas count it (bookings of this hub are not seen before).
      const probe = local.route({ requestId: 'probe', tokens: tokens(1, 2 * BLOCK) });
      const probeWorker = probe.kind === 'routed' ? probe.decision.instanceId : '';
      let n = 0;
      await waitFor('replicas hear the frontend', () => {
        // Re-publish (free + book again) until a replica's stream is open to hear it.
        local.finished(n === 0 ? 'probe' : `probe-${n}`);
        local.bookOn({ requestId: `probe-${++n}`, tokens: tokens(1, 2 * BLOCK) }, probeWorker);
        return services().every((s) => s.load(probeWorker).activeSequences === 1);
      }, 15_000, 50);
      local.finished(`probe-${n}`);
      await waitFor('probe freed on the replicas', () => services().every((s) => s.load(probeWorker).activeSequences === 0), 5_000);
      const routed = local.route({ requestId: 'embedded-1', tokens: tokens(77, 6 * BLOCK) });
      expect(routed.kind).toBe('routed');
      const worker = routed.kind === 'routed' ? routed.decision.instanceId : '';
      await waitFor('replicas see the frontend booking', () => services().every((s) => s.load(worker).activeSequences === 1), 5_000);
      local.finished('embedded-1');
      await waitFor('replicas see it freed', () => services().every((s) => s.load(worker).activeSequences === 0), 5_000);
    } finally {
      await hub.close();
    }
  });
});
