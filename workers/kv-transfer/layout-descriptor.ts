/**
 * The KV layout descriptor: what a worker's pool looks like, as data, so a peer can tell
 * whether a pull is a plain byte copy, a conversion (block size, element type), or impossible.
 * It goes on the model card (`kvLayout`) next to the layout name that hand-offs have always
 * carried (`KvTransferParams.layout`); a peer that sends no descriptor is read from its name.
 *
 *   block_major.v1:  pool[block][layer][k|v][slot][kv_head][head_dim]   (native/src/core/kv_layout.h)
 *
 * `tp` is the seam for tensor-parallel pools: today every pool is one shard (tp 1), and a
 * descriptor with another degree is refused rather than misread.
 */
import type { KvLayoutDescriptor } from '../../proto/wire.js';
import { TandemError } from '../../runtime/errors.js';

export type { KvLayoutDescriptor };

export const BLOCK_MAJOR_V1: KvLayoutDescriptor['order'] = 'block_major.v1';
/** The pool layout part of a native layout name (kKvLayoutName in kv_layout.h). */
export const BLOCK_MAJOR_V1_NAME = 'block_major.v1:[block][layer][kv][slot][kv_head][head_dim]';

export type KvDtype = KvLayoutDescriptor['dtype'];
export const KV_DTYPES: readonly KvDtype[] = ['f32', 'bf16', 'fp8_e4m3'];

export type LayoutParse = { ok: true; layout: KvLayoutDescriptor } | { ok: false; reason: string };

export function dtypeBytes(dtype: KvDtype): number {
  return dtype === 'f32' ? 4 : dtype === 'bf16' ? 2 : 1;
}

/** Elements of one token in one layer, K or V: numKvHeads × headDim. */
export function tokenElems(d: KvLayoutDescriptor): number {
  return d.numKvHeads * d.headDim;
}

/** Bytes of one layer of one block (K and V). */
export function layerBytes(d: KvLayoutDescriptor): number {
  return 2 * d.blockSize * tokenElems(d) * dtypeBytes(d.dtype);
}

export function blockBytes(d: KvLayoutDescriptor): number {
  return d.numLayers * layerBytes(d);
}

export function bytesPerToken(d: KvLayoutDescriptor): number {
  return d.numLayers * 2 * tokenElems(d) * dtypeBytes(d.dtype);
}

/** Validates a descriptor read from another process (a card or a hand-off). */
export function parseLayoutDescriptor(value: unknown): LayoutParse {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return { ok: false, reason: 'not an object' };
  const v = value as Record<string, unknown>;
  if (v.order !== BLOCK_MAJOR_V1) return { ok: false, reason: `order ${String(v.order)} is not ${BLOCK_MAJOR_V1}` };
  for (const field of ['blockSize', 'numLayers', 'numKvHeads', 'headDim'] as const) {
    const n = v[field];
    if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 1) return { ok: false, reason: `${field} must be a positive integer` };
  }
  if (!KV_DTYPES.includes(v.dtype as KvDtype)) return { ok: false, reason: `dtype must be one of ${KV_DTYPES.join(', ')}` };
  if (v.tp !== 1) return { ok: false, reason: `tp ${String(v.tp)}: only single-shard pools (tp 1) are understood` };
  return {
    ok: true,
    layout: {
      order: BLOCK_MAJOR_V1,
      blockSize: v.blockSize as number,
      dtype: v.dtype as KvDtype,
      numLayers: v.numLayers as number,
      numKvHeads: v.numKvHeads as number,
      headDim: v.headDim as number,
      tp: 1,
    },
  };
}

/**
 * Today's layout name for a descriptor, byte for byte what `nativeKvLayoutName` writes:
 * `block_major.v1:[…];layers=L;kv_heads=H;head_dim=D;block=B;f32`.
 */
export function formatLayoutName(d: KvLayoutDescriptor): string {
  return `${BLOCK_MAJOR_V1_NAME};layers=${d.numLayers};kv_heads=${d.numKvHeads};head_dim=${d.headDim};block=${d.blockSize};${d.dtype}`;
}

/**
 * The descriptor a layout name stands for (peers that send no descriptor), or why not: a
 * mocker's stamped pool, a future order, or a name with fields missing has none.
 */
export function layoutFromName(name: string): LayoutParse {
  const parts = name.split(';');
  if (parts[0] !== BLOCK_MAJOR_V1_NAME) return { ok: false, reason: `layout ${parts[0] ?? ''} is not ${BLOCK_MAJOR_V1}` };
  const fields = new Map<string, string>();
  let dtype: string | undefined;
  for (const part of parts.slice(1)) {
    const eq = part.indexOf('=');
    if (eq < 0) {
      if (dtype !== undefined) return { ok: false, reason: `two element types in ${name}` };
      dtype = part;
    } else {
      fields.set(part.slice(0, eq), part.slice(eq + 1));
    }
  }
  const int = (key: string): number | undefined => {
    const s = fields.get(key);
    return s !== undefined && /^[0-9]+$/.test(s) ? Number(s) : undefined;
  };
  return parseLayoutDescriptor({
    order: BLOCK_MAJOR_V1,
    blockSize: int('block'),
    dtype: dtype ?? 'f32',
    numLayers: int('layers'),
    numKvHeads: int('kv_heads'),
    headDim: int('head_dim'),
    tp: 1,
  });
}

/**
 * A peer's layout: its descriptor when it sent a valid one, else what its name says.
 * Undefined for layouts without a descriptor (the mocker's), which only pull by equal name.
 */
export function peerLayout(name: string, descriptor?: unknown): KvLayoutDescriptor | undefined {
  if (descriptor !== undefined) {
    const parsed = parseLayoutDescriptor(descriptor);
    if (parsed.ok) return parsed.layout;
  }
  const fromName = layoutFromName(name);
  return fromName.ok ? fromName.layout : undefined;
}

/**
 * How a pull from `remote` into `local` goes:
 *   - `copy`: identical layouts, blocks move as bytes;
 *   - `convert`: same model shape, other block size and/or element type (block-convert.ts);
 *   - `incompatible`: another model shape or tensor-parallel split; the decode side recomputes.
 */
export type LayoutCompatibility = { kind: 'copy' } | { kind: 'convert'; blockSize: boolean; dtype: boolean } | { kind: 'incompatible'; reason: string };

export function compareLayouts(remote: KvLayoutDescriptor, local: KvLayoutDescriptor): LayoutCompatibility {
  if (remote.order !== local.order) return { kind: 'incompatible', reason: `order ${remote.order} vs ${local.order}` };
  if (remote.tp !== local.tp) return { kind: 'incompatible', reason: `tensor-parallel degree ${remote.tp} vs ${local.tp}` };
  for (const field of ['numLayers', 'numKvHeads', 'headDim'] as const) {
    if (remote[field] !== local[field]) return { kind: 'incompatible', reason: `${field} ${remote[field]} vs ${local[field]}` };
  }
  const blockSize = remote.blockSize !== local.blockSize;
  const dtype = remote.dtype !== local.dtype;
  return blockSize || dtype ? { kind: 'convert', blockSize, dtype } : { kind: 'copy' };
}

/** compareLayouts that throws the agent's refusal (`invalid_argument`) for incompatible pools. */
export function requireConvertible(remote: KvLayoutDescriptor, local: KvLayoutDescriptor): Exclude<LayoutCompatibility, { kind: 'incompatible' }> {
  const c = compareLayouts(remote, local);
  if (c.kind === 'incompatible') throw new TandemError('invalid_argument', `KV layouts cannot be converted: ${c.reason}`);
  return c;
}
