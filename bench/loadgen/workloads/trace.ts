/**
 * `trace`: replays a Mooncake-format trace. Arrivals follow the trace's timestamps divided
 * by `speedup`; every hash id maps to one deterministic block of prompt tokens, so requests
 * with equal hash ids send equal token blocks and share a cacheable prefix exactly where the
 * trace says they do.
 */
import type { TraceEntry } from '../../../planner/index.js';
import { Rng } from '../rng.js';
import type { TokenSpace } from '../token-space.js';
import { singleTurn, type SessionSpec, type Workload } from './workload.js';

export interface TraceWorkloadOptions {
  file: string;
  entries: TraceEntry[];
  speedup: number;
  blockSize: number;
  /** Replay at most this many entries. */
  requests: number | undefined;
  seed: number;
}

export class TraceWorkload implements Workload {
  readonly name = 'trace';
  private cursor = 0;
  private readonly count: number;
  private readonly blocks = new Map<number, number[]>();
  private readonly origin: number;

  constructor(
    private readonly options: TraceWorkloadOptions,
    private readonly tokens: TokenSpace,
  ) {
    this.count = Math.min(options.entries.length, options.requests ?? Infinity);
    this.origin = options.entries[0]?.timestamp ?? 0;
  }

  get sessionCount(): number {
    return this.count;
  }

  get requestCount(): number {
    return this.count;
  }

  /** Deterministic tokens for one hash id; the same id always yields the same block. */
  private block(hashId: number): number[] {
    let ids = this.blocks.get(hashId);
    if (!ids) {
      ids = this.tokens.sample(this.options.blockSize, new Rng(this.options.seed, 0x48000000 ^ hashId));
      this.blocks.set(hashId, ids);
    }
    return ids;
  }

  nextSession(): SessionSpec | undefined {
    if (this.cursor >= this.count) return undefined;
    const index = this.cursor++;
    const entry = this.options.entries[index] as TraceEntry;
    const ids: number[] = [];
    for (const h of entry.hash_ids) {
      if (ids.length >= entry.input_length) break;
      const block = this.block(h);
      const take = Math.min(block.length, entry.input_length - ids.length);
      for (let i = 0; i < take; i++) ids.push(block[i] as number);
    }
    if (ids.length < entry.input_length) {
      // The trace promised more tokens than its blocks cover: pad with tokens unique to it.
      const pad = this.tokens.sample(entry.input_length - ids.length, new Rng(this.options.seed, 0x50000000 ^ index));
      for (const id of pad) ids.push(id);
    }
    const arrivalMs = (entry.timestamp - this.origin) / this.options.speedup;
    const turn = { messages: [{ role: 'user' as const, ids }], inputTokens: entry.input_length, outputTokens: entry.output_length };
    return singleTurn(index, turn, arrivalMs);
  }

  describe(): Record<string, unknown> {
    const o = this.options;
    return { name: this.name, file: o.file, requests: this.count, speedup: o.speedup, block_size: o.blockSize };
  }
}
