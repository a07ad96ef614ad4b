/**
 * Host block conversion (workers/kv-transfer/block-convert.ts) against a reference that reads
 * and writes one element at a time by (token, layer, k|v, element): block 32 ↔ 16 by absolute
 * token index, f32 ↔ bf16 with round-to-nearest-even, and round trips.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { bf16BitsToF32, blocksCovering, convertTokens, f32BitsToBf16, type BlockSpan } from '../../workers/kv-transfer/block-convert.js';
import { blockBytes, type KvLayoutDescriptor } from '../../workers/kv-transfer/layout-descriptor.js';

const shape = { order: 'block_major.v1' as const, numLayers: 3, numKvHeads: 2, headDim: 4, tp: 1 as const };
const layout = (blockSize: number, dtype: 'f32' | 'bf16' = 'f32'): KvLayoutDescriptor => ({ ...shape, blockSize, dtype });

/** Element index of (token's block id, slot, layer, kv, e) in a block-major pool: the reference formula. */
function at(span: BlockSpan, token: number, layer: number, kv: number, e: number): number {
  const d = span.layout;
  const id = span.blockIds[Math.floor(token / d.blockSize) - span.firstBlock]!;
  const slot = token % d.blockSize;
  const elems = d.numKvHeads * d.headDim;
  return id * (blockBytes(d) / (d.dtype === 'f32' ? 4 : 2)) + ((layer * 2 + kv) * d.blockSize + slot) * elems + e;
}

function bitsAt(span: BlockSpan, i: number): number {
  const v = new DataView(span.bytes.buffer, span.bytes.byteOffset);
  return span.layout.dtype === 'f32' ? v.getUint32(i * 4, true) : v.getUint16(i * 2, true);
}

/** A pool of numBlocks blocks filled with random bits, and a table over some of its blocks. */
function span(l: KvLayoutDescriptor, numBlocks: number, blockIds: number[], firstBlock: number, seed: number): BlockSpan {
  const bytes = new Uint8Array(numBlocks * blockBytes(l));
  let x = seed >>> 0 || 1;
  for (let i = 0; i < bytes.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    bytes[i] = x & 0xff;
  }
  return { bytes, layout: l, blockIds, firstBlock };
}

const ELEMS = shape.numKvHeads * shape.headDim;

function expectConverted(src: BlockSpan, dst: BlockSpan, before: Uint8Array, from: number, to: number): void {
  const written = new Set<number>();
  for (let t = from; t < to; t++) {
    for (let layer = 0; layer < shape.numLayers; layer++) {
      for (let kv = 0; kv < 2; kv++) {
        for (let e = 0; e < ELEMS; e++) {
          const s = bitsAt(src, at(src, t, layer, kv, e));
          const di = at(dst, t, layer, kv, e);
          written.add(di);
          const want = src.layout.dtype === dst.layout.dtype ? s : src.layout.dtype === 'f32' ? f32BitsToBf16(s) : bf16BitsToF32(s);
          if (bitsAt(dst, di) !== want) throw new Error(`token ${t} layer ${layer} kv ${kv} elem ${e}: ${bitsAt(dst, di)} != ${want}`);
        }
      }
    }
  }
  // Nothing else in the destination moved.
  const orig: BlockSpan = { ...dst, bytes: before };
  const n = dst.bytes.byteLength / (dst.layout.dtype === 'f32' ? 4 : 2);
  for (let i = 0; i < n; i++) if (!written.has(i) && bitsAt(dst, i) !== bitsAt(orig, i)) throw new Error(`element ${i} outside the tokens changed`);
}

describe('f32 ↔ bf16 bits', () => {
  it('rounds to nearest, ties to even, and keeps inf and NaN', () => {
    expect(f32BitsToBf16(0x3f800000)).toBe(0x3f80); // 1.0
    expect(f32BitsToBf16(0x3f808000)).toBe(0x3f80); // tie, even stays
    expect(f32BitsToBf16(0x3f818000)).toBe(0x3f82); // tie, odd rounds up
    expect(f32BitsToBf16(0x3f808001)).toBe(0x3f81); // above the tie
    expect(f32BitsToBf16(0xbf80ffff)).toBe(0xbf81); // negative rounds in magnitude
    expect(f32BitsToBf16(0x7f7fffff)).toBe(0x7f80); // max finite → +inf
    expect(f32BitsToBf16(0xff800000)).toBe(0xff80); // -inf
    expect(f32BitsToBf16(0x7f800001) & 0x7f80).toBe(0x7f80);
    expect(f32BitsToBf16(0x7f800001) & 0x7f).not.toBe(0); // still NaN, not inf
    expect(bf16BitsToF32(0x3f80)).toBe(0x3f800000);
  });

  it('bf16 → f32 → bf16 is the identity; f32 → bf16 is the nearest bf16', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 0xffff }), (b) => {
        const isNan = (b & 0x7f80) === 0x7f80 && (b & 0x7f) !== 0;
        if (!isNan) expect(f32BitsToBf16(bf16BitsToF32(b))).toBe(b);
      }),
    );
    const f = new Float32Array(1);
    const u = new Uint32Array(f.buffer);
    fc.assert(
      fc.property(fc.float({ noNaN: true, noDefaultInfinity: true, min: Math.fround(-1e38), max: Math.fround(1e38) }), (x) => {
        f[0] = x;
        const r = f32BitsToBf16(u[0]!);
        u[0] = bf16BitsToF32(r);
        const got = f[0]!;
        // No bf16 neighbour is closer: the step at this magnitude is 2^(exponent - 7), and
        // 2^-133 among subnormals.
        const step = x === 0 ? 0 : 2 ** (Math.max(Math.floor(Math.log2(Math.abs(x))), -126) - 7);
        expect(Math.abs(got - x)).toBeLessThanOrEqual(step / 2);
      }),
    );
  });
});

