/**
 * Batches of one-turn sessions: each session of this workload is `batchSize` sessions of the
 * inner workload whose user messages travel in one request (embeddings' batched `input`).
 * The last batch may be smaller when the inner workload runs out.
 */
import { singleTurn, type PromptMessage, type SessionSpec, type Workload } from './workload.js';

export class BatchedWorkload implements Workload {
  private produced = 0;

  constructor(
    private readonly inner: Workload,
    private readonly batchSize: number,
  ) {}

  get name(): Workload['name'] {
    return this.inner.name;
  }

  get sessionCount(): number | undefined {
    const n = this.inner.sessionCount;
    return n === undefined ? undefined : Math.ceil(n / this.batchSize);
  }

  get requestCount(): number | undefined {
    return this.sessionCount;
  }

  nextSession(): SessionSpec | undefined {
    const messages: PromptMessage[] = [];
    let inputTokens = 0;
    let arrivalMs: number | undefined;
    for (let i = 0; i < this.batchSize; i++) {
      const s = this.inner.nextSession();
      if (!s) break;
      arrivalMs ??= s.arrivalMs;
      const turn = s.turn(0, []);
      for (const m of turn.messages) if (m.role === 'user') messages.push(m);
      inputTokens += turn.inputTokens;
    }
    if (messages.length === 0) return undefined;
    return singleTurn(this.produced++, { messages, inputTokens, outputTokens: 0 }, arrivalMs);
  }

  describe(): Record<string, unknown> {
    return { ...this.inner.describe(), batch_size: this.batchSize };
  }
}
