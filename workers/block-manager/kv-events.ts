/**
 * The KV event builders the block manager (G1) and the tier policy (G2/G3) share, so a block is
 * announced the same way whichever tier holds it: its tokens hash keyed by its adapter, and its
 * `lora_id` (DESIGN.md "KV events and block hashing"). Pure.
 */
import type { KvEventData, KvMedium, KvStoredBlock } from '../../proto/wire.js';
import { localBlockHashes } from '../../router/index.js';

/** `Stored` for a run of blocks that chain from `parent` (absent: from the root, or a lone tier block). */
export function storedEvent(parent: bigint | undefined, blocks: KvStoredBlock[], loraId?: number, medium?: KvMedium): KvEventData {
  const e: KvEventData = parent === undefined ? { type: 'stored', blocks } : { type: 'stored', parentHash: parent.toString(), blocks };
  if (medium !== undefined) e.medium = medium;
  if (loraId !== undefined) e.loraId = loraId;
  return e;
}

/** `Stored` for one whole block a lower tier took, its tokens hash computed as G1 computed it. */
export function tierStoredEvent(hash: bigint, tokens: Int32Array, loraId: number | undefined, medium: KvMedium): KvEventData {
  const local = localBlockHashes(tokens, tokens.length, loraId)[0]!;
  return storedEvent(undefined, [{ blockHash: hash.toString(), tokensHash: local.toString() }], loraId, medium);
}

/** `Removed` for blocks of one tier (absent medium: the engine pool). */
export function removedEvent(hashes: readonly bigint[], medium?: KvMedium): KvEventData {
  const e: KvEventData = { type: 'removed', blockHashes: hashes.map((h) => h.toString()) };
  if (medium !== undefined) e.medium = medium;
  return e;
}
