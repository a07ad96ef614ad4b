/**
 * Conversion of active-sequence updates to and from their `router_sync` wire form
 * (`WireActiveSequenceUpdate`, `RouterSyncMessage` in proto/router.ts): router replicas publish
 * their updates so that every replica's load estimate covers requests routed by the others
 * (docs/design.md "Router"). Block hashes travel as u64 decimal strings.
 */
import type { WireActiveSequenceUpdate } from '../proto/wire.js';
import type { ActiveSequenceUpdate } from './active-sequences.js';

export function updateToWire(u: ActiveSequenceUpdate): WireActiveSequenceUpdate {
  if (u.type !== 'add') return u;
  return { ...u, blockHashes: u.blockHashes.map((h) => h.toString()) };
}

/** Undefined when the payload is not a well-formed update (peers are not trusted to be sane). */
export function updateFromWire(w: unknown): ActiveSequenceUpdate | undefined {
  if (typeof w !== 'object' || w === null) return undefined;
  const u = w as Record<string, unknown>;
  if (typeof u.requestId !== 'string') return undefined;
  switch (u.type) {
    case 'prefill_done':
    case 'free':
      return { type: u.type, requestId: u.requestId };
    case 'add': {
      if (typeof u.workerId !== 'string' || !Array.isArray(u.blockHashes)) return undefined;
      if (!isCount(u.promptTokens) || !isCount(u.overlapBlocks)) return undefined;
      const hashes: bigint[] = [];
      try {
        for (const h of u.blockHashes) {
          if (typeof h !== 'string') return undefined;
          hashes.push(BigInt(h));
        }
      } catch {
        return undefined;
      }
      return {
        type: 'add',
        requestId: u.requestId,
        workerId: u.workerId,
        blockHashes: hashes,
        promptTokens: u.promptTokens,
        overlapBlocks: u.overlapBlocks,
        ...(typeof u.loraId === 'number' && Number.isSafeInteger(u.loraId) && u.loraId >= 0 ? { loraId: u.loraId } : {}),
      };
    }
    default:
      return undefined;
  }
}

function isCount(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0;
}
