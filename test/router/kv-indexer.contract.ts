/**
 * The contract every `KvIndexer` passes: the event-fed `RadixIndexer` and the approximate
 * `ApproxIndexer`. An indexer's test file calls `kvIndexerContract(name, harness)` with a
 * driver that feeds the index the way its mode learns (KV events, or routing decisions with a
 * TTL). The reference is the simplest model of what an index must answer: per worker, the set
 * of sequence hashes it holds; for a request, the number of LEADING blocks of its chain in
 * that set.
 *
 * What differs by mode is a parameter, not a silent skip: `ttlMs` (blocks are forgotten after
 * it unless stored again, or kept until evicted), and operations a mode does not have
 * (`{ unsupported: why }`), whose tests are skipped with the reason in their name.
 */
import { describe, expect, it } from 'vitest';
import type { KvIndexer } from '../../router/indexer.js';
import { blockHashes } from '../../router/hashing.js';
import { SeededRandom } from '../../runtime/random.js';
import { prompt, tokens } from './fixtures.js';

/** A mode's answer for an operation it does not have; `unsupported` says why. */
export interface Unsupported {
  unsupported: string;
}

export interface KvIndexerDriver {
  readonly index: KvIndexer;
  /** `workerId` now caches every full block of `prompt`, learned the way this mode learns, at `nowMs`. */
  store(workerId: string, prompt: readonly number[], nowMs: number): void;
  /** Time is now `nowMs` (the mode drops whatever is due). Never goes back. */
  advance(nowMs: number): void;
  /** The worker's instance went away. */
  removeWorker(workerId: string): void;
  /** `workerId` evicted these blocks (sequence hashes, decimal), anywhere in their chains. */
  evict: ((workerId: string, seqHashes: readonly string[]) => void) | Unsupported;
  /** `workerId` dropped its whole cache but stays known. */
  clear: ((workerId: string) => void) | Unsupported;
  /** The sequence hashes the index says `workerId` holds. */
  blocksOf: ((workerId: string) => string[]) | Unsupported;
  /** A fresh index rebuilt from a serialized snapshot of this one. */
  roundTrip: (() => KvIndexer) | Unsupported;
}

export interface KvIndexerContractHarness {
  blockSize: number;
  /** How long a stored block counts as held unless stored again; `undefined`: until evicted. */
  ttlMs: number | undefined;
  create(): KvIndexerDriver;
}

function supported<F>(op: F | Unsupported): op is F {
  return typeof op === 'function';
}

