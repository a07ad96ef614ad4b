/**
 * The contract every `KvRoutingBackend` passes: `LocalKvBackend` (the router inside the
 * frontend process, over a `KvRouterHub`) and `RemoteKvBackend` (standalone replicas over
 * `{ns}/router/route`). A backend's test file calls `kvRoutingBackendContract(name, harness)`;
 * `open` starts a fresh router (its own hub, or its own replica under its own component) in
 * front of the shared stack of real mocker workers, and says which `KvRouterService` the
 * backend's calls reach, so the tests check the router's bookings, not only the answers.
 *
 * Lifecycle calls are fire-and-forget (remote ones travel over the request plane), so the
 * tests wait for their effect; `close` must wait for the ones already made.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { RouteTarget } from '../../proto/wire.js';
import type { KvRouterService } from '../../router/adapters/kv-router-service.js';
import type { KvRoutingBackend } from '../../router/adapters/kv-routing-backend.js';
import { blockHashes } from '../../router/hashing.js';
import type { KvRouterConfig } from '../../router/kv-router.js';
import { BLOCK, type Stack, tokens, waitFor } from './stack.js';

export interface BackendUnderTest {
  backend: KvRoutingBackend;
  /** The router service the backend's calls reach for component `backend`, once started. */
  service(): KvRouterService | undefined;
  /** Stop what `open` started besides the backend (called after `backend.close()`). */
  stop(): Promise<void>;
}

export interface KvRoutingBackendHarness {
  /** The running workers (component `backend`, namespace `tandem`, block size `BLOCK`). */
  stack(): Stack;
  /** A backend over a router of its own, with `router` overriding the router's config. */
  open(router?: Partial<KvRouterConfig>): Promise<BackendUnderTest>;
}

const TARGET: RouteTarget = { component: 'backend', blockSize: BLOCK };

