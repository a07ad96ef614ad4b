/**
 * Small builders for router tests: token prompts, idle load reports, and a fake worker that keeps a real block
 * set and emits gap-free KV events the way a worker's block manager does (replay buffer of
 * the last 1024 events, full dumps).
 */
import type { KvEvent, KvEventData, KvStoredBlock, LoadMetrics } from '../../proto/wire.js';
import { blockHashes } from '../../router/hashing.js';
import type { KvDumpResponse, KvReplayResponse } from '../../proto/wire.js';

/** An idle worker's load report (1024-block pool, nothing running), with `extra` fields on top. */
export function idleReport(workerId: string, extra: Partial<LoadMetrics> = {}): LoadMetrics {
  return { workerId, numRunning: 0, numWaiting: 0, kvUsage: 0, activeBlocks: 0, totalBlocks: 1024, queuedPrefillTokens: 0, timestampMs: 0, ...extra };
}

/** `n` tokens derived from `seed`; prompts with the same seed share their tokens. */
export function tokens(seed: number, n: number): number[] {
  const out = new Array<number>(n);
  let x = (seed * 2654435761) >>> 0;
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x ^ (x >>> 13), 0x5bd1e995) + i) >>> 0;
    out[i] = x % 32000;
  }
  return out;
}

/** A prompt made of a shared prefix followed by a private suffix. */
export function prompt(prefixSeed: number, prefixLen: number, suffixSeed: number, suffixLen: number): number[] {
  return [...tokens(prefixSeed, prefixLen), ...tokens(suffixSeed + 1_000_003, suffixLen)];
}

export class FakeKvWorker {
  private nextEventId = 0;
  private readonly log: KvEvent[] = [];
  /** seq hash → (parent seq hash, local hash), in insertion order (parents first). */
  private readonly blocks = new Map<string, { parent: string | undefined; tokensHash: string }>();

  constructor(
    readonly workerId: string,
    readonly blockSize = 4,
    readonly replayCapacity = 1024,
  ) {}

  /** Cache the full blocks of `prompt`; emits one Stored event for the blocks that are new. */
  store(prompt: readonly number[]): KvEvent | undefined {
    const { local, seq } = blockHashes(prompt, this.blockSize);
    let first = 0;
    while (first < seq.length && this.blocks.has(seq[first]!.toString())) first++;
    if (first === seq.length) return undefined;
    const stored: KvStoredBlock[] = [];
    for (let i = first; i < seq.length; i++) {
      const blockHash = seq[i]!.toString();
      const tokensHash = local[i]!.toString();
      this.blocks.set(blockHash, { parent: i === 0 ? undefined : seq[i - 1]!.toString(), tokensHash });
      stored.push({ blockHash, tokensHash });
    }
    const parentHash = first === 0 ? undefined : seq[first - 1]!.toString();
    return this.emit(parentHash === undefined ? { type: 'stored', blocks: stored } : { type: 'stored', parentHash, blocks: stored });
  }

  /** Evict blocks (sequence hashes as strings). */
  remove(hashes: readonly string[]): KvEvent {
    for (const h of hashes) this.blocks.delete(h);
    return this.emit({ type: 'removed', blockHashes: [...hashes] });
  }

  clear(): KvEvent {
    this.blocks.clear();
    return this.emit({ type: 'cleared' });
  }

  blockSet(): string[] {
    return [...this.blocks.keys()].sort();
  }

  replay(from: number, to: number): KvReplayResponse {
    const oldest = this.log.length === 0 ? this.nextEventId : this.log[0]!.eventId;
    if (from < oldest) return { type: 'too_old', workerId: this.workerId, oldestEventId: oldest };
    return { type: 'events', workerId: this.workerId, events: this.log.filter((e) => e.eventId >= from && e.eventId <= to) };
  }

  dump(): KvDumpResponse {
    const events: KvEventData[] = [];
    for (const [blockHash, b] of this.blocks) {
      const block = { blockHash, tokensHash: b.tokensHash };
      events.push(b.parent === undefined ? { type: 'stored', blocks: [block] } : { type: 'stored', parentHash: b.parent, blocks: [block] });
    }
    return { workerId: this.workerId, nextEventId: this.nextEventId, events };
  }

  private emit(data: KvEventData): KvEvent {
    const e: KvEvent = { workerId: this.workerId, eventId: this.nextEventId++, data };
    this.log.push(e);
    if (this.log.length > this.replayCapacity) this.log.shift();
    return e;
  }
}
