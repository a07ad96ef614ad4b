/**
 * The frontend's KV selector over the embedded router and real mocker workers whose KV pools
 * are small (64 blocks), so "every worker over its load threshold" can be reached with a few
 * bookings. Backpressure: a request waits (bounded) for a booking to end instead of failing
 * or piling onto a saturated worker; past the wait it fails with resource_exhausted (429).
 * Also: select books at once, a pinned request is booked where it went, and a migration moves
 * the booking.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PreprocessedRequest } from '../../proto/wire.js';
import { KvSelector, createKvSelector } from '../../frontend/kv-selector.js';
import type { RouteRequest } from '../../frontend/routing.js';
import { LocalKvBackend } from '../../router/adapters/kv-routing-backend.js';
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

  beforeAll(async () => {
    stack = await Stack.start(2, { numGpuBlocks: 64 });
    selector = await createKvSelector(await stack.runtime('frontend'), 'tandem');
    // The selector learns each model's component from its cards; the router starts on first use.
    await waitFor('router for backend', async () => {
      const id = await selector.select(route('warm', 1), stack.workers.map((w) => w.id));
      selector.onFinished(route('warm', 1), id!);
      return (selector.backend as LocalKvBackend).hub.started('backend')?.workers().length === 2;
    });
  });
  afterAll(async () => {
    await selector?.close();
    await stack?.close();
  });

  const service = () => (selector.backend as LocalKvBackend).hub.started('backend')!;
  const ids = () => stack.workers.map((w) => w.id);

  it('select books at once, so two concurrent 40-block requests land on different workers', async () => {
    const [a, b] = await Promise.all([selector.select(route('c1', 40), ids()), selector.select(route('c2', 40), ids())]);
    expect(a).not.toBe(b);
    expect(service().load(a!).activeSequences).toBe(1);
    selector.onRouted(route('c1', 40), a!);
    selector.onFinished(route('c1', 40), a!);
    selector.onFinished(route('c2', 40), b!);
    expect(service().load(a!).activeSequences + service().load(b!).activeSequences).toBe(0);
  });

  it('all workers over threshold: the request waits for a booking to end, then routes', async () => {
    // A worker is over threshold once its booked blocks reach 95% of 64: two 40-block
    // requests each (2 × 40 + 2 = 82 blocks ≥ 61).
    const held = ['h1', 'h2', 'h3', 'h4'].map((id) => route(id, 40));
    const where: string[] = [];
    for (const h of held) where.push((await selector.select(h, ids()))!);
    expect(ids().map((id) => where.filter((w) => w === id).length)).toEqual([2, 2]);
    const waiting = selector.select(route('w1', 40), ids());
    await waitFor('request queued', () => selector.queued === 1);
    selector.onFinished(held[0]!, where[0]!);
    // Woken by the freed booking, it goes to the worker that now has room.
    await expect(waiting).resolves.toBe(where[0]);
    expect(selector.queued).toBe(0);
    selector.onFinished(route('w1', 40), where[0]!);
    held.slice(1).forEach((h, i) => selector.onFinished(h, where[i + 1]!));
    expect(ids().every((id) => service().load(id).activeSequences === 0)).toBe(true);
  });

  it('past the bounded wait the request fails with resource_exhausted (429 + Retry-After)', async () => {
    const quick = await KvSelector.start({ backend: selector.backend, discovery: stack.workers[0]!.rt.discovery, namespace: 'tandem', busyWaitMs: 150 });
    await waitFor('cards seen', async () => {
      const id = await quick.select(route('q0', 1), ids());
      quick.onFinished(route('q0', 1), id!);
      return id !== undefined;
    });
    // Two regimes, both by design (router/overload.ts): before a worker's load report arrives
    // (or once it is stale) its bookings count against 95% of its pool, two 40-block requests
    // each; with a fresh report of an idle worker only bookings past twice the pool do, four
    // each. Heartbeats decide which one this run sees, so book until the router refuses.
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
      expect([4, 8]).toContain(held.length);
      // Never piled on: each worker got its share and no more.
      expect(ids().map((id) => where.filter((w) => w === id).length)).toEqual([held.length / 2, held.length / 2]);
    } finally {
      held.forEach((h, i) => quick.onFinished(h, where[i]!));
    }
    expect(ids().every((id) => service().load(id).activeSequences === 0)).toBe(true);
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
