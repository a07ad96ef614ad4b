/**
 * Which blocks each worker keeps in its lower KV tiers (medium 'cpu' = host G2, 'disk' = G3),
 * from its KV events. The device tier stays in the RadixIndexer; this index answers, for a
 * request, how far a worker's cached prefix continues below the device tier and in which tier
 * each block is. Keyed by sequence hash (it names the whole prefix, so no tree is needed).
 */
import type { InstanceId, KvEventData } from '../proto/wire.js';

const CPU = 1;
const DISK = 2;

export interface LowerTierHits {
  hostBlocks: number;
  diskBlocks: number;
}

export const NO_LOWER_HITS: LowerTierHits = Object.freeze({ hostBlocks: 0, diskBlocks: 0 });

export class LowerTierIndex {
  private readonly workers = new Map<InstanceId, Map<string, number>>();

  /** Applies one lower-tier event (medium 'cpu' or 'disk'); other events are ignored. */
  applyEvent(workerId: InstanceId, data: KvEventData): void {
    if (data.type === 'cleared' || (data.medium !== 'cpu' && data.medium !== 'disk')) return;
    const bit = data.medium === 'cpu' ? CPU : DISK;
    let blocks = this.workers.get(workerId);
    if (data.type === 'stored') {
      if (blocks === undefined) this.workers.set(workerId, (blocks = new Map()));
      for (const b of data.blocks) blocks.set(b.blockHash, (blocks.get(b.blockHash) ?? 0) | bit);
      return;
    }
    if (blocks === undefined) return;
    for (const h of data.blockHashes) {
      const mask = (blocks.get(h) ?? 0) & ~bit;
      if (mask === 0) blocks.delete(h);
      else blocks.set(h, mask);
    }
  }

  removeWorker(workerId: InstanceId): void {
    this.workers.delete(workerId);
  }

  /**
   * Blocks `from`.. of a request (`seqHashes`) that `workerId` holds below the device tier,
   * counted until the first block it holds in neither; a block in both counts as host.
   */
  hits(workerId: InstanceId, seqHashes: readonly bigint[], from: number, to = seqHashes.length): LowerTierHits {
    const blocks = this.workers.get(workerId);
    if (blocks === undefined || blocks.size === 0) return NO_LOWER_HITS;
    let hostBlocks = 0;
    let diskBlocks = 0;
    for (let b = from; b < to; b++) {
      const mask = blocks.get(seqHashes[b]!.toString());
      if (mask === undefined) break;
      if (mask & CPU) hostBlocks++;
      else diskBlocks++;
    }
    return { hostBlocks, diskBlocks };
  }

  /** Blocks a worker holds per lower tier; for stats and tests. */
  sizes(workerId: InstanceId): LowerTierHits {
    let hostBlocks = 0;
    let diskBlocks = 0;
    for (const mask of this.workers.get(workerId)?.values() ?? []) {
      if (mask & CPU) hostBlocks++;
      if (mask & DISK) diskBlocks++;
    }
    return { hostBlocks, diskBlocks };
  }
}
