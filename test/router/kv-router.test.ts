import { describe, expect, it } from 'vitest';
import { ApproxIndexer } from '../../router/approx-indexer.js';
import { blockHashes } from '../../router/hashing.js';
import { KvRouter, type RouteResult, type WorkerCandidate } from '../../router/kv-router.js';
import type { RecoveryAction } from '../../router/recovery-protocol.js';
import { FakeKvWorker, prompt, tokens } from './fixtures.js';

const BS = 16;

function routed(r: RouteResult) {
  if (r.kind !== 'routed') throw new Error(`expected routed, got ${r.kind}`);
  return r.decision;
}

/** Router plus fake workers, connected the way the adapters will connect them. */
function fleet(ids: string[], config = {}) {
  const router = new KvRouter({ blockSize: BS, ...config });
  const workers = new Map(ids.map((id) => [id, new FakeKvWorker(id, BS)]));
  for (const w of workers.values()) {
    expect(router.addWorker(w.workerId, 0)).toEqual([{ type: 'request_dump', workerId: w.workerId }]);
    router.applyDump(w.dump(), 0);
  }
  const candidates: WorkerCandidate[] = ids.map((instanceId) => ({ instanceId }));
  return { router, workers, candidates };
}

describe('KvRouter: hot prefix', () => {
  it('every request shares one long prefix: load spreads (busiest ≤ 2× least busy) and the prefix is reused', () => {
    const { router, workers, candidates } = fleet(['w0', 'w1', 'w2', 'w3']);
    const routes = new Map<string, number>();
    const firstTokenAt = new Map<number, string[]>();
    const finishAt = new Map<number, string[]>();
    const later = (m: Map<number, string[]>, t: number, id: string) => m.set(t, [...(m.get(t) ?? []), id]);
    let overlapped = 0;
    const N = 400;
    for (let t = 0; t < N + 30; t++) {
      for (const id of firstTokenAt.get(t) ?? []) router.onFirstToken(id, t);
      for (const id of finishAt.get(t) ?? []) router.onFinished(id, t);
      if (t >= N) continue;
      // 64-block (1024-token) shared prefix + 4 private blocks.
      const p = prompt(1, 64 * BS, t, 4 * BS);
      const d = routed(router.route({ requestId: `r${t}`, tokens: p }, candidates, t));
      routes.set(d.instanceId, (routes.get(d.instanceId) ?? 0) + 1);
      if (d.overlapBlocks >= 64) overlapped++;
      // The worker prefills and publishes its new blocks.
      const e = workers.get(d.instanceId)!.store(p);
      if (e !== undefined) expect(router.applyEvent(e, t)).toEqual([]);
      later(firstTokenAt, t + 3, d.requestId);
      later(finishAt, t + 24, d.requestId);
    }
    const counts = [...routes.values()];
    expect(counts).toHaveLength(4);
    expect(Math.max(...counts)).toBeLessThanOrEqual(2 * Math.min(...counts));
    // Only each worker's first request misses the prefix.
    expect(overlapped).toBeGreaterThanOrEqual(N - 4);
    expect(router.stats().activeSequences).toBe(0);
  });
});

describe('KvRouter: event recovery', () => {
  it('gap: a dropped event is asked for by exact range and replay makes the view equal the worker\'s set', () => {
    const { router, workers } = fleet(['w']);
    const w = workers.get('w')!;
    const p1 = tokens(1, 8 * BS);
    expect(router.applyEvent(w.store(p1)!, 1)).toEqual([]);
    // Lost on the wire: a store and a removal.
    w.store(prompt(1, 4 * BS, 2, 6 * BS));
    w.remove([blockHashes(p1, BS).seq[7]!.toString()]);
    const actions = router.applyEvent(w.store(tokens(3, 3 * BS))!, 2);
    expect(actions).toEqual([{ type: 'request_replay', workerId: 'w', fromEventId: 1, toEventId: 2 }]);
    expect(router.eventIndex!.blocksOf('w').sort()).not.toEqual(w.blockSet());
    expect(router.applyReplay(w.replay(1, 2), 3)).toEqual([]);
    expect(router.eventIndex!.blocksOf('w').sort()).toEqual(w.blockSet());
    expect(router.stats().sequencer).toMatchObject({ gapsDetected: 1, gapsRecovered: 1 });
  });

  it('replay too old: falls back to a dump and still converges', () => {
    const router = new KvRouter({ blockSize: BS });
    const w = new FakeKvWorker('w', BS, 2); // keeps only its last 2 events
    router.addWorker('w', 0);
    router.applyDump(w.dump(), 0);
    for (let i = 0; i < 5; i++) w.store(tokens(10 + i, 4 * BS)); // ids 0..4 all lost
    const e = w.store(tokens(20, 4 * BS))!;
    const replay = router.applyEvent(e, 1);
    expect(replay).toEqual([{ type: 'request_replay', workerId: 'w', fromEventId: 0, toEventId: 4 }]);
    const answer = w.replay(0, 4);
    expect(answer.type).toBe('too_old');
    expect(router.applyReplay(answer, 2)).toEqual([{ type: 'request_dump', workerId: 'w' }]);
    router.applyDump(w.dump(), 3);
    expect(router.eventIndex!.blocksOf('w').sort()).toEqual(w.blockSet());
    // Live events continue right after the dump.
    expect(router.applyEvent(w.store(tokens(21, 4 * BS))!, 4)).toEqual([]);
    expect(router.eventIndex!.blocksOf('w').sort()).toEqual(w.blockSet());
  });

  it('a restarted router rebuilds its index from dumps', () => {
    const { router, workers, candidates } = fleet(['a', 'b']);
    for (let i = 0; i < 6; i++) {
      const p = prompt(1, 8 * BS, i, 2 * BS);
      const d = routed(router.route({ requestId: `r${i}`, tokens: p }, candidates, i));
      router.applyEvent(workers.get(d.instanceId)!.store(p)!, i);
    }
    const restarted = new KvRouter({ blockSize: BS });
    const asks: RecoveryAction[] = [];
    for (const id of ['a', 'b']) asks.push(...restarted.addWorker(id, 100));
    expect(asks.map((a) => a.type)).toEqual(['request_dump', 'request_dump']);
    for (const w of workers.values()) restarted.applyDump(w.dump(), 101);
    const probe = blockHashes(prompt(1, 8 * BS, 3, 2 * BS), BS).local;
    expect(restarted.indexer.findMatches(probe).depths).toEqual(router.indexer.findMatches(probe).depths);
    for (const id of ['a', 'b']) expect(restarted.eventIndex!.blocksOf(id).sort()).toEqual(workers.get(id)!.blockSet());
  });

  it('worker removal drops its blocks and its bookings', () => {
    const { router, workers, candidates } = fleet(['a', 'b']);
    const p = tokens(4, 6 * BS);
    router.applyEvent(workers.get('a')!.store(p)!, 0);
    routed(router.route({ requestId: 'r', tokens: p }, candidates, 0));
    expect(router.workerLoad('a').activeSequences).toBe(1);
    router.removeWorker('a');
    expect(router.indexer.findMatches(blockHashes(p, BS).local).depths.size).toBe(0);
    expect(router.workerLoad('a').activeSequences).toBe(0);
    expect(router.stats().index.workers).toBe(1);
  });
});

