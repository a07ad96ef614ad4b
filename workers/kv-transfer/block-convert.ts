/**
 * Host conversion of KV between two block_major.v1 layouts of one model shape: another block
 * size (tokens are matched by absolute index, so block 32's slot 20 lands in block 16's slot 4
 * of the next block) and/or another element type (f32 → bf16 rounds to nearest even;
 * bf16 → f32 is exact; fp8_e4m3 elements are value / scale with the model's per-layer K and V
 * scales, `scales`, rounded to nearest even and saturating, as native/src/core/kv_copy_host.h
 * does). Pure: byte arrays in, byte arrays out, no transfer agent.
 *
 *   src table: blockIds[i] holds tokens [(firstBlock+i)·Bs, (firstBlock+i+1)·Bs)
 *   dst table: the same with the destination's block size
 *   for each layer, K then V: copy the runs of slots that are contiguous in both
 *
 * Same element type: each run is one `set` of bytes. Other element type: element by element.
 */
import { TandemError } from '../../runtime/errors.js';
import { blockBytes, dtypeBytes, requireConvertible, tokenElems, type KvDtype, type KvLayoutDescriptor } from './layout-descriptor.js';
import { e4m3ToF32, f32ToE4m3 } from '../models/fp8.js';

/** One side of a conversion: a block-major byte array and which of its blocks hold which tokens. */
export interface BlockSpan {
  /** The whole pool or staging buffer; block id k starts at byte k × blockBytes(layout). */
  bytes: Uint8Array;
  layout: KvLayoutDescriptor;
  /** blockIds[i] holds the tokens of absolute block index firstBlock + i. */
  blockIds: ArrayLike<number>;
  firstBlock: number;
}

/** The blocks of `blockSize` tokens that hold tokens [fromToken, toToken): [first, first + count). */
export function blocksCovering(fromToken: number, toToken: number, blockSize: number): { firstBlock: number; numBlocks: number } {
  if (toToken <= fromToken) return { firstBlock: Math.floor(fromToken / blockSize), numBlocks: 0 };
  const firstBlock = Math.floor(fromToken / blockSize);
  return { firstBlock, numBlocks: Math.ceil(toToken / blockSize) - firstBlock };
}

/** f32 bit pattern → bf16 bit pattern, round to nearest, ties to even; NaN stays a (quiet) NaN. */
export function f32BitsToBf16(bits: number): number {
  if ((bits & 0x7f800000) === 0x7f800000 && (bits & 0x007fffff) !== 0) return ((bits >>> 16) | 0x0040) & 0xffff;
  const u = bits >>> 0;
  return ((u + 0x7fff + ((u >>> 16) & 1)) / 0x10000) & 0xffff;
}

/** f32BitsToBf16 over a run, inlined: the hot loop of a dtype conversion. */
function f32ToBf16Run(src: Uint32Array, from: number, dst: Uint16Array, to: number, n: number): void {
  for (let e = 0; e < n; e++) {
    const u = src[from + e]!;
    // NaN (any sign) keeps its top bits, made quiet; everything else rounds to nearest even.
    dst[to + e] = (u & 0x7fffffff) > 0x7f800000 ? (u >>> 16) | 0x0040 : (u + 0x7fff + ((u >>> 16) & 1)) >>> 16;
  }
}

export function bf16BitsToF32(bits: number): number {
  return (bits << 16) >>> 0;
}

function words(bytes: Uint8Array, size: 2 | 4): Uint16Array | Uint32Array {
  if (bytes.byteOffset % size !== 0) throw new TandemError('invalid_argument', `KV buffer at byte offset ${bytes.byteOffset} is not ${size}-byte aligned`);
  const n = Math.floor(bytes.byteLength / size);
  return size === 2 ? new Uint16Array(bytes.buffer, bytes.byteOffset, n) : new Uint32Array(bytes.buffer, bytes.byteOffset, n);
}

function blockIdFor(span: BlockSpan, token: number): number {
  const i = Math.floor(token / span.layout.blockSize) - span.firstBlock;
  const id = i >= 0 && i < span.blockIds.length ? span.blockIds[i] : undefined;
  if (id === undefined) throw new TandemError('invalid_argument', `token ${token} is outside the block table (blocks ${span.firstBlock}..${span.firstBlock + span.blockIds.length - 1})`);
  const bb = blockBytes(span.layout);
  if (!Number.isSafeInteger(id) || id < 0 || (id + 1) * bb > span.bytes.byteLength) throw new TandemError('invalid_argument', `block ${id} is outside the buffer`);
  return id;
}

