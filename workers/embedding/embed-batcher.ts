/**
 * Continuous batching for embeddings: a request that arrives while the embedder is busy waits,
 * and when the running batch ends every waiting request (up to the token budget) goes into the
 * next one. No timers: an idle embedder starts at once, so a lone request never waits.
 *
 *   submit(A) ─▶ run [A]          submit(B), submit(C) while [A] runs
 *   [A] done  ─▶ run [B, C] ─▶ each caller gets its own slice of the vectors
 */
import type { Embedder } from './embedder.js';

interface Pending {
  inputs: readonly ArrayLike<number>[];
  tokens: number;
  resolve(vectors: Float32Array): void;
  reject(err: unknown): void;
}

export interface EmbedBatcherStats {
  batches: number;
  requests: number;
  inputs: number;
  tokens: number;
}

export class EmbedBatcher {
  private readonly queue: Pending[] = [];
  private running = false;
  readonly stats: EmbedBatcherStats = { batches: 0, requests: 0, inputs: 0, tokens: 0 };

  constructor(
    private readonly embedder: Embedder,
    /** Tokens per engine call; a single request above it still runs, alone. */
    private readonly maxBatchTokens: number,
  ) {}

  get waiting(): number {
    return this.queue.length;
  }

  submit(inputs: readonly ArrayLike<number>[]): Promise<Float32Array> {
    let tokens = 0;
    for (const input of inputs) tokens += input.length;
    return new Promise<Float32Array>((resolve, reject) => {
      this.queue.push({ inputs, tokens, resolve, reject });
      if (!this.running) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.running = true;
    try {
      while (this.queue.length > 0) {
        const batch = this.take();
        const inputs = batch.flatMap((p) => p.inputs);
        try {
          const vectors = await this.embedder.embed(inputs);
          const d = this.embedder.dimensions;
          let at = 0;
          for (const p of batch) {
            p.resolve(vectors.slice(at * d, (at + p.inputs.length) * d));
            at += p.inputs.length;
          }
          this.stats.batches++;
          this.stats.requests += batch.length;
          this.stats.inputs += inputs.length;
          for (const p of batch) this.stats.tokens += p.tokens;
        } catch (err) {
          for (const p of batch) p.reject(err);
        }
      }
    } finally {
      this.running = false;
    }
  }

  /** The waiting requests, in order, that fit the budget (at least one). */
  private take(): Pending[] {
    let tokens = 0;
    let n = 0;
    while (n < this.queue.length && (n === 0 || tokens + this.queue[n]!.tokens <= this.maxBatchTokens)) tokens += this.queue[n++]!.tokens;
    return this.queue.splice(0, n);
  }
}