describe('convertTokens', () => {
  it('blocksCovering: tokens 16..37 of 32-token blocks are blocks 0 and 1; of 16-token blocks 1 and 2', () => {
    expect(blocksCovering(16, 37, 32)).toEqual({ firstBlock: 0, numBlocks: 2 });
    expect(blocksCovering(16, 37, 16)).toEqual({ firstBlock: 1, numBlocks: 2 });
    expect(blocksCovering(64, 64, 16).numBlocks).toBe(0);
  });

  it('worked example: 37 tokens from block 32 into block 16 land in slots by absolute index', () => {
    const src = span(layout(32), 4, [3, 1], 0, 1); // tokens 0..31 in block 3, 32..63 in block 1
    const dst = span(layout(16), 6, [5, 0, 2], 0, 2); // tokens 0..15, 16..31, 32..47
    const before = dst.bytes.slice();
    convertTokens(src, dst, 0, 37);
    expectConverted(src, dst, before, 0, 37);
    // Token 20 (src block 3 slot 20) is dst block 0 slot 4.
    expect(bitsAt(dst, at(dst, 20, 1, 1, 3))).toBe(bitsAt(src, at(src, 20, 1, 1, 3)));
  });

  it('matches the element-by-element reference for any block sizes, dtypes and token range', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(8, 16, 32),
        fc.constantFrom(8, 16, 32),
        fc.constantFrom('f32' as const, 'bf16' as const),
        fc.constantFrom('f32' as const, 'bf16' as const),
        fc.integer({ min: 0, max: 80 }),
        fc.integer({ min: 0, max: 80 }),
        fc.integer({ min: 1, max: 1e9 }),
        (sBs, dBs, sDt, dDt, a, b, seed) => {
          const from = Math.min(a, b);
          const to = Math.max(a, b);
          const s = blocksCovering(from, to, sBs);
          const d = blocksCovering(from, to, dBs);
          // Tables in reverse order, so block ids never equal block indices.
          const sIds = Array.from({ length: s.numBlocks }, (_, i) => s.numBlocks - 1 - i);
          const dIds = Array.from({ length: d.numBlocks }, (_, i) => d.numBlocks - i);
          const src = span(layout(sBs, sDt), s.numBlocks, sIds, s.firstBlock, seed);
          const dst = span(layout(dBs, dDt), d.numBlocks + 1, dIds, d.firstBlock, seed + 1);
          const before = dst.bytes.slice();
          convertTokens(src, dst, from, to);
          expectConverted(src, dst, before, from, to);
        },
      ),
      { numRuns: 150 },
    );
  });

  it('round trips: 32 → 16 → 32 and bf16 → f32 → bf16 give back every token byte for byte', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 96 }), fc.constantFrom('f32' as const, 'bf16' as const), fc.integer({ min: 1, max: 1e9 }), (n, dtype, seed) => {
        const big = blocksCovering(0, n, 32).numBlocks;
        const small = blocksCovering(0, n, 16).numBlocks;
        const src = span(layout(32, dtype), big, Array.from({ length: big }, (_, i) => i), 0, seed);
        if (dtype === 'bf16') {
          // Random bits include NaNs, whose payload f32 keeps; canonical values round trip.
          const w = new Uint16Array(src.bytes.buffer);
          for (let i = 0; i < w.length; i++) if ((w[i]! & 0x7f80) === 0x7f80) w[i] = w[i]! & 0xbfff;
        }
        const mid = span(layout(16, 'f32'), small, Array.from({ length: small }, (_, i) => small - 1 - i), 0, seed + 1);
        const back = span(layout(32, dtype), big, Array.from({ length: big }, (_, i) => i), 0, seed + 2);
        convertTokens(src, mid, 0, n);
        convertTokens(mid, back, 0, n);
        for (let t = 0; t < n; t++) {
          for (let layer = 0; layer < shape.numLayers; layer++) {
            for (let kv = 0; kv < 2; kv++) {
              for (let e = 0; e < ELEMS; e++) expect(bitsAt(back, at(back, t, layer, kv, e))).toBe(bitsAt(src, at(src, t, layer, kv, e)));
            }
          }
        }
      }),
      { numRuns: 30 },
    );
  });

  it('refuses another model shape, a token outside a table, or a block outside a buffer', () => {
    const src = span(layout(16), 2, [0, 1], 0, 3);
    const dst = span(layout(16), 2, [0, 1], 0, 4);
    expect(() => convertTokens(src, { ...dst, layout: { ...layout(16), numLayers: 2 } }, 0, 4)).toThrow(/numLayers/);
    expect(() => convertTokens(src, dst, 0, 33)).toThrow(/token 32 is outside/);
    expect(() => convertTokens(src, { ...dst, blockIds: [0, 2] }, 0, 32)).toThrow(/block 2 is outside/);
  });
});
