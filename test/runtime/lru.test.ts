/**
 * LruMap (runtime/lru.ts), the one LRU of the code base, against a reference model (an array in
 * recency order) under random operations: same contents in the same order, both bounds hold
 * after every operation, `peek` never refreshes, evictions are reported.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { LruMap } from '../../runtime/lru.js';

type Op = { op: 'set'; key: number; weight: number } | { op: 'get' | 'peek' | 'delete'; key: number };

const ops = fc.array(
  fc.oneof(
    fc.record({ op: fc.constant('set' as const), key: fc.integer({ min: 0, max: 12 }), weight: fc.integer({ min: 0, max: 40 }) }),
    fc.record({ op: fc.constantFrom('get' as const, 'peek' as const, 'delete' as const), key: fc.integer({ min: 0, max: 12 }) }),
  ),
  { maxLength: 200 },
);

describe('LruMap', () => {
  it('matches a reference model under random operations, within both bounds', () => {
    fc.assert(
      fc.property(ops, fc.integer({ min: 1, max: 8 }), fc.integer({ min: 0, max: 100 }), (list: Op[], maxEntries, maxWeight) => {
        const evicted: number[] = [];
        const lru = new LruMap<number, number>({ maxEntries, maxWeight, weigh: (w) => w, onEvict: (k) => evicted.push(k as number) });
        let model: Array<[number, number]> = [];
        const expectedEvicted: number[] = [];
        for (const o of list) {
          const at = model.findIndex(([k]) => k === o.key);
          if (o.op === 'set') {
            if (at !== -1) model.splice(at, 1);
            model.push([o.key, o.weight]);
            const total = (): number => model.reduce((n, [, w]) => n + w, 0);
            while (model.length > 1 && (model.length > maxEntries || total() > maxWeight)) expectedEvicted.push(model.shift()![0]);
            lru.set(o.key, o.weight);
          } else if (o.op === 'get') {
            if (at !== -1) model.push(model.splice(at, 1)[0]!);
            expect(lru.get(o.key)).toBe(at === -1 ? undefined : model[model.length - 1]![1]);
          } else if (o.op === 'peek') {
            expect(lru.peek(o.key)).toBe(at === -1 ? undefined : model[at]![1]);
          } else {
            if (at !== -1) model.splice(at, 1);
            expect(lru.delete(o.key)).toBe(at !== -1);
          }
          expect([...lru.keys()]).toEqual(model.map(([k]) => k));
          expect(lru.size).toBeLessThanOrEqual(maxEntries);
          expect(lru.weight).toBe(model.reduce((n, [, w]) => n + w, 0));
          // Only the entry just set may stand alone over the weight bound.
          if (lru.size > 1) expect(lru.weight).toBeLessThanOrEqual(maxWeight);
        }
        expect(evicted).toEqual(expectedEvicted);
        model = [];
      }),
      { numRuns: 200, seed: 23 },
    );
  });

  it('without bounds it keeps everything; a value heavier than the bound is kept alone until the next set', () => {
    const free = new LruMap<string, number>();
    for (let i = 0; i < 1000; i++) free.set(String(i), i);
    expect(free.size).toBe(1000);
    const bytes = new LruMap<string, Uint8Array>({ maxWeight: 10, weigh: (b) => b.byteLength });
    bytes.set('small', new Uint8Array(4));
    bytes.set('huge', new Uint8Array(11));
    expect(bytes.has('huge')).toBe(true);
    expect(bytes.has('small')).toBe(false);
    bytes.set('next', new Uint8Array(2));
    expect([...bytes.keys()]).toEqual(['next']);
    expect(bytes.weight).toBe(2);
  });
});
