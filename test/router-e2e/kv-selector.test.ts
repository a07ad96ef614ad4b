/**
 * The frontend's KV selector over the embedded router and real mocker workers whose KV pools
 * are small (64 blocks), so "every worker over its load threshold" can be reached with a few
 * bookings. Backpressure by default: such requests are still routed at once, spread over the
 * workers (the least-bad one each time), never refused. With the opt-in refusal
 * (--router-busy-threshold) a request waits (bounded) for a booking to end instead of piling
 * onto a saturated worker; past the wait it fails with resource_exhausted (429), counted.
 * Also: select books at once, a pinned request is booked where it went, and a migration moves
 * the booking.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PreprocessedRequest } from '../../proto/wire.js';
import { KvSelector, createKvSelector } from '../../frontend/kv-selector.js';
import type { RouteRequest } from '../../frontend/routing.js';
import { LocalKvBackend } from '../../router/adapters/kv-routing-backend.js';
import { RouterMetrics } from '../../router/adapters/router-metrics.js';
import { AllWorkersBusyError } from '../../router/errors.js';
import { BLOCK, MODEL, Stack, tokens, waitFor } from './stack.js';

/** Distinct ids give distinct prompts (no shared blocks). */
function seedOf(id: string): number {
  let h = 7;
  for (const c of id) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return h;
}

function route(id: string, blocks: number): RouteRequest {
  const request: PreprocessedRequest = { requestId: id, model: MODEL, tokenIds: tokens(seedOf(id), blocks * BLOCK), sampling: {}, stop: { maxTokens: 4, stopTokenIds: [], ignoreEos: true } };
  return { model: MODEL, request };
}

