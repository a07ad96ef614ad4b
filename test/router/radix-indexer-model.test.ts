/**
 * The struct-of-arrays `RadixIndexer` checked against the simplest model of what it must
 * answer: per worker, the set of sequence hashes it holds, and for a request the number of
 * LEADING blocks of the request's chain in that set. Random stores, evictions (leaves and
 * middles), Cleared, worker removal and re-stores, so that nodes are freed and their ids and
 * table slots reused while other workers still hold neighbours.
 */
import { describe, expect, it } from 'vitest';
import { blockHashes } from '../../router/hashing.js';
import { RadixIndexer } from '../../router/radix-indexer.js';
import { SeededRng } from '../../router/random.js';
import { FakeKvWorker, prompt } from './fixtures.js';

const BS = 4;

describe('RadixIndexer against a set-per-worker model', () => {
  it('answers findMatches, stats and blocksOf like the model through 3000 random events', () => {
    const rng = new SeededRng(2024);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rng.next() * xs.length)]!;
    // 6 shared prefixes × 12 suffixes, 2–9 blocks each: heavy sharing and branching.
    const prompts = Array.from({ length: 72 }, (_, i) => prompt(i % 6, 4 * (1 + (i % 4)), i, 4 * (1 + (i % 6))));
    const chains = prompts.map((p) => blockHashes(p, BS));
    const workers = Array.from({ length: 5 }, (_, w) => new FakeKvWorker(`w${w}`, BS));
    const held = new Map<string, Set<string>>(workers.map((w) => [w.workerId, new Set()]));
    const index = new RadixIndexer();

    const check = () => {
      let entries = 0;
      for (const w of workers) {
        const set = held.get(w.workerId)!;
        entries += set.size;
        if (index.hasWorker(w.workerId)) expect(index.blocksOf(w.workerId).sort()).toEqual([...set].sort());
      }
      expect(index.stats().entries).toBe(entries);
      for (const c of chains) {
        const got = index.findMatches(c.local);
        for (const w of workers) {
          const set = held.get(w.workerId)!;
          let depth = 0;
          while (depth < c.seq.length && set.has(c.seq[depth]!.toString())) depth++;
          expect(got.depths.get(w.workerId) ?? 0).toBe(depth);
        }
      }
    };

    for (let step = 0; step < 3000; step++) {
      const w = pick(workers);
      const set = held.get(w.workerId)!;
      const r = rng.next();
      if (r < 0.55) {
        const e = w.store(pick(prompts));
        if (e === undefined) continue;
        index.applyEvent(w.workerId, e.data);
        if (e.data.type === 'stored') for (const b of e.data.blocks) set.add(b.blockHash);
      } else if (r < 0.93 && set.size > 0) {
        // Evict 1–3 held blocks, anywhere in their chains (a middle block cuts the run there).
        const victims = [...new Set(Array.from({ length: 1 + Math.floor(rng.next() * 3) }, () => pick([...set])))];
        index.applyEvent(w.workerId, w.remove(victims).data);
        for (const v of victims) set.delete(v);
      } else if (r < 0.97) {
        index.applyEvent(w.workerId, w.clear().data);
        set.clear();
      } else {
        index.removeWorker(w.workerId);
        workers.splice(workers.indexOf(w), 1, new FakeKvWorker(w.workerId, BS));
        set.clear();
      }
      if (step % 150 === 0) check();
    }
    check();
    expect(index.anomalies.labelConflicts).toBe(0);

    // A dump loaded into a fresh index answers the same.
    const copy = new RadixIndexer();
    copy.load(JSON.parse(JSON.stringify(index.dump())));
    for (const c of chains) expect(copy.findMatches(c.local).depths).toEqual(index.findMatches(c.local).depths);
    expect(copy.stats()).toMatchObject({ entries: index.stats().entries, nodes: index.stats().nodes });

    // Everyone gone: every node and table entry is released.
    for (const w of workers) index.removeWorker(w.workerId);
    expect(index.stats()).toMatchObject({ nodes: 0, entries: 0, workers: 0 });
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