describe('KvRouter: replica sync', () => {
  it('two replicas exchanging router_sync agree on every worker\'s load under a stream of routes', () => {
    const ids = ['w0', 'w1', 'w2'];
    const candidates = ids.map((instanceId) => ({ instanceId }));
    const a = new KvRouter({ blockSize: BS, replicaId: 'A', seed: 1 });
    const b = new KvRouter({ blockSize: BS, replicaId: 'B', seed: 2 });
    const unsynced = new KvRouter({ blockSize: BS, replicaId: 'C', seed: 1 });
    const owner = new Map<string, KvRouter>();
    for (let t = 0; t < 120; t++) {
      const replica = t % 2 === 0 ? a : b;
      const other = replica === a ? b : a;
      const id = `r${t}`;
      const d = routed(replica.select({ requestId: id, tokens: prompt(1, 4 * BS, t, 2 * BS) }, candidates));
      const up = replica.admit(d, t)!;
      expect(other.applySync(replica.syncMessage([up]), t)).toBe(1);
      if (replica === a) unsynced.admit(d, t);
      owner.set(id, replica);
      const done = `r${t - 5}`;
      const r = owner.get(done);
      if (r !== undefined) {
        const o = r === a ? b : a;
        const u1 = r.onFirstToken(done, t)!;
        o.applySync(r.syncMessage([u1]), t);
        if (t % 3 === 0) {
          const u2 = r.onFinished(done, t)!;
          o.applySync(r.syncMessage([u2]), t);
        }
      }
      for (const w of ids) expect(b.workerLoad(w)).toEqual(a.workerLoad(w));
    }
    // Own messages are ignored, and without sync the views differ.
    expect(a.applySync(a.syncMessage([{ type: 'free', requestId: 'r1' }]), 200)).toBe(0);
    const total = (r: KvRouter) => ids.reduce((s, w) => s + r.workerLoad(w).activeSequences, 0);
    expect(total(unsynced)).toBeLessThan(total(a));
  });
});

describe('approximate mode (no KV events)', () => {
  it('ApproxIndexer: a routed prefix is assumed cached for ttlMs; reuse refreshes it', () => {
    const idx = new ApproxIndexer({ ttlMs: 1000 });
    const local = blockHashes(tokens(1, 4 * BS), BS).local;
    idx.record('w', local, 0);
    expect(idx.findMatches(local).depths.get('w')).toBe(4);
    idx.record('w', local.slice(0, 2), 600); // a later request shared the first 2 blocks
    idx.expire(999);
    expect(idx.findMatches(local).depths.get('w')).toBe(4);
    idx.expire(1000);
    expect(idx.findMatches(local).depths.get('w')).toBe(2);
    idx.expire(1600);
    expect(idx.findMatches(local).depths.size).toBe(0);
    expect(idx.stats()).toMatchObject({ nodes: 0, entries: 0 });
  });

  it('KvRouter learns from its own decisions: the next request with the prefix follows, until the TTL', () => {
    const router = new KvRouter({ blockSize: BS, useKvEvents: false, approxTtlMs: 1000 });
    const candidates = [{ instanceId: 'a' }, { instanceId: 'b' }];
    const p = (i: number) => prompt(1, 8 * BS, i, BS);
    const first = routed(router.route({ requestId: 'r1', tokens: p(1) }, candidates, 0));
    router.onFinished('r1', 10);
    const second = routed(router.route({ requestId: 'r2', tokens: p(2) }, candidates, 500));
    expect(second.instanceId).toBe(first.instanceId);
    expect(second.overlapBlocks).toBe(8);
    router.onFinished('r2', 510);
    // r2 refreshed the prefix at 500, so it is forgotten at 1500.
    expect(routed(router.route({ requestId: 'r3', tokens: p(3) }, candidates, 1499)).overlapBlocks).toBe(8);
    router.onFinished('r3', 1499);
    router.expire(2499);
    expect(router.indexer.findMatches(blockHashes(p(4), BS).local).depths.size).toBe(0);
    expect(router.addWorker('a', 0)).toEqual([]); // no dumps to ask for without events
  });
});
