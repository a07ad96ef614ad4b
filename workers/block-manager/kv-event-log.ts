/**
 * Numbers a worker's KV events from 0 without gaps, keeps the last `capacity` (default 1024)
 * for replay, and mirrors the cached-block set the events describe so it can hand a new
 * router a full dump. The mirror is built from the events themselves, so "apply the dump, then
 * the events after dump.nextEventId" always lands on the same set as "replay from 0".
 */
import { isLowerTierEvent, type InstanceId, type KvEvent, type KvEventData, type KvStoredBlock } from '../../proto/wire.js';

export interface KvEventLogConfig {
  workerId: InstanceId;
  /** Events kept for replay; default 1024. */
  capacity?: number;
}

export type KvReplayResult =
  | { type: 'events'; events: KvEvent[] }
  /** The range starts before the oldest kept event: the caller should ask for a dump. */
  | { type: 'too_old'; oldestEventId: number; nextEventId: number };

export interface KvDump {
  /** The first event id NOT reflected in `events`; continue the stream from here. */
  nextEventId: number;
  /** Stored events covering every cached block, parents before children. */
  events: KvEventData[];
}

interface MirrorBlock {
  parentHash: string | undefined;
  tokensHash: string;
  loraId: number | undefined;
}

export class KvEventLog {
  workerId: InstanceId;
  readonly capacity: number;
  private readonly ring: Array<KvEvent | undefined>;
  private nextId = 0;
  private readonly blocks = new Map<string, MirrorBlock>();
  /** Blocks in the lower tiers (medium 'cpu' / 'disk'): hash → tokens hash, per medium. */
  private readonly lower = { cpu: new Map<string, string>(), disk: new Map<string, string>() };

  constructor(config: KvEventLogConfig) {
    this.workerId = config.workerId;
    this.capacity = config.capacity ?? 1024;
    this.ring = new Array(this.capacity).fill(undefined);
  }

  /** Id the next appended event gets (= number of events so far). */
  get nextEventId(): number {
    return this.nextId;
  }
  get oldestEventId(): number {
    return Math.max(0, this.nextId - this.capacity);
  }
  /** Number of blocks the events so far leave cached. */
  get numBlocks(): number {
    return this.blocks.size;
  }

  /** Numbers and records events (in order); returns them as published. */
  append(data: readonly KvEventData[]): KvEvent[] {
    const out: KvEvent[] = new Array(data.length);
    for (let i = 0; i < data.length; i++) {
      const event: KvEvent = { workerId: this.workerId, eventId: this.nextId, data: data[i]! };
      this.ring[this.nextId % this.capacity] = event;
      this.nextId++;
      this.applyToMirror(event.data);
      out[i] = event;
    }
    return out;
  }

  /**
   * Events with ids in [fromId, toId] (toId inclusive, default the latest). A range reaching
   * past the latest event is clipped; one starting before the oldest kept event is 'too_old'.
   */
  replay(fromId: number, toId?: number): KvReplayResult {
    const last = Math.min(toId ?? this.nextId - 1, this.nextId - 1);
    if (fromId < this.oldestEventId) {
      return { type: 'too_old', oldestEventId: this.oldestEventId, nextEventId: this.nextId };
    }
    const events: KvEvent[] = [];
    for (let id = Math.max(0, fromId); id <= last; id++) events.push(this.ring[id % this.capacity]!);
    return { type: 'events', events };
  }

  /** The current cached-block set as Stored events, parents before children. */
  dump(): KvDump {
    const events: KvEventData[] = [];
    const emitted = new Set<string>();
    const stack: string[] = [];
    for (const hash of this.blocks.keys()) {
      if (emitted.has(hash)) continue;
      // Walk up to the first ancestor that is emitted or not cached, then emit downwards.
      let h: string | undefined = hash;
      while (h !== undefined && !emitted.has(h) && this.blocks.has(h)) {
        stack.push(h);
        h = this.blocks.get(h)!.parentHash;
      }
      // The stack holds one parent→child chain: announce it as one Stored event.
      const first = this.blocks.get(stack[stack.length - 1]!)!;
      const chain: KvStoredBlock[] = [];
      while (stack.length > 0) {
        const cur = stack.pop()!;
        chain.push({ blockHash: cur, tokensHash: this.blocks.get(cur)!.tokensHash });
        emitted.add(cur);
      }
      const stored: KvEventData =
        first.parentHash === undefined
          ? { type: 'stored', blocks: chain }
          : { type: 'stored', parentHash: first.parentHash, blocks: chain };
      if (first.loraId !== undefined) stored.loraId = first.loraId;
      events.push(stored);
    }
    for (const medium of ['cpu', 'disk'] as const) {
      const blocks: KvStoredBlock[] = [];
      for (const [blockHash, tokensHash] of this.lower[medium]) blocks.push({ blockHash, tokensHash });
      if (blocks.length > 0) events.push({ type: 'stored', blocks, medium });
    }
    return { nextEventId: this.nextId, events };
  }

  /** Cached block hashes according to the events so far. */
  blockHashes(): Set<string> {
    return new Set(this.blocks.keys());
  }

  private applyToMirror(data: KvEventData): void {
    if (isLowerTierEvent(data) && data.type !== 'cleared') {
      const tier = this.lower[data.medium as 'cpu' | 'disk'];
      if (data.type === 'stored') for (const b of data.blocks) tier.set(b.blockHash, b.tokensHash);
      else for (const h of data.blockHashes) tier.delete(h);
      return;
    }
    switch (data.type) {
      case 'stored': {
        let parent = data.parentHash;
        for (const b of data.blocks) {
          this.blocks.set(b.blockHash, { parentHash: parent, tokensHash: b.tokensHash, loraId: data.loraId });
          parent = b.blockHash;
        }
        return;
      }
      case 'removed':
        for (const h of data.blockHashes) this.blocks.delete(h);
        return;
      case 'cleared':
        this.blocks.clear();
        return;
    }
  }
}
