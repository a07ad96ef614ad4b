import { describe, expect, it } from 'vitest';
import { blockHashes } from '../../router/hashing.js';
import { RadixIndexer } from '../../router/radix-indexer.js';
import { FakeKvWorker, prompt, tokens } from './fixtures.js';

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

describe('RadixIndexer', () => {
  const sys = tokens(1, 16); // 4 shared blocks
  const p1 = [...sys, ...tokens(2, 8)]; // 6 blocks
  const p2 = [...sys, ...tokens(3, 8)]; // diverges after block 4

  it('reports each worker\'s number of leading cached blocks', () => {
    const index = new RadixIndexer();
    const a = new FakeKvWorker('a', BS);
    const b = new FakeKvWorker('b', BS);
    feed(index, a, p1);
    feed(index, b, sys.slice(0, 8));
    const m = index.findMatches(localOf(p1));
    expect(Object.fromEntries(m.depths)).toEqual({ a: 6, b: 2 });
    expect(m.maxDepth).toBe(6);
    // A request that diverges after the shared system prompt.
    expect(Object.fromEntries(index.findMatches(localOf(p2)).depths)).toEqual({ a: 4, b: 2 });
  });

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

  it('accepts local hashes as bigints or decimal strings alike', () => {
    const index = new RadixIndexer();
    feed(index, new FakeKvWorker('a', BS), p1);
    const big = index.findMatches(localOf(p1));
    const str = index.findMatches(localOf(p1).map(String));
    expect(str.depths).toEqual(big.depths);
  });

  it('Removed shortens the overlap at the first missing block; Cleared empties the worker', () => {
    const index = new RadixIndexer();
    const a = new FakeKvWorker('a', BS);
    feed(index, a, p1);
    const e = a.remove([seqStrings(p1)[3]!]);
    index.applyEvent('a', e.data);
    expect(index.findMatches(localOf(p1)).depths.get('a')).toBe(3);
    index.applyEvent('a', a.clear().data);
    expect(index.findMatches(localOf(p1)).depths.size).toBe(0);
    expect(index.stats().entries).toBe(0);
    expect(index.stats().nodes).toBe(0); // fully pruned
  });

  it('shared blocks are one node held by several workers', () => {
    const index = new RadixIndexer();
    feed(index, new FakeKvWorker('a', BS), p1);
    feed(index, new FakeKvWorker('b', BS), p2);
    const s = index.stats();
    expect(s.nodes).toBe(4 + 2 + 2);
    expect(s.entries).toBe(12);
    expect(s.perWorker).toEqual({ a: 6, b: 6 });
  });

  it('removeWorker drops exactly that worker\'s blocks', () => {
    const index = new RadixIndexer();
    feed(index, new FakeKvWorker('a', BS), p1);
    feed(index, new FakeKvWorker('b', BS), p2);
    index.removeWorker('a');
    expect(index.blocksOf('a')).toEqual([]);
    expect(index.findMatches(localOf(p1)).depths).toEqual(new Map([['b', 4]]));
    expect(index.stats()).toMatchObject({ nodes: 6, entries: 6, workers: 1, perWorker: { b: 6 } });
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

  it('handles more workers than one bitset word (70 workers)', () => {
    const index = new RadixIndexer();
    for (let w = 0; w < 70; w++) feed(index, new FakeKvWorker(`w${w}`, BS), [...sys, ...tokens(100 + w, 4 * (w % 5))]);
    const m = index.findMatches(localOf(p1));
    expect(m.depths.size).toBe(70);
    expect([...m.depths.values()].every((d) => d === 4)).toBe(true);
    const deep = index.findMatches(localOf([...sys, ...tokens(100 + 69, 16)]));
    expect(deep.depths.get('w69')).toBe(8);
    index.removeWorker('w3');
    index.removeWorker('w40');
    expect(index.findMatches(localOf(p1)).depths.size).toBe(68);
  });
});