export function kvRoutingBackendContract(name: string, harness: () => KvRoutingBackendHarness): void {
  describe(`KvRoutingBackend contract: ${name}`, () => {
    const opened: BackendUnderTest[] = [];
    let seed = name.length * 100_000;
    /** A prompt no other test (or other backend's run) shares a block with. */
    const fresh = (blocks: number): number[] => tokens(++seed, blocks * BLOCK);
    const ids = () => harness().stack().workers.map((w) => w.id);

    afterEach(async () => {
      for (const b of opened.splice(0)) {
        await b.backend.close();
        await b.stop();
      }
    });

    /** A backend whose router has started and follows every worker. */
    const open = async (router?: Partial<KvRouterConfig>): Promise<BackendUnderTest & { svc: () => KvRouterService }> => {
      const b = await harness().open(router);
      opened.push(b);
      // An empty candidate list starts the router for the component and books nothing.
      expect(await b.backend.route(TARGET, 'warm-up', fresh(1), [])).toEqual({ kind: 'no_candidates' });
      const svc = await waitFor('router started', () => b.service());
      await waitFor('workers followed', () => svc.workers().length === ids().length);
      return { ...b, svc: () => svc };
    };

    it('latency cost: the first token and the end of the stream (with its output length) reach the router that routed it and calibrate that worker', async () => {
      const b = await open({ cost: 'latency' });
      const [w0] = ids();
      const routed = await b.backend.route(TARGET, 'lat-1', fresh(4), [w0!]);
      expect(routed).toMatchObject({ kind: 'routed', instanceId: w0 });
      const latency = () => b.svc().router.latency!;
      expect(latency().pendingCount).toBe(1);
      // A measurement of 0 ms (first token in the same clock millisecond as the route, which an
      // in-process router can see) is no sample: calibration takes positive times only.
      await new Promise((r) => setTimeout(r, 5));
      b.backend.firstToken(TARGET, 'lat-1');
      await waitFor('TTFT sample', () => latency().calibration.of(w0!, Date.now()).ttftSamples === 1);
      await new Promise((r) => setTimeout(r, 20));
      b.backend.finished(TARGET, 'lat-1', 5);
      await waitFor('ITL sample', () => latency().calibration.of(w0!, Date.now()).itlSamples === 1);
      expect(latency().pendingCount).toBe(0);
      expect(latency().meanOutputTokens).toBeCloseTo(0.9 * 128 + 0.1 * 5, 6);
    });

    it('route picks a candidate and books it at once, so the next request sees the booking', async () => {
      const b = await open();
      const [w0, w1] = ids();
      const first = await b.backend.route(TARGET, 'r1', fresh(5), [w0!, w1!]);
      expect(first).toMatchObject({ kind: 'routed', overlapBlocks: 0 });
      if (first.kind !== 'routed') return;
      expect([w0, w1]).toContain(first.instanceId);
      expect(b.svc().load(first.instanceId)).toMatchObject({ activeSequences: 1, pendingPrefillBlocks: 5 });
      // Equal prompts, no cache anywhere: only the booking tells the two workers apart.
      const second = await b.backend.route(TARGET, 'r2', fresh(5), [w0!, w1!]);
      expect(second).toMatchObject({ kind: 'routed' });
      if (second.kind === 'routed') expect(second.instanceId).not.toBe(first.instanceId);
      // A single candidate is the only choice.
      expect(await b.backend.route(TARGET, 'r3', fresh(1), [w1!])).toMatchObject({ kind: 'routed', instanceId: w1 });
      for (const r of ['r1', 'r2', 'r3']) b.backend.finished(TARGET, r);
      await waitFor('bookings freed', () => b.svc().router.stats().activeSequences === 0);
    });

    it('firstToken ends the pending prefill and keeps the sequence; finished frees it', async () => {
      const b = await open();
      const out = await b.backend.route(TARGET, 'ft', fresh(3), ids());
      if (out.kind !== 'routed') throw new Error(`expected routed, got ${out.kind}`);
      b.backend.firstToken(TARGET, 'ft');
      await waitFor('prefill done', () => b.svc().load(out.instanceId).pendingPrefillBlocks === 0);
      expect(b.svc().load(out.instanceId)).toMatchObject({ activeSequences: 1, activeBlocks: 3 + 1 });
      b.backend.finished(TARGET, 'ft');
      await waitFor('freed', () => b.svc().load(out.instanceId).activeSequences === 0);
      expect(b.svc().load(out.instanceId)).toEqual({ activeSequences: 0, activeBlocks: 0, pendingPrefillBlocks: 0, pendingPrefillTokens: 0 });
    });

    it('book records a request sent elsewhere (pinned) on the named worker, with nothing routed before', async () => {
      const b = await harness().open();
      opened.push(b);
      const w1 = ids()[1]!;
      b.backend.book(TARGET, 'pinned', fresh(4), w1);
      const svc = await waitFor('booked', () => (b.service()?.load(w1).activeSequences === 1 ? b.service() : undefined));
      expect(svc.load(w1)).toMatchObject({ pendingPrefillBlocks: 4 });
      b.backend.finished(TARGET, 'pinned');
      await waitFor('freed', () => svc.load(w1).activeSequences === 0);
    });

    it('reports the overlap: a prompt a worker has cached goes there, with its cached blocks (unless told to score without)', async () => {
      const b = await open();
      const [w0, w1] = ids();
      const prefix = fresh(4);
      await harness().stack().generate(w1!, prefix, 4);
      const seq = blockHashes(prefix, BLOCK).seq.map(String);
      await waitFor('the router indexed the prefix', () => seq.every((s) => b.svc().blocksOf(w1!).includes(s)));
      // A little load on w1, so that the 4 cached blocks decide: 6-block prompt, w0 costs 6;
      // w1 costs max(0, 6 + 1 − 4) + 2 = 5 with the credit, 6 + 1 + 2 = 9 without.
      b.backend.book(TARGET, 'load', fresh(1), w1!);
      await waitFor('load booked', () => b.svc().load(w1!).activeSequences === 1);
      const prompt = [...prefix, ...fresh(2)];
      // A decode leg that receives the KV by transfer is scored without the credit.
      const decode = await b.backend.route(TARGET, 'decode', prompt, [w0!, w1!], { noOverlapCredit: true });
      expect(decode).toEqual({ kind: 'routed', instanceId: w0, overlapBlocks: 0 });
      b.backend.finished(TARGET, 'decode');
      await waitFor('decode freed', () => b.svc().load(w0!).activeSequences === 0);
      expect(await b.backend.route(TARGET, 'hit', prompt, [w0!, w1!])).toEqual({ kind: 'routed', instanceId: w1, overlapBlocks: 4 });
      for (const r of ['load', 'hit']) b.backend.finished(TARGET, r);
      await waitFor('freed', () => b.svc().router.stats().activeSequences === 0);
    });

    it('answers no_candidates for an empty candidate list and books nothing', async () => {
      const b = await open();
      expect(await b.backend.route(TARGET, 'none', fresh(2), [])).toEqual({ kind: 'no_candidates' });
      expect(b.svc().router.stats().activeSequences).toBe(0);
    });

    it('answers all_busy with the router\'s Retry-After when refusal is on and every candidate is busy, and books nothing', async () => {
      // Refusal at KV usage 0: every worker is busy by it, reported or not.
      const b = await open({ refusal: { kvUsage: 0 }, busyRetryAfterMs: 1234 });
      expect(await b.backend.route(TARGET, 'busy', fresh(2), ids())).toEqual({ kind: 'all_busy', retryAfterMs: 1234 });
      expect(b.svc().router.stats().activeSequences).toBe(0);
    });

    it('close waits for the lifecycle calls already made', async () => {
      const b = await open();
      const outs = await Promise.all(['c1', 'c2', 'c3'].map((r) => b.backend.route(TARGET, r, fresh(2), ids())));
      expect(outs.every((o) => o.kind === 'routed')).toBe(true);
      expect(b.svc().router.stats().activeSequences).toBe(3);
      for (const r of ['c1', 'c2', 'c3']) {
        b.backend.firstToken(TARGET, r);
        b.backend.finished(TARGET, r);
      }
      opened.splice(opened.indexOf(b), 1);
      await b.backend.close();
      // No waiting here: close resolved only after every call above reached the router.
      expect(b.svc().router.stats().activeSequences).toBe(0);
      await b.stop();
    });
  });
}