export function kvIndexerContract(name: string, harness: () => KvIndexerContractHarness): void {
  describe(`KvIndexer contract: ${name}`, () => {
    const h = harness();
    const BS = h.blockSize;
    /** `it` for an operation the mode has, else `it.skip` with the mode's reason in the name. */
    const itWith = <F>(name: string, opOf: (d: KvIndexerDriver) => F | Unsupported, fn: (d: KvIndexerDriver, op: F) => void): void => {
      const probe = opOf(h.create());
      if (!supported(probe)) {
        it.skip(`${name} (not in this mode: ${probe.unsupported})`, () => {});
        return;
      }
      it(name, () => {
        const d = h.create();
        fn(d, opOf(d) as F);
      });
    };
    const chainOf = (p: readonly number[]) => blockHashes(p, BS);
    const localOf = (p: readonly number[]) => chainOf(p).local;
    const depthsOf = (index: KvIndexer, p: readonly number[]) => Object.fromEntries(index.findMatches(localOf(p)).depths);

    const sys = tokens(1, 4 * BS); // 4 shared blocks
    const p1 = [...sys, ...tokens(2, 2 * BS)]; // 6 blocks
    const p2 = [...sys, ...tokens(3, 2 * BS)]; // diverges after block 4

    it('reports each worker\'s number of LEADING blocks; maxDepth is the deepest', () => {
      const d = h.create();
      d.store('a', p1, 0);
      d.store('b', sys.slice(0, 2 * BS), 0);
      const m = d.index.findMatches(localOf(p1));
      expect(Object.fromEntries(m.depths)).toEqual({ a: 6, b: 2 });
      expect(m.maxDepth).toBe(6);
      expect(depthsOf(d.index, p2)).toEqual({ a: 4, b: 2 });
      // A request that differs in block 0 matches nothing, even though later tokens agree.
      expect(d.index.findMatches(localOf([...tokens(9, BS), ...p1.slice(BS)]))).toEqual({ depths: new Map(), maxDepth: 0 });
    });

    it('shares one node per block among the workers holding it (stats)', () => {
      const d = h.create();
      d.store('a', p1, 0);
      d.store('b', p2, 0);
      expect(d.index.stats()).toMatchObject({ nodes: 4 + 2 + 2, entries: 12, workers: 2, perWorker: { a: 6, b: 6 } });
      d.store('a', p1, 0); // storing again adds nothing
      expect(d.index.stats()).toMatchObject({ nodes: 8, entries: 12 });
    });

    it('accepts local hashes as bigints or decimal strings alike; an empty request matches nothing', () => {
      const d = h.create();
      d.store('a', p1, 0);
      expect(d.index.findMatches(localOf(p1).map(String)).depths).toEqual(d.index.findMatches(localOf(p1)).depths);
      expect(d.index.findMatches([])).toEqual({ depths: new Map(), maxDepth: 0 });
    });

    it('removeWorker forgets only that worker, prunes what nobody holds, and ignores unknown ids', () => {
      const d = h.create();
      d.store('a', p1, 0);
      d.store('b', p2, 0);
      d.removeWorker('a');
      d.removeWorker('never-seen');
      expect(depthsOf(d.index, p1)).toEqual({ b: 4 });
      expect(d.index.stats()).toMatchObject({ nodes: 6, entries: 6, workers: 1, perWorker: { b: 6 } });
      d.removeWorker('b');
      expect(d.index.stats()).toMatchObject({ nodes: 0, entries: 0, workers: 0, perWorker: {} });
    });

    it('more than 32 workers (bitsets wider than a word); a reused slot inherits nothing', () => {
      const d = h.create();
      const ids = Array.from({ length: 70 }, (_, i) => `w${i}`);
      // Worker i holds the shared 4 blocks plus (i % 3) blocks of its own.
      const mine = (i: number) => prompt(1, 4 * BS, 100 + i, (i % 3) * BS);
      ids.forEach((id, i) => d.store(id, mine(i), 0));
      for (const i of [0, 31, 32, 33, 63, 64, 69]) {
        expect(d.index.findMatches(localOf(mine(i))).depths.get(ids[i]!)).toBe(4 + (i % 3));
      }
      expect(d.index.findMatches(localOf(sys)).depths.size).toBe(70);
      for (let i = 0; i < 70; i += 2) d.removeWorker(ids[i]!);
      d.store('late', sys.slice(0, BS), 0); // takes a freed slot
      const m = d.index.findMatches(localOf(mine(1)));
      expect(m.depths.size).toBe(36);
      expect(m.depths.get('late')).toBe(1);
      expect(m.depths.get(ids[1]!)).toBe(5);
      expect(m.depths.has(ids[0]!)).toBe(false);
    });

    if (h.ttlMs !== undefined) {
      const ttl = h.ttlMs;
      it(`forgets a block ${ttl} ms after it was last stored; storing again refreshes it`, () => {
        const d = h.create();
        d.store('w', p1, 0);
        d.store('w', p1.slice(0, 2 * BS), ttl / 2); // a later request shared the first 2 blocks
        d.advance(ttl - 1);
        expect(depthsOf(d.index, p1)).toEqual({ w: 6 });
        d.advance(ttl);
        expect(depthsOf(d.index, p1)).toEqual({ w: 2 });
        expect(d.index.stats()).toMatchObject({ nodes: 2, entries: 2, workers: 1 });
        d.advance(ttl + ttl / 2);
        expect(depthsOf(d.index, p1)).toEqual({});
        expect(d.index.stats()).toMatchObject({ nodes: 0, entries: 0, workers: 1, perWorker: { w: 0 } });
      });
    } else {
      it('keeps blocks however much time passes (only eviction removes them)', () => {
        const d = h.create();
        d.store('w', p1, 0);
        d.advance(86_400_000);
        expect(depthsOf(d.index, p1)).toEqual({ w: 6 });
      });
    }

    itWith('an evicted block cuts the worker\'s overlap there; the blocks below it stay as nodes', (d) => d.evict, (d, evict) => {
      d.store('a', p1, 0);
      evict('a', [chainOf(p1).seq[3]!.toString()]);
      expect(depthsOf(d.index, p1)).toEqual({ a: 3 });
      expect(d.index.stats()).toMatchObject({ nodes: 6, entries: 5 });
    });

    itWith('clear empties a worker, prunes its nodes, and keeps it registered', (d) => d.clear, (d, clear) => {
      d.store('a', p1, 0);
      clear('a');
      expect(depthsOf(d.index, p1)).toEqual({});
      expect(d.index.stats()).toMatchObject({ nodes: 0, entries: 0, workers: 1, perWorker: { a: 0 } });
    });

    /**
     * 3000 seeded random steps: stores, evictions (leaves and middles) and clears where the mode
     * has them, time passing, worker removal and re-stores, so nodes are freed and their ids and
     * table slots reused while other workers still hold neighbours. `check` runs every 150 steps
     * and at the end against the model: per registered worker, the blocks it holds now.
     */
    const walk = (d: KvIndexerDriver, check: (held: ReadonlyMap<string, ReadonlySet<string>>) => void) => {
      const rng = new SeededRandom(2024);
      const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rng.next() * xs.length)]!;
      const ids = ['w0', 'w1', 'w2', 'w3', 'w4'];
      const ttl = h.ttlMs ?? Infinity;
      // Per registered worker: sequence hash → the time it is forgotten.
      const model = new Map<string, Map<string, number>>();
      let now = 0;
      const heldBy = (id: string): Set<string> => {
        const out = new Set<string>();
        for (const [s, until] of model.get(id) ?? []) if (until > now) out.add(s);
        return out;
      };
      const snapshot = () => new Map([...model.keys()].map((id) => [id, heldBy(id)]));
      for (let step = 0; step < 3000; step++) {
        now += Math.floor(rng.next() * 40);
        d.advance(now);
        const id = pick(ids);
        const held = heldBy(id);
        const r = rng.next();
        if (r < 0.55 || (r < 0.93 && (held.size === 0 || !supported(d.evict)))) {
          const i = Math.floor(rng.next() * walkPrompts.length);
          d.store(id, walkPrompts[i]!, now);
          let m = model.get(id);
          if (m === undefined) model.set(id, (m = new Map()));
          for (const s of walkSeqs[i]!) m.set(s, now + ttl);
        } else if (r < 0.93 && supported(d.evict)) {
          // Evict 1–3 held blocks, anywhere in their chains (a middle block cuts the run there).
          const victims = [...new Set(Array.from({ length: 1 + Math.floor(rng.next() * 3) }, () => pick([...held])))];
          d.evict(id, victims);
          for (const v of victims) model.get(id)!.delete(v);
        } else if (r < 0.97 && supported(d.clear)) {
          d.clear(id);
          model.set(id, new Map());
        } else {
          d.removeWorker(id);
          model.delete(id);
        }
        if (step % 150 === 0) check(snapshot());
      }
      check(snapshot());
      return ids;
    };
    // 6 shared prefixes × 12 suffixes, 2–9 blocks each: heavy sharing and branching.
    const walkPrompts = Array.from({ length: 72 }, (_, i) => prompt(i % 6, BS * (1 + (i % 4)), i, BS * (1 + (i % 6))));
    const walkChains = walkPrompts.map((p) => chainOf(p));
    const walkSeqs = walkChains.map((c) => c.seq.map(String));
    const parentOf = new Map<string, string | undefined>();
    for (const s of walkSeqs) s.forEach((x, i) => parentOf.set(x, i === 0 ? undefined : s[i - 1]));

    it('answers findMatches and stats like a set-per-worker model through 3000 seeded random steps', () => {
      const d = h.create();
      const ids = walk(d, (held) => {
        let entries = 0;
        const nodes = new Set<string>();
        const perWorker: Record<string, number> = {};
        for (const [id, blocks] of held) {
          entries += blocks.size;
          perWorker[id] = blocks.size;
          // A block is a node while someone holds it or anything below it.
          for (const s of blocks) {
            for (let x: string | undefined = s; x !== undefined && !nodes.has(x); x = parentOf.get(x)) nodes.add(x);
          }
        }
        expect(d.index.stats()).toMatchObject({ entries, nodes: nodes.size, workers: held.size, perWorker });
        for (let c = 0; c < walkChains.length; c++) {
          const want = new Map<string, number>();
          let max = 0;
          for (const [id, blocks] of held) {
            let depth = 0;
            while (depth < walkSeqs[c]!.length && blocks.has(walkSeqs[c]![depth]!)) depth++;
            if (depth > 0) want.set(id, depth);
            max = Math.max(max, depth);
          }
          const got = d.index.findMatches(walkChains[c]!.local);
          expect(got.depths).toEqual(want);
          expect(got.maxDepth).toBe(max);
        }
      });
      // Everyone gone: every node and table entry is released.
      for (const id of ids) d.removeWorker(id);
      expect(d.index.stats()).toMatchObject({ nodes: 0, entries: 0, workers: 0, perWorker: {} });
    });

    itWith('blocksOf lists exactly the model\'s blocks through the same walk', (d) => d.blocksOf, (d, blocksOf) => {
      walk(d, (held) => {
        for (const [id, blocks] of held) expect(blocksOf(id).sort()).toEqual([...blocks].sort());
      });
    });

    itWith('a snapshot loaded into a fresh index answers the same after the walk', (d) => d.roundTrip, (d, roundTrip) => {
      walk(d, () => {});
      const copy = roundTrip();
      for (const c of walkChains) expect(copy.findMatches(c.local).depths).toEqual(d.index.findMatches(c.local).depths);
      const { entries, nodes, perWorker } = d.index.stats();
      expect(copy.stats()).toMatchObject({ entries, perWorker });
      // A snapshot holds (worker, block) pairs: a block nobody holds, kept only as the parent of
      // held ones, is not in it (those children load as orphans, which no match can reach anyway).
      expect(copy.stats().nodes).toBeLessThanOrEqual(nodes);
    });
  });
}
