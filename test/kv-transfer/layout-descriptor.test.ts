/**
 * The layout descriptor (workers/kv-transfer/layout-descriptor.ts): parsed from cards and from
 * today's layout names, formatted back to exactly the name the native engine writes, and
 * compared to decide copy / convert / refuse.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { stampedLayoutName } from '../../workers/disagg/stamped-kv.js';
import { nativeKvLayoutName } from '../../workers/engines/native/native-engine.js';
import {
  BLOCK_MAJOR_V1_NAME,
  blockBytes,
  bytesPerToken,
  compareLayouts,
  formatLayoutName,
  layoutFromName,
  parseLayoutDescriptor,
  peerLayout,
  type KvLayoutDescriptor,
} from '../../workers/kv-transfer/layout-descriptor.js';

const tiny: KvLayoutDescriptor = { order: 'block_major.v1', blockSize: 16, dtype: 'f32', numLayers: 2, numKvHeads: 2, headDim: 8, tp: 1 };

const layouts = fc.record({
  order: fc.constant('block_major.v1' as const),
  blockSize: fc.integer({ min: 1, max: 256 }),
  dtype: fc.constantFrom('f32' as const, 'bf16' as const),
  numLayers: fc.integer({ min: 1, max: 128 }),
  numKvHeads: fc.integer({ min: 1, max: 64 }),
  headDim: fc.integer({ min: 1, max: 256 }),
  tp: fc.constant(1 as const),
});

describe('layout descriptor', () => {
  it('sizes: a tiny 2-layer f32 block of 16 tokens is 2 × 2 × 16 × 2 × 8 × 4 = 4096 bytes', () => {
    expect(blockBytes(tiny)).toBe(4096);
    expect(bytesPerToken(tiny)).toBe(256);
    expect(blockBytes({ ...tiny, dtype: 'bf16', blockSize: 32 })).toBe(4096);
  });

  it('formats exactly the name the native engine puts on hand-offs, and reads it back', () => {
    fc.assert(
      fc.property(layouts, (d) => {
        const name = nativeKvLayoutName({ kvLayout: BLOCK_MAJOR_V1_NAME, numLayers: d.numLayers, numKvHeads: d.numKvHeads, headDim: d.headDim, blockSize: d.blockSize, kvDtype: d.dtype });
        expect(formatLayoutName(d)).toBe(name);
        expect(layoutFromName(name)).toEqual({ ok: true, layout: d });
      }),
    );
  });

  it('a name without an element type is an f32 pool (workers before bf16 pools)', () => {
    expect(layoutFromName(`${BLOCK_MAJOR_V1_NAME};layers=2;kv_heads=2;head_dim=8;block=16`)).toEqual({ ok: true, layout: tiny });
  });

  it('names that are not block_major.v1, or miss a field, have no descriptor', () => {
    expect(layoutFromName(stampedLayoutName(16, 1024)).ok).toBe(false);
    expect(layoutFromName(`${BLOCK_MAJOR_V1_NAME};layers=2;kv_heads=2;block=16;f32`)).toEqual({ ok: false, reason: 'headDim must be a positive integer' });
    expect(layoutFromName(`${BLOCK_MAJOR_V1_NAME};layers=2;kv_heads=2;head_dim=8;block=16;f16`).ok).toBe(false);
  });

  it('parse refuses what it cannot read: other orders, tensor-parallel shards, bad numbers', () => {
    expect(parseLayoutDescriptor(tiny)).toEqual({ ok: true, layout: tiny });
    expect(parseLayoutDescriptor({ ...tiny, order: 'layer_major.v1' }).ok).toBe(false);
    expect(parseLayoutDescriptor({ ...tiny, tp: 2 })).toEqual({ ok: false, reason: 'tp 2: only single-shard pools (tp 1) are understood' });
    expect(parseLayoutDescriptor({ ...tiny, blockSize: 0 }).ok).toBe(false);
    expect(parseLayoutDescriptor({ ...tiny, headDim: 1.5 }).ok).toBe(false);
    expect(parseLayoutDescriptor(null).ok).toBe(false);
    // Extra fields of a newer peer are dropped, not kept.
    expect(parseLayoutDescriptor({ ...tiny, extra: 1 })).toEqual({ ok: true, layout: tiny });
  });

  it('peerLayout prefers a valid descriptor, falls back to the name, and has none for the mocker', () => {
    const name = formatLayoutName(tiny);
    expect(peerLayout(name)).toEqual(tiny);
    expect(peerLayout(name, { ...tiny, blockSize: 32 })).toEqual({ ...tiny, blockSize: 32 });
    expect(peerLayout(name, { broken: true })).toEqual(tiny);
    expect(peerLayout(stampedLayoutName(16, 64))).toBeUndefined();
  });

  it('compare: equal layouts copy; block size or dtype convert; another shape is refused with the field', () => {
    expect(compareLayouts(tiny, tiny)).toEqual({ kind: 'copy' });
    expect(compareLayouts({ ...tiny, blockSize: 32 }, tiny)).toEqual({ kind: 'convert', blockSize: true, dtype: false });
    expect(compareLayouts(tiny, { ...tiny, dtype: 'bf16' })).toEqual({ kind: 'convert', blockSize: false, dtype: true });
    expect(compareLayouts({ ...tiny, numLayers: 3 }, tiny)).toEqual({ kind: 'incompatible', reason: 'numLayers 3 vs 2' });
    expect(compareLayouts(tiny, { ...tiny, numKvHeads: 4 })).toEqual({ kind: 'incompatible', reason: 'numKvHeads 2 vs 4' });
  });
});
