/**
 * `RadixIndexer`, the event-fed index: the `KvIndexer` contract (kv-indexer.contract.ts) fed
 * through a `FakeKvWorker`'s Stored/Removed/Cleared events, then what only an event-fed index
 * has: parents named by sequence hash, orphans, dumps, anomaly counters, the parent cache.
 */
import { describe, expect, it } from 'vitest';
import type { KvEvent } from '../../proto/wire.js';
import { blockHashes } from '../../router/hashing.js';
import { RadixIndexer } from '../../router/radix-indexer.js';
import { FakeKvWorker, prompt, tokens } from './fixtures.js';
import { kvIndexerContract } from './kv-indexer.contract.js';

const BS = 4;
const localOf = (p: readonly number[]) => blockHashes(p, BS).local;
const seqStrings = (p: readonly number[]) => blockHashes(p, BS).seq.map(String);

/** A fake worker wired straight into an indexer (events applied in order). */
function feed(index: RadixIndexer, worker: FakeKvWorker, ...prompts: number[][]): void {
  for (const p of prompts) {
    const e = worker.store(p);
    if (e !== undefined) index.applyEvent(e.workerId, e.data);
  }
}

kvIndexerContract('RadixIndexer (KV events)', () => ({
  blockSize: BS,
  ttlMs: undefined,
  create: () => {
    const index = new RadixIndexer();
    const workers = new Map<string, FakeKvWorker>();
    const worker = (id: string): FakeKvWorker => {
      let w = workers.get(id);
      if (w === undefined) workers.set(id, (w = new FakeKvWorker(id, BS)));
      return w;
    };
    const apply = (e: KvEvent | undefined): void => {
      if (e !== undefined) index.applyEvent(e.workerId, e.data);
    };
    return {
      index,
      store: (id, p) => apply(worker(id).store(p)),
      advance: () => {},
      removeWorker: (id) => {
        index.removeWorker(id);
        workers.delete(id); // a restarted worker starts from an empty cache and event id 0
      },
      evict: (id, hashes) => apply(worker(id).remove(hashes)),
      clear: (id) => apply(worker(id).clear()),
      blocksOf: (id) => index.blocksOf(id),
      roundTrip: () => {
        const copy = new RadixIndexer();
        copy.load(JSON.parse(JSON.stringify(index.dump())));
        return copy;
      },
    };
  },
}));

