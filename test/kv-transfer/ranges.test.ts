import { describe, expect, it } from 'vitest';
import { blockRanges, blockSliceRanges, rangeBytes, rangeCount, RANGE_STRIDE } from '../../workers/kv-transfer/index.js';

const triples = (r: Float64Array) => Array.from({ length: r.length / RANGE_STRIDE }, (_, i) => Array.from(r.subarray(i * 3, i * 3 + 3)));

describe('blockRanges: coalescing block copies into gets', () => {
  it('merges a run that is contiguous on both sides into one get', () => {
    // Remote 10,11,12 -> local 0,1,2 with 2 MiB blocks: one get of 6 MiB from 20 MiB to 0.
    const mib = 1 << 20;
    const r = blockRanges([10, 11, 12], [0, 1, 2], 2 * mib);
    expect(triples(r)).toEqual([[20 * mib, 0, 6 * mib]]);
    expect(rangeBytes(r)).toBe(6 * mib);
    expect(rangeCount(r)).toBe(1);
  });

  it('splits where either side breaks the run', () => {
    // 3->7, 4->8 contiguous; 5->20 breaks locally; 9->21 breaks remotely; 10->22 continues it.
    const r = blockRanges([3, 4, 5, 9, 10], [7, 8, 20, 21, 22], 100);
    expect(triples(r)).toEqual([
      [300, 700, 200],
      [500, 2000, 100],
      [900, 2100, 200],
    ]);
    expect(rangeBytes(r)).toBe(500);
  });

  it('does not merge a descending run', () => {
    const r = blockRanges([5, 4], [1, 0], 10);
    expect(triples(r)).toEqual([
      [50, 10, 10],
      [40, 0, 10],
    ]);
  });

  it('returns an empty list for no blocks', () => {
    expect(blockRanges([], [], 4096).length).toBe(0);
  });

  it('keeps offsets exact past 4 GiB', () => {
    // Block 3000 of 2 MiB blocks starts at 6000 MiB, beyond u32.
    const r = blockRanges([3000, 3001], [0, 1], 2 << 20);
    expect(r[0]).toBe(3000 * (2 << 20));
    expect(r[2]).toBe(2 * (2 << 20));
  });

  it('rejects mismatched lists, bad ids and bad block sizes with invalid_argument', () => {
    expect(() => blockRanges([1, 2], [1], 16)).toThrow(expect.objectContaining({ code: 'invalid_argument' }));
    expect(() => blockRanges([-1], [0], 16)).toThrow(expect.objectContaining({ code: 'invalid_argument' }));
    expect(() => blockRanges([1.5], [0], 16)).toThrow(expect.objectContaining({ code: 'invalid_argument' }));
    expect(() => blockRanges([1], [0], 0)).toThrow(expect.objectContaining({ code: 'invalid_argument' }));
  });

  it('accepts typed arrays as block id lists', () => {
    const r = blockRanges(Int32Array.of(0, 1, 2, 3), Int32Array.of(4, 5, 6, 7), 8);
    expect(triples(r)).toEqual([[0, 32, 32]]);
  });
});

describe('blockSliceRanges: one byte slice of every block (a layer range)', () => {
  it('layers [2, 4) of 100-byte layers in 800-byte blocks: one get per block at offset 200', () => {
    const r = blockSliceRanges([3, 4], [0, 1], 800, 200, 200);
    expect(triples(r)).toEqual([
      [2600, 200, 200],
      [3400, 1000, 200],
    ]);
    expect(rangeBytes(r)).toBe(400);
  });

  it('the whole block coalesces like blockRanges; a slice outside the block is refused', () => {
    expect(triples(blockSliceRanges([3, 4], [0, 1], 800, 0, 800))).toEqual([[2400, 0, 1600]]);
    expect(() => blockSliceRanges([0], [0], 800, 700, 200)).toThrow(/not inside a block/);
    expect(() => blockSliceRanges([0, 1], [0], 800, 0, 100)).toThrow(/differ in length/);
  });
});
