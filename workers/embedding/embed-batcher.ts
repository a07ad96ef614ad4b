/**
 * Continuous batching for embeddings, bounded and fair. Every request's inputs wait in its own
 * job; each engine call takes inputs round-robin over the waiting jobs (one input from each in
 * turn) until the token budget is full. So no request holds the endpoint: a request of 2,048
 * inputs shares every batch with one of 3 that arrives behind it, and the small one is done
 * after one batch. No timers: an idle embedder starts at once, so a lone request never waits.
 *
 *   submit(A: 5 inputs) ─▶ run [A0 A1 A2]           (budget: 3 inputs' tokens)
 *   submit(B: 2 inputs) while it runs
 *   done ─▶ run [A3 B0 A4]  ─▶ run [B1]  ─▶ each caller gets its own rows, in its order
 *
 * A caller that goes away (its signal aborts) leaves at once: its waiting inputs are dropped,
 * and when every input of the running call belongs to callers that left, that call is aborted
 * too (the native engine stops before its next forward pass). `stats` counts the work done and
 * the work cancelled.
 */
import { CancelledError } from '../../runtime/errors.js';
import type { Embedder } from './embedder.js';

/** One request: its inputs, how far batching got, and its rows as they arrive. */
class Job {
  /** Next input not yet given to a batch. */
  next = 0;
  /** Inputs whose vectors are in `out`. */
  done = 0;
  out: Float32Array | undefined;
  settled = false;
  /** Detaches the caller's abort listener. */
  detach: () => void = () => {};

  constructor(
    readonly inputs: readonly ArrayLike<number>[],
    readonly tokens: number,
    private readonly onResolve: (vectors: Float32Array) => void,
    private readonly onReject: (err: unknown) => void,
  ) {}

  get waiting(): number {
    return this.inputs.length - this.next;
  }

  resolve(vectors: Float32Array): void {
    this.settled = true;
    this.detach();
    this.onResolve(vectors);
  }

  reject(err: unknown): void {
    this.settled = true;
    this.detach();
    this.onReject(err);
  }
}

/** Slot i of a batch: input `index` of `job`. */
interface Slot {
  job: Job;
  index: number;
}

export interface EmbedBatcherStats {
  /** Engine calls that finished. */
  batches: number;
  /** Requests answered. */
  requests: number;
  /** Inputs computed (in finished engine calls). */
  inputs: number;
  /** Tokens of the requests answered. */
  tokens: number;
  /** Requests whose caller went away before their answer. */
  cancelledRequests: number;
  /** Inputs of those requests that were never computed (dropped while waiting, or in an aborted call). */
  cancelledInputs: number;
}

export class EmbedBatcher {
  /** Jobs with inputs not yet batched, in round-robin order. */
  private readonly queue: Job[] = [];
  /** Jobs submitted and not yet settled. */
  private readonly live = new Set<Job>();
  private running = false;
  /** Aborts the engine call in progress (set while one runs). */
  private call: { slots: Slot[]; controller: AbortController } | undefined;
  /** Where the next batch's round-robin starts in `queue`. */
  private cursor = 0;
  readonly stats: EmbedBatcherStats = { batches: 0, requests: 0, inputs: 0, tokens: 0, cancelledRequests: 0, cancelledInputs: 0 };

  constructor(
    private readonly embedder: Embedder,
    /** Tokens per engine call; an input longer than this still runs, alone. */
    private readonly maxBatchTokens: number,
  ) {}

  /** Requests with inputs not yet in a batch. */
  get waiting(): number {
    return this.queue.length;
  }

  /** Requests submitted and not yet answered, failed or cancelled. */
  get inflight(): number {
    return this.live.size;
  }

