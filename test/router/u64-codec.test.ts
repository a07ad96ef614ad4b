import { describe, expect, it } from 'vitest';
import { formatU64, U64Parser, u64ToBigint } from '../../router/u64-decimal.js';
import { KeyTable } from '../../router/u64-table.js';
import { SeededRandom } from '../../runtime/random.js';

const U64_MAX = (1n << 64n) - 1n;
const parser = new U64Parser();
const out = new Int32Array(2);
function parse(text: string): bigint | undefined {
  return parser.parse(text, out, 0) ? u64ToBigint(out[0]!, out[1]!) : undefined;
}

describe('U64Parser / formatU64 (wire decimal ↔ u32 halves)', () => {
  // Chunk and carry boundaries of the parser: 8 and 15 digits, 2^32, 2^53, 10^15, 10^16, u64 max.
  const edges = [
    0n, 1n, 9n, 10n, 99_999_999n, 100_000_000n, 0xffffffffn, 0x100000000n, 999_999_999_999_999n, 10n ** 15n,
    10n ** 15n + 1n, 9_007_199_254_740_991n, 9_007_199_254_740_993n, 9_999_999_999_999_999n, 10n ** 16n, 10n ** 19n - 1n,
    10n ** 19n, U64_MAX - 1n, U64_MAX,
  ];
  it.each(edges.map((v) => [v.toString()]))('parses and formats %s exactly', (text) => {
    expect(parse(text)).toBe(BigInt(text));
    expect(formatU64(out[0]!, out[1]!)).toBe(text);
  });

  it('round-trips random u64 values of every magnitude', () => {
    const rng = new SeededRandom(99);
    for (let i = 0; i < 5000; i++) {
      const v = ((BigInt(Math.floor(rng.next() * 2 ** 32)) << 32n) | BigInt(Math.floor(rng.next() * 2 ** 32))) >> BigInt(i % 64);
      expect(parse(v.toString())).toBe(v);
      expect(formatU64(out[0]!, out[1]!)).toBe(v.toString());
    }
  });

  it('rejects what is not a u64 decimal, without throwing', () => {
    for (const bad of ['', 'zz', '-1', '+1', '1e5', ' 1', '1 ', '0x10', '1.0', '18446744073709551616', '99999999999999999999', '123456789012345678901']) {
      expect(parse(bad)).toBeUndefined();
    }
    expect(parser.parse(42 as unknown as string, out, 0)).toBe(false);
  });

  it('accepts leading zeros (numeric identity: "007" is 7)', () => {
    expect(parse('007')).toBe(7n);
    expect(parse('00000000000000000001')).toBe(1n);
  });
});

describe('KeyTable (open addressing, backward-shift delete)', () => {
  const key = new Int32Array(2);
  const k = (hi: number, lo: number) => {
    key[0] = hi;
    key[1] = lo;
    return key;
  };

  it('agrees with a Map through random inserts, overwrites and deletes, across growth', () => {
    const rng = new SeededRandom(7);
    const table = new KeyTable(4);
    const model = new Map<string, number>();
    // Few distinct his and los, so many keys share home slots and runs wrap and shift.
    const pick = () => [Math.floor(rng.next() * 40) - 20, Math.floor(rng.next() * 3) * 0x7fffffff] as const;
    for (let step = 0; step < 20000; step++) {
      const a = Math.floor(rng.next() * 3);
      const [hi, lo] = pick();
      const name = `${a}:${hi}:${lo | 0}`;
      const r = rng.next();
      if (r < 0.5) {
        table.set(a, k(hi, lo), 0, step);
        model.set(name, step);
      } else if (r < 0.8) {
        expect(table.delete(a, k(hi, lo), 0)).toBe(model.delete(name));
      } else {
        expect(table.get(a, k(hi, lo), 0)).toBe(model.get(name) ?? -1);
      }
      expect(table.size).toBe(model.size);
    }
    for (const [name, v] of model) {
      const [a, hi, lo] = name.split(':').map(Number) as [number, number, number];
      expect(table.get(a, k(hi, lo), 0)).toBe(v);
    }
  });

  it('keys differing only in the first word (the parent of an edge) are distinct', () => {
    const table = new KeyTable();
    table.set(1, k(5, 6), 0, 10);
    table.set(2, k(5, 6), 0, 20);
    expect(table.get(1, k(5, 6), 0)).toBe(10);
    expect(table.get(2, k(5, 6), 0)).toBe(20);
    expect(table.get(3, k(5, 6), 0)).toBe(-1);
  });
});