describe('KvSelector (frontend --router-mode kv) on the embedded router', () => {
  let stack: Stack;
  let selector: KvSelector;
  /** The same fleet behind a router with the opt-in refusal (busy threshold 0.95). */
  let refusing: KvSelector;
  let refusingRuntime: Awaited<ReturnType<Stack['runtime']>>;

  beforeAll(async () => {
    stack = await Stack.start(2, { numGpuBlocks: 64 });
    selector = await createKvSelector(await stack.runtime('frontend'), 'tandem');
    refusingRuntime = await stack.runtime('frontend-refusing');
    refusing = await createKvSelector(refusingRuntime, 'tandem', { routerBusyThreshold: 0.95 });
    // The selector learns each model's component from its cards; the router starts on first use.
    await waitFor('router for backend', async () => {
      const id = await selector.select(route('warm', 1), stack.workers.map((w) => w.id));
      selector.onFinished(route('warm', 1), id!);
      return (selector.backend as LocalKvBackend).hub.started('backend')?.workers().length === 2;
    });
  });
  afterAll(async () => {
    await refusing?.close().catch(() => undefined);
    await selector?.close();
    await stack?.close();
  });

  const service = () => (selector.backend as LocalKvBackend).hub.started('backend')!;
  const refusingService = () => (refusing.backend as LocalKvBackend).hub.started('backend')!;
  const ids = () => stack.workers.map((w) => w.id);

  /** The refusing selector has seen the cards and started its router. */
  async function warmRefusing(): Promise<void> {
    await waitFor('refusing router for backend', async () => {
      const id = await refusing.select(route('warm-r', 1), ids());
      refusing.onFinished(route('warm-r', 1), id!);
      return (refusing.backend as LocalKvBackend).hub.started('backend')?.workers().length === 2;
    });
  }

  it('select books at once, so two concurrent 40-block requests land on different workers', async () => {
    const [a, b] = await Promise.all([selector.select(route('c1', 40), ids()), selector.select(route('c2', 40), ids())]);
    expect(a).not.toBe(b);
    expect(service().load(a!).activeSequences).toBe(1);
    selector.onRouted(route('c1', 40), a!);
    selector.onFinished(route('c1', 40), a!);
    selector.onFinished(route('c2', 40), b!);
    expect(service().load(a!).activeSequences + service().load(b!).activeSequences).toBe(0);
  });

  it('by default every worker over its threshold still routes at once, spread over the workers, never refused', async () => {
    // 10 × 40 blocks on two 64-block pools: past 95% of either pool after the first two, past
    // twice each pool after six. Each request goes to the least-bad worker and would wait in its
    // scheduler, as round-robin's would.
    const held = Array.from({ length: 10 }, (_, i) => route(`s${i}`, 40));
    const where: string[] = [];
    try {
      for (const h of held) where.push((await selector.select(h, ids()))!);
      expect(where.every((w) => w !== undefined)).toBe(true);
      expect(selector.queued).toBe(0);
      expect(ids().map((id) => where.filter((w) => w === id).length)).toEqual([5, 5]);
      expect(service().router.stats().saturated).toBeGreaterThanOrEqual(6);
    } finally {
      held.forEach((h, i) => selector.onFinished(h, where[i]!));
    }
    expect(ids().every((id) => service().load(id).activeSequences === 0)).toBe(true);
  });

  it('opt-in refusal, all workers over the busy threshold: the request waits for a booking to end, then routes', async () => {
    await warmRefusing();
    // Busy once booked blocks reach 95% of 64 (before a fresh report; an idle worker's report
    // of 0% lets bookings count only past twice the pool): two or four 40-block requests each.
    const held: RouteRequest[] = [];
    const where: string[] = [];
    try {
      for (let i = 0; i < 10; i++) {
        const r = route(`h${i}`, 40);
        const pick = refusing.select(r, ids());
        // Routed at once, or queued behind the busy workers: whichever shows first.
        let first: string | undefined;
        void pick.then((id) => (first = id));
        while (first === undefined && refusing.queued === 0) await new Promise((res) => setImmediate(res));
        if (first === undefined) {
          expect(refusing.queued).toBe(1);
          refusing.onFinished(held[0]!, where[0]!);
          // Woken by the freed booking, it goes to the worker that now has room.
          await expect(pick).resolves.toBe(where[0]);
          held.shift();
          held.push(r);
          where.push(where.shift()!);
          break;
        }
        held.push(r);
        where.push(first);
      }
      expect(refusing.queued).toBe(0);
      // 2 or 4 held per worker (see the next test); the one that waited took the freed place.
      for (const id of ids()) expect([2, 4]).toContain(where.filter((w) => w === id).length);
    } finally {
      held.forEach((h, i) => refusing.onFinished(h, where[i]!));
    }
    expect(ids().every((id) => refusingService().load(id).activeSequences === 0)).toBe(true);
  });

  it('opt-in refusal: past the bounded wait the request fails with resource_exhausted (429 + Retry-After), counted', async () => {
    await warmRefusing();
    const quick = await KvSelector.start({ backend: refusing.backend, discovery: stack.workers[0]!.rt.discovery, namespace: 'tandem', busyWaitMs: 150, metrics: RouterMetrics.for(refusingRuntime.metrics) });
    await waitFor('cards seen', async () => {
      const id = await quick.select(route('q0', 1), ids());
      quick.onFinished(route('q0', 1), id!);
      return id !== undefined;
    });
    // Two regimes, both by design (router/overload.ts): before a worker's load report arrives
    // (or once it is stale) its bookings count against 95% of its pool, two 40-block requests
    // each; with a fresh report of an idle worker only bookings past twice the pool do, four
    // each. Heartbeats decide which one each worker is in, so book until the router refuses:
    // never piled on, each worker holds what its own regime allows and no more.
    const held: RouteRequest[] = [];
    const where: string[] = [];
    let err: unknown;
    let waitedMs = 0;
    try {
      for (let i = 1; i <= 10 && err === undefined; i++) {
        const r = route(`k${i}`, 40);
        const started = Date.now();
        const id = await quick.select(r, ids()).catch((e: unknown) => {
          err = e;
          waitedMs = Date.now() - started;
          return undefined;
        });
        if (id !== undefined) {
          held.push(r);
          where.push(id);
        }
      }
      expect(err).toBeInstanceOf(AllWorkersBusyError);
      expect((err as AllWorkersBusyError).code).toBe('resource_exhausted');
      expect(waitedMs).toBeGreaterThanOrEqual(140);
      // Each worker in its own regime (a fresh report or not, by heartbeat timing): 2 or 4 each.
      for (const id of ids()) expect([2, 4]).toContain(where.filter((w) => w === id).length);
      expect(await refusingRuntime.metrics.getSingleMetricAsString('tandem_router_refused_requests_total')).toMatch(/tandem_router_refused_requests_total\{component="backend",reason="busy_wait"\} 1/);
    } finally {
      held.forEach((h, i) => quick.onFinished(h, where[i]!));
    }
    expect(ids().every((id) => refusingService().load(id).activeSequences === 0)).toBe(true);
    // Closes the refusing backend too (its last user).
    await quick.close().catch(() => undefined);
  });

  it('a pinned request is booked on its worker; a migration moves the booking', async () => {
    const [w0, w1] = ids();
    const pinned = route('p1', 8);
    selector.onRouted(pinned, w1!); // no select: direct header
    expect(service().load(w1!).activeSequences).toBe(1);
    selector.onFinished(pinned, w1!);
    expect(service().load(w1!).activeSequences).toBe(0);

    const r = route('m1', 8);
    const first = await selector.select(r, [w0!]);
    selector.onRouted(r, first!);
    // The worker failed mid-stream: the pipeline re-selects among the others before the old
    // attempt's onFinished, then dispatches the migrated request.
    const second = await selector.select(r, [w1!]);
    selector.onFinished(r, first!);
    selector.onRouted(r, second!);
    expect(service().load(w0!).activeSequences).toBe(0);
    expect(service().load(w1!).activeSequences).toBe(1);
    selector.onFinished(r, second!);
    expect(service().load(w1!).activeSequences).toBe(0);
    expect(selector.inflight).toBe(0);
  });
});