describe('RadixIndexer', () => {
  const sys = tokens(1, 16); // 4 shared blocks
  const p1 = [...sys, ...tokens(2, 8)]; // 6 blocks
  const p2 = [...sys, ...tokens(3, 8)]; // diverges after block 4

  it('counts only LEADING blocks: a worker missing block 0 has overlap 0', () => {
    const index = new RadixIndexer();
    const a = new FakeKvWorker('a', BS);
    feed(index, a, p1);
    // c holds blocks 1..5 of p1, announced under a's block 0.
    const { local, seq } = blockHashes(p1, BS);
    index.applyEvent('c', {
      type: 'stored',
      parentHash: seq[0]!.toString(),
      blocks: seq.slice(1).map((s, i) => ({ blockHash: s.toString(), tokensHash: local[i + 1]!.toString() })),
    });
    const m = index.findMatches(local);
    expect(m.depths.get('a')).toBe(6);
    expect(m.depths.has('c')).toBe(false);
  });

  it('dump() then load() into a fresh index gives the same view', () => {
    const index = new RadixIndexer();
    const a = new FakeKvWorker('a', BS);
    const b = new FakeKvWorker('b', BS);
    feed(index, a, p1, prompt(9, 12, 1, 4));
    feed(index, b, p2, sys);
    index.applyEvent('a', a.remove([seqStrings(p1)[5]!]).data);
    const copy = new RadixIndexer();
    copy.load(JSON.parse(JSON.stringify(index.dump())));
    for (const w of ['a', 'b']) expect(copy.blocksOf(w).sort()).toEqual(index.blocksOf(w).sort());
    for (const p of [p1, p2, sys, prompt(9, 12, 1, 4)]) {
      expect(copy.findMatches(localOf(p)).depths).toEqual(index.findMatches(localOf(p)).depths);
    }
    expect(copy.stats()).toEqual(index.stats());
  });

  it('an orphan (parent never seen) is unreachable until its parent arrives', () => {
    const index = new RadixIndexer();
    const { local, seq } = blockHashes(p1, BS);
    const block = (i: number) => ({ blockHash: seq[i]!.toString(), tokensHash: local[i]!.toString() });
    index.applyEvent('a', { type: 'stored', parentHash: seq[0]!.toString(), blocks: [block(1)] });
    expect(index.anomalies.orphanBlocks).toBe(1);
    index.applyEvent('a', { type: 'stored', blocks: [block(0)] });
    expect(index.findMatches(local).depths.get('a')).toBe(1);
    // Re-announcing block 1 under its now-known parent links it.
    index.applyEvent('a', { type: 'stored', parentHash: seq[0]!.toString(), blocks: [block(1)] });
    expect(index.findMatches(local).depths.get('a')).toBe(2);
  });

  it('malformed hashes are counted, not thrown', () => {
    const index = new RadixIndexer();
    index.applyEvent('a', { type: 'stored', blocks: [{ blockHash: '1', tokensHash: 'zz' }] });
    index.applyEvent('a', { type: 'removed', blockHashes: ['42'] });
    expect(index.anomalies).toMatchObject({ malformedHashes: 1, unknownRemovals: 1 });
    expect(index.stats().entries).toBe(0);
  });

  it('a parent cached from a worker\'s last event is not trusted after that node was freed and its id reused', () => {
    const index = new RadixIndexer();
    const a = new FakeKvWorker('a', BS);
    const p1 = prompt(1, 8, 1, 0); // 2 blocks
    const { local, seq } = blockHashes(p1, BS);
    index.applyEvent('a', a.store(p1)!.data);
    // Evict both blocks: their nodes are freed; new unrelated blocks take the freed ids.
    index.applyEvent('a', a.remove(seq.map(String)).data);
    expect(index.stats().nodes).toBe(0);
    const other = blockHashes(prompt(9, 8, 9, 0), BS);
    index.applyEvent('b', new FakeKvWorker('b', BS).store(prompt(9, 8, 9, 0))!.data);
    expect(index.stats().nodes).toBe(2); // both freed ids are taken again
    // 'a' now announces a block under its old last block (gone): it must be an orphan, not a
    // child of whatever node reuses that id.
    index.applyEvent('a', { type: 'stored', parentHash: seq[1]!.toString(), blocks: [{ blockHash: '12345', tokensHash: local[0]!.toString() }] });
    expect(index.anomalies.orphanBlocks).toBe(1);
    expect(index.findMatches([...other.local, local[0]!]).depths).toEqual(new Map([['b', 2]]));
  });

  it('an unparsable Removed hash counts as an unknown removal; a malformed block hash stops its chain', () => {
    const index = new RadixIndexer();
    index.applyEvent('a', { type: 'removed', blockHashes: ['not-a-hash', '-1'] });
    expect(index.anomalies.unknownRemovals).toBe(2);
    index.applyEvent('a', { type: 'stored', blocks: [{ blockHash: '5', tokensHash: '6' }, { blockHash: 'x', tokensHash: '7' }, { blockHash: '8', tokensHash: '9' }] });
    expect(index.anomalies.malformedHashes).toBe(1);
    expect(index.blocksOf('a')).toEqual(['5']);
    // A Stored event with no blocks changes nothing (and must not throw).
    index.applyEvent('a', { type: 'stored', parentHash: '5', blocks: [] });
    expect(index.stats().entries).toBe(1);
  });
});
