/**
 * Host block conversion to and from fp8_e4m3 pools (workers/kv-transfer/block-convert.ts): an
 * e4m3 element holds value / scale with the model's per-layer K and V scales, so f32 / bf16 ->
 * fp8 stores e4m3(value / scale) (nearest even, saturating) and fp8 -> f32 / bf16 reads code x
 * scale; fp8 -> fp8 copies bytes. Checked element by element against the codec, across a
 * block-size change, with only the asked tokens written.
 */
import { describe, expect, it } from 'vitest';
import { bf16BitsToF32, convertTokens, f32BitsToBf16, type BlockSpan } from '../../workers/kv-transfer/block-convert.js';
import { blockBytes, bytesPerToken, dtypeBytes, type KvDtype, type KvLayoutDescriptor } from '../../workers/kv-transfer/layout-descriptor.js';
import { e4m3ToF32, f32ToE4m3 } from '../../workers/models/fp8.js';

const shape = { order: 'block_major.v1' as const, numLayers: 2, numKvHeads: 2, headDim: 4, tp: 1 as const };
const layout = (blockSize: number, dtype: KvDtype): KvLayoutDescriptor => ({ ...shape, blockSize, dtype });
const ELEMS = shape.numKvHeads * shape.headDim;
/** [layer][K, V]: a V scale below 1 so f32 -> e4m3 saturates the larger values. */
const SCALES = [0.5, 0.01, 2, 0.125];

function index(span: BlockSpan, token: number, layer: number, kv: number, e: number): number {
  const d = span.layout;
  const id = span.blockIds[Math.floor(token / d.blockSize) - span.firstBlock]!;
  return id * (blockBytes(d) / dtypeBytes(d.dtype)) + ((layer * 2 + kv) * d.blockSize + (token % d.blockSize)) * ELEMS + e;
}

function read(span: BlockSpan, i: number): number {
  const v = new DataView(span.bytes.buffer, span.bytes.byteOffset);
  if (span.layout.dtype === 'f32') return v.getFloat32(4 * i, true);
  if (span.layout.dtype === 'bf16') return new Float32Array(new Uint32Array([bf16BitsToF32(v.getUint16(2 * i, true))]).buffer)[0]!;
  return span.bytes[i]!;
}

function filled(l: KvLayoutDescriptor, blocks: number, ids: number[], seed: number): BlockSpan {
  const bytes = new Uint8Array(blocks * blockBytes(l));
  const v = new DataView(bytes.buffer);
  let x = seed;
  const next = () => {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    return x / 2 ** 32;
  };
  const n = bytes.length / dtypeBytes(l.dtype);
  for (let i = 0; i < n; i++) {
    const value = (next() * 2 - 1) * 8;
    if (l.dtype === 'f32') v.setFloat32(4 * i, value, true);
    else if (l.dtype === 'bf16') v.setUint16(2 * i, f32BitsToBf16(new Uint32Array(new Float32Array([value]).buffer)[0]!), true);
    else bytes[i] = Math.floor(next() * 256) % 0x7f | (next() < 0.5 ? 0x80 : 0); // any code but NaN
  }
  return { bytes, layout: l, blockIds: ids, firstBlock: 0 };
}

describe('convertTokens with fp8_e4m3 pools', () => {
  it('an e4m3 pool is a quarter of f32 and half of bf16 per token', () => {
    expect(bytesPerToken(layout(16, 'fp8_e4m3')) * 4).toBe(bytesPerToken(layout(16, 'f32')));
    expect(bytesPerToken(layout(16, 'fp8_e4m3')) * 2).toBe(bytesPerToken(layout(16, 'bf16')));
  });

  const pairs: Array<[KvDtype, KvDtype]> = [['f32', 'fp8_e4m3'], ['bf16', 'fp8_e4m3'], ['fp8_e4m3', 'f32'], ['fp8_e4m3', 'bf16'], ['fp8_e4m3', 'fp8_e4m3']];
  for (const [from, to] of pairs) {
    it(`${from} (block 32) -> ${to} (block 16): each element through the model's scale, only the asked tokens`, () => {
      const src = filled(layout(32, from), 3, [2, 0], 7);
      const dst = filled(layout(16, to), 6, [5, 1, 3, 0], 11);
      const before = dst.bytes.slice();
      convertTokens(src, dst, 5, 53, SCALES);
      const written = new Set<number>();
      for (let t = 5; t < 53; t++) {
        for (let layer = 0; layer < shape.numLayers; layer++) {
          for (let kv = 0; kv < 2; kv++) {
            const scale = SCALES[2 * layer + kv]!;
            for (let e = 0; e < ELEMS; e++) {
              const s = read(src, index(src, t, layer, kv, e));
              const di = index(dst, t, layer, kv, e);
              written.add(di);
              const got = read(dst, di);
              if (from === to) expect(got).toBe(s);
              else if (to === 'fp8_e4m3') expect(got).toBe(f32ToE4m3(Math.fround(Math.fround(s) / scale)));
              else if (to === 'f32') expect(got).toBe(Math.fround(e4m3ToF32(s) * scale));
              else expect(got).toBe(new Float32Array(new Uint32Array([bf16BitsToF32(f32BitsToBf16(new Uint32Array(new Float32Array([e4m3ToF32(s) * scale]).buffer)[0]!))]).buffer)[0]);
            }
          }
        }
      }
      const unchanged: BlockSpan = { ...dst, bytes: before };
      const n = dst.bytes.length / dtypeBytes(to);
      for (let i = 0; i < n; i++) if (!written.has(i)) expect(read(dst, i)).toBe(read(unchanged, i));
    });
  }

  it('without scales an e4m3 side reads and writes at scale 1', () => {
    const src = filled(layout(16, 'f32'), 1, [0], 3);
    const dst = filled(layout(16, 'fp8_e4m3'), 1, [0], 4);
    convertTokens(src, dst, 0, 16);
    expect(read(dst, index(dst, 3, 1, 1, 2))).toBe(f32ToE4m3(read(src, index(src, 3, 1, 1, 2))));
  });
});