/** Element e of a run as f32 (fp8: times the scale). */
function loadElem(bytes: Uint8Array, dtype: KvDtype, e: number, view: DataView, scale: number): number {
  if (dtype === 'f32') return view.getFloat32(4 * e, true);
  if (dtype === 'bf16') return bf16BitsToF32AsFloat(view.getUint16(2 * e, true));
  return e4m3ToF32(bytes[e]!) * scale;
}

function storeElem(bytes: Uint8Array, dtype: KvDtype, e: number, view: DataView, value: number, scale: number): void {
  if (dtype === 'f32') view.setFloat32(4 * e, value, true);
  else if (dtype === 'bf16') view.setUint16(2 * e, f32BitsToBf16(f32Bits(value)), true);
  else bytes[e] = f32ToE4m3(Math.fround(Math.fround(value) / scale));
}

const bitsF32 = new Float32Array(1);
const bitsU32 = new Uint32Array(bitsF32.buffer);
function f32Bits(value: number): number {
  bitsF32[0] = value;
  return bitsU32[0]!;
}
function bf16BitsToF32AsFloat(bits: number): number {
  bitsU32[0] = (bits << 16) >>> 0;
  return bitsF32[0]!;
}

/**
 * Writes the KV of tokens [fromToken, toToken) from `src` into `dst`, converting block size
 * and element type. Only those tokens' slots are written. Throws `invalid_argument` for layouts
 * of another model shape, a token outside either table or a block outside either buffer.
 * `scales` ([layer][K, V], the model's e4m3 KV scales) is read where one side is fp8_e4m3;
 * absent, the scales are 1.0.
 */
export function convertTokens(src: BlockSpan, dst: BlockSpan, fromToken: number, toToken: number, scales?: ArrayLike<number>): void {
  requireConvertible(src.layout, dst.layout);
  if (toToken <= fromToken) return;
  const s = src.layout;
  const d = dst.layout;
  const elems = tokenElems(s);
  const sameType = s.dtype === d.dtype;
  const fp8 = !sameType && (s.dtype === 'fp8_e4m3' || d.dtype === 'fp8_e4m3');
  const sWords = sameType || fp8 ? undefined : words(src.bytes, dtypeBytes(s.dtype) as 2 | 4);
  const dWords = sameType || fp8 ? undefined : words(dst.bytes, dtypeBytes(d.dtype) as 2 | 4);
  const sView = new DataView(src.bytes.buffer, src.bytes.byteOffset, src.bytes.byteLength);
  const dView = new DataView(dst.bytes.buffer, dst.bytes.byteOffset, dst.bytes.byteLength);
  // Element offsets inside a block: [layer][kv][slot][elem].
  const sKv = s.blockSize * elems;
  const dKv = d.blockSize * elems;
  const sBlock = blockBytes(s) / dtypeBytes(s.dtype);
  const dBlock = blockBytes(d) / dtypeBytes(d.dtype);
  const sBytes = dtypeBytes(s.dtype);
  const dBytes = dtypeBytes(d.dtype);

  let t = fromToken;
  while (t < toToken) {
    const sSlot = t % s.blockSize;
    const dSlot = t % d.blockSize;
    const run = Math.min(toToken - t, s.blockSize - sSlot, d.blockSize - dSlot);
    const sBase = blockIdFor(src, t) * sBlock + sSlot * elems;
    const dBase = blockIdFor(dst, t) * dBlock + dSlot * elems;
    const n = run * elems;
    for (let layer = 0; layer < s.numLayers; layer++) {
      for (let kv = 0; kv < 2; kv++) {
        const so = sBase + (2 * layer + kv) * sKv;
        const dO = dBase + (2 * layer + kv) * dKv;
        if (sameType) {
          dst.bytes.set(src.bytes.subarray(so * sBytes, (so + n) * sBytes), dO * dBytes);
        } else if (fp8) {
          const scale = scales !== undefined ? scales[2 * layer + kv]! : 1;
          for (let e = 0; e < n; e++) storeElem(dst.bytes, d.dtype, dO + e, dView, loadElem(src.bytes, s.dtype, so + e, sView, scale), scale);
        } else if (s.dtype === 'f32') {
          f32ToBf16Run(sWords as Uint32Array, so, dWords as Uint16Array, dO, n);
        } else {
          const sw = sWords as Uint16Array;
          const dw = dWords as Uint32Array;
          for (let e = 0; e < n; e++) dw[dO + e] = sw[so + e]! << 16;
        }
      }
    }
    t += run;
  }
}
