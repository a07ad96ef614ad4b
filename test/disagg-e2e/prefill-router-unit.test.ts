/**
 * PrefillRouter.route without HTTP: the uncached part comes from a KV-aware selector's
 * overlapTokens, the decode leg is re-selected with noOverlapCredit, and a cursor selector's
 * first pick is kept (re-selecting would skip a worker on every request).
 */
import { describe, expect, it } from 'vitest';
import type { ServedModel } from '../../frontend/model-watcher.js';
import { PrefillRouter, type PrefixOverlapSource } from '../../frontend/disagg/prefill-router.js';
import type { PrefillWorkers } from '../../frontend/disagg/prefill-pool.js';
import { RoundRobinSelector, type RouteRequest, type WorkerSelector } from '../../frontend/routing.js';
import type { InstanceId, PreprocessedRequest } from '../../proto/wire.js';
import { makeCard } from '../frontend/fakes.js';

const roles: Record<InstanceId, 'decode' | 'agg'> = { d1: 'decode', d2: 'decode', a1: 'agg' };
const model: ServedModel = {
  name: 'm',
  candidates: () => Object.keys(roles).sort(),
  card: (id) => (roles[id] ? makeCard({ instanceId: id, role: roles[id] }) : undefined),
  primaryCard: () => makeCard(),
  contextLength: () => 100_000,
  generate: () => {
    throw new Error('not used');
  },
};
const pool: PrefillWorkers = {
  candidates: () => ['p1', 'p2'],
  card: (_m, id) => makeCard({ instanceId: id, role: 'prefill', component: 'prefill' }),
  generate: () => {
    throw new Error('not used');
  },
  release: async () => undefined,
};
const request = (n: number): PreprocessedRequest => ({ requestId: 'r', model: 'm', tokenIds: Array.from({ length: n }, (_, i) => i), sampling: {}, stop: { maxTokens: 8, stopTokenIds: [], ignoreEos: false } });

/** Caches 900 tokens on d1; records every select. */
class KvLikeSelector implements WorkerSelector, PrefixOverlapSource {
  readonly mode = 'kv' as const;
  readonly selects: Array<{ noOverlapCredit: boolean; candidates: readonly InstanceId[] }> = [];
  select(route: RouteRequest, candidates: readonly InstanceId[]): InstanceId {
    this.selects.push({ noOverlapCredit: route.noOverlapCredit === true, candidates });
    return route.noOverlapCredit ? candidates[candidates.length - 1]! : 'd1';
  }
  overlapTokens(_route: RouteRequest, id: InstanceId): number {
    return id === 'd1' ? 900 : 0;
  }
}

describe('PrefillRouter.route', () => {
  it('a prompt mostly cached on the chosen worker stays aggregated there', async () => {
    const router = new PrefillRouter({ pool, minPrefillTokens: 512 });
    const selector = new KvLikeSelector();
    // 1200 tokens, 900 cached on d1 → 300 uncached < 512.
    const outcome = await router.route(model, request(1200), 'd1', selector, false);
    expect(outcome).toMatchObject({ kind: 'agg', decision: { reason: 'short_prompt', uncachedTokens: 300 } });
  });

  it('a disaggregated decode leg is re-selected among decode workers with no overlap credit', async () => {
    const router = new PrefillRouter({ pool, minPrefillTokens: 512 });
    const selector = new KvLikeSelector();
    const outcome = await router.route(model, request(2000), 'd1', selector, false);
    expect(outcome).toEqual({ kind: 'disagg', route: { prefillInstance: 'p1', decodeInstance: 'd2', uncachedTokens: 1100 } });
    expect(selector.selects).toEqual([{ noOverlapCredit: true, candidates: ['d1', 'd2'] }]);
  });

  it('round-robin: the first pick is kept when it is a decode worker, replaced when it is an agg worker', async () => {
    const router = new PrefillRouter({ pool, minPrefillTokens: 512 });
    const rr = new RoundRobinSelector();
    expect(await router.route(model, request(600), 'd2', rr, false)).toMatchObject({ kind: 'disagg', route: { decodeInstance: 'd2' } });
    const fromAgg = await router.route(model, request(600), 'a1', rr, false);
    expect(fromAgg.kind).toBe('disagg');
    expect(['d1', 'd2']).toContain(fromAgg.kind === 'disagg' ? fromAgg.route.decodeInstance : '');
    // The prefill pool alternates.
    expect(fromAgg.kind === 'disagg' && fromAgg.route.prefillInstance).toBe('p2');
  });

  it('a request pinned to an agg worker never disaggregates', async () => {
    const router = new PrefillRouter({ pool, minPrefillTokens: 512, enforce: true });
    await expect(router.route(model, request(2000), 'a1', new RoundRobinSelector(), true)).rejects.toMatchObject({ code: 'no_instances' });
    const lax = new PrefillRouter({ pool, minPrefillTokens: 512 });
    expect(await lax.route(model, request(2000), 'a1', new RoundRobinSelector(), true)).toMatchObject({ kind: 'agg', decision: { reason: 'no_decode_workers' } });
  });
});