  /** The vectors of `inputs` ([inputs.length × dimensions]); rejects with CancelledError once `signal` aborts. */
  submit(inputs: readonly ArrayLike<number>[], signal?: AbortSignal): Promise<Float32Array> {
    if (signal?.aborted) return Promise.reject(new CancelledError('embed: the caller went away before it was queued'));
    let tokens = 0;
    for (const input of inputs) tokens += input.length;
    return new Promise<Float32Array>((resolve, reject) => {
      const job = new Job(inputs, tokens, resolve, reject);
      if (inputs.length === 0) return job.resolve(new Float32Array(0));
      this.live.add(job);
      this.queue.push(job);
      if (signal !== undefined) {
        const onAbort = () => this.cancel(job);
        signal.addEventListener('abort', onAbort, { once: true });
        job.detach = () => signal.removeEventListener('abort', onAbort);
      }
      if (!this.running) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.running = true;
    try {
      while (this.queue.length > 0) {
        const slots = this.take();
        const controller = new AbortController();
        this.call = { slots, controller };
        const inputs = slots.map((s) => s.job.inputs[s.index]!);
        let vectors: Float32Array | undefined;
        let failure: unknown;
        try {
          vectors = await this.embedder.embed(inputs, controller.signal);
        } catch (err) {
          failure = err;
        }
        this.call = undefined;
        if (controller.signal.aborted) {
          // Every caller of this call had left: its inputs were never computed.
          this.stats.cancelledInputs += slots.length;
          continue;
        }
        if (vectors === undefined) {
          for (const job of new Set(slots.map((s) => s.job))) this.fail(job, failure);
          continue;
        }
        this.stats.batches++;
        this.stats.inputs += slots.length;
        this.deliver(slots, vectors);
      }
    } finally {
      this.running = false;
    }
  }

  /** Copies each slot's row to its job; answers the jobs that are complete. */
  private deliver(slots: readonly Slot[], vectors: Float32Array): void {
    const d = this.embedder.dimensions;
    slots.forEach((slot, i) => {
      const job = slot.job;
      if (job.settled) return;
      job.out ??= new Float32Array(job.inputs.length * d);
      job.out.set(vectors.subarray(i * d, (i + 1) * d), slot.index * d);
      job.done++;
      if (job.done === job.inputs.length) {
        this.live.delete(job);
        this.stats.requests++;
        this.stats.tokens += job.tokens;
        job.resolve(job.out);
      }
    });
  }

  /**
   * The next batch: one input from each waiting job in turn, starting where the last batch
   * stopped, while the budget holds (at least one input). Jobs with nothing left to batch leave
   * the queue.
   */
  private take(): Slot[] {
    const slots: Slot[] = [];
    let tokens = 0;
    let full = false;
    if (this.cursor >= this.queue.length) this.cursor = 0;
    while (!full && this.queue.length > 0) {
      let progressed = false;
      for (let k = 0; k < this.queue.length && !full; k++) {
        const at = (this.cursor + k) % this.queue.length;
        const job = this.queue[at]!;
        if (job.waiting === 0) continue;
        const n = job.inputs[job.next]!.length;
        if (slots.length > 0 && tokens + n > this.maxBatchTokens) {
          full = true;
          this.cursor = at;
          break;
        }
        slots.push({ job, index: job.next++ });
        tokens += n;
        progressed = true;
      }
      if (!progressed) break;
    }
    // Jobs fully batched leave the round-robin; the cursor keeps pointing at the same next job.
    const next = this.queue[this.cursor];
    for (let i = this.queue.length - 1; i >= 0; i--) if (this.queue[i]!.waiting === 0) this.queue.splice(i, 1);
    const at = next !== undefined ? this.queue.indexOf(next) : -1;
    this.cursor = at >= 0 ? at : 0;
    return slots;
  }

  /** The caller went away: drop its waiting inputs; abort the engine call if nobody else needs it. */
  private cancel(job: Job): void {
    if (job.settled) return;
    this.stats.cancelledRequests++;
    this.stats.cancelledInputs += job.waiting;
    job.next = job.inputs.length;
    this.removeFromQueue(job);
    this.live.delete(job);
    job.reject(new CancelledError('embed: the caller went away'));
    // During a call its jobs can only settle by leaving: all settled = nobody wants its rows.
    const call = this.call;
    if (call !== undefined && call.slots.every((s) => s.job.settled)) call.controller.abort();
  }

  private fail(job: Job, err: unknown): void {
    if (job.settled) return;
    this.live.delete(job);
    this.removeFromQueue(job);
    job.reject(err);
  }

  private removeFromQueue(job: Job): void {
    const at = this.queue.indexOf(job);
    if (at < 0) return;
    this.queue.splice(at, 1);
    if (at < this.cursor) this.cursor--;
  }
}
