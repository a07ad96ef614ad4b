/**
 * Dense small-integer slots for worker instance ids. The radix tree stores "which workers hold
 * this block" as one bit per slot, so ids (16-hex strings) are mapped to slots once, at the
 * edge, and the hot paths only see integers. Freed slots are reused lowest-first so the bitset
 * stays as narrow as the live fleet.
 */
import type { InstanceId } from '../proto/wire.js';

export class WorkerSlots {
  private readonly slotById = new Map<InstanceId, number>();
  private readonly idBySlot: Array<InstanceId | undefined> = [];
  private readonly freeSlots: number[] = [];

  /** Number of slots ever handed out (live + free); bitsets must cover this many bits. */
  get highWater(): number {
    return this.idBySlot.length;
  }

  get size(): number {
    return this.slotById.size;
  }

  slotOf(id: InstanceId): number | undefined {
    return this.slotById.get(id);
  }

  idOf(slot: number): InstanceId | undefined {
    return this.idBySlot[slot];
  }

  /** The slot of `id`, allocating one when the worker is new. */
  acquire(id: InstanceId): number {
    const existing = this.slotById.get(id);
    if (existing !== undefined) return existing;
    let slot: number;
    if (this.freeSlots.length > 0) {
      // Lowest free slot first keeps the live bits packed into the fewest words.
      this.freeSlots.sort((a, b) => b - a);
      slot = this.freeSlots.pop()!;
      this.idBySlot[slot] = id;
    } else {
      slot = this.idBySlot.length;
      this.idBySlot.push(id);
    }
    this.slotById.set(id, slot);
    return slot;
  }

  /** Forget `id`; its slot may be handed to a later worker. Returns the freed slot. */
  release(id: InstanceId): number | undefined {
    const slot = this.slotById.get(id);
    if (slot === undefined) return undefined;
    this.slotById.delete(id);
    this.idBySlot[slot] = undefined;
    this.freeSlots.push(slot);
    return slot;
  }

  ids(): InstanceId[] {
    return [...this.slotById.keys()];
  }
}
