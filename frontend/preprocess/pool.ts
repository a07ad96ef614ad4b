/**
 * PreprocessPool: chat-template rendering and tokenization on worker threads, so a large prompt
 * never stalls the event loop (/live, other streams). Each thread lazily loads its own tokenizer
 * and template per model source and runs prompt.ts's tokenizePrompt, the same function the
 * inline path runs; ids come back as a transferred Uint32Array (no copy, no per-token objects).
 *
 *   run(source, spec, budget) ─▶ idle thread? ─yes─▶ postMessage ─▶ pool-worker.ts ─▶ ids / too_long / error
 *                                   │ no
 *                                   ▼
 *                           FIFO queue (bounded: resource_exhausted when full)
 *
 * One job per thread at a time, so a slow prompt only holds its own thread. Threads start on
 * first use, are unref'd while idle (only a running job keeps the process alive) and are
 * terminated by close().
 */
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import { CancelledError, TandemError, UnavailableError, errorFromWire, threadEntry } from '../../runtime/index.js';
import type { PromptSource, PromptSpec, PromptTokens } from './prompt.js';

export interface PreprocessPoolOptions {
  /** Worker threads; default: the machine's available parallelism (at least 1). */
  threads?: number;
  /** Jobs waiting for a thread before run() refuses with resource_exhausted. Default 1024. */
  maxQueued?: number;
}

export function defaultPreprocessThreads(): number {
  return Math.max(1, availableParallelism());
}

/** Main thread → pool thread. */
export interface PoolRequest {
  id: number;
  source: PromptSource;
  spec: PromptSpec;
  maxPromptTokens: number;
}

/** Pool thread → main thread. */
export type PoolReply = { id: number; ok: true; result: PromptTokens } | { id: number; ok: false; error: { code: string; name: string; message: string } };

interface Job {
  request: PoolRequest;
  resolve(result: PromptTokens): void;
  reject(err: unknown): void;
  signal: AbortSignal | undefined;
  onAbort: (() => void) | undefined;
}

interface Slot {
  worker: Worker;
  job: Job | undefined;
  /** The uncaught error that ended the thread, for its job's rejection. */
  crash: Error | undefined;
}

export class PreprocessPool {
  readonly threads: number;
  readonly maxQueued: number;
  private readonly slots: Slot[] = [];
  private readonly queue: Job[] = [];
  private nextId = 1;
  private closed = false;

  constructor(options: PreprocessPoolOptions = {}) {
    this.threads = Math.max(1, Math.floor(options.threads ?? defaultPreprocessThreads()));
    this.maxQueued = Math.max(0, options.maxQueued ?? 1024);
  }

  /** Threads started, jobs running, jobs waiting. */
  get stats(): { started: number; busy: number; queued: number } {
    let busy = 0;
    for (const s of this.slots) if (s.job) busy++;
    return { started: this.slots.length, busy, queued: this.queue.length };
  }

  /**
   * Tokenize on a pool thread. Rejects with the thread's typed error (a template error stays
   * invalid_argument), resource_exhausted when the queue is full, cancelled when `signal`
   * aborts while queued, unavailable after close().
   */
  run(source: PromptSource, spec: PromptSpec, maxPromptTokens: number, signal?: AbortSignal): Promise<PromptTokens> {
    if (this.closed) return Promise.reject(new UnavailableError('the preprocessing pool is closed'));
    if (signal?.aborted) return Promise.reject(new CancelledError('request cancelled before preprocessing'));
    const idle = this.idleSlot();
    if (!idle && this.queue.length >= this.maxQueued) {
      return Promise.reject(new TandemError('resource_exhausted', `the preprocessing queue is full (${this.maxQueued} prompts waiting); retry later`));
    }
    return new Promise<PromptTokens>((resolve, reject) => {
      const job: Job = { request: { id: this.nextId++, source, spec, maxPromptTokens }, resolve, reject, signal, onAbort: undefined };
      if (idle) return this.start(idle, job);
      if (signal) {
        job.onAbort = () => {
          const at = this.queue.indexOf(job);
          if (at === -1) return;
          this.queue.splice(at, 1);
          reject(new CancelledError('request cancelled while waiting for preprocessing'));
        };
        signal.addEventListener('abort', job.onAbort, { once: true });
      }
      this.queue.push(job);
    });
  }

  /** Terminate every thread; running and queued jobs reject with unavailable. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const err = new UnavailableError('the preprocessing pool is closed');
    for (const job of this.queue.splice(0)) this.settle(job, err);
    const slots = this.slots.splice(0);
    for (const slot of slots) if (slot.job) this.settle(slot.job, err);
    await Promise.all(slots.map((s) => s.worker.terminate()));
  }

  private idleSlot(): Slot | undefined {
    for (const s of this.slots) if (!s.job) return s;
    if (this.slots.length < this.threads) return this.spawn();
    return undefined;
  }

  private start(slot: Slot, job: Job): void {
    if (job.onAbort) job.signal?.removeEventListener('abort', job.onAbort);
    slot.job = job;
    // A running job keeps the process alive (its caller awaits it); an idle thread does not.
    slot.worker.ref();
    slot.worker.postMessage(job.request);
  }

  private dispatch(slot: Slot): void {
    const next = this.queue.shift();
    if (next) this.start(slot, next);
  }

  private spawn(): Slot {
    const entry = threadEntry(import.meta.url, 'pool-worker');
    const worker = new Worker(entry.code, { eval: entry.eval });
    worker.unref();
    const slot: Slot = { worker, job: undefined, crash: undefined };
    worker.on('message', (reply: PoolReply) => {
      const job = slot.job;
      if (!job || job.request.id !== reply.id) return;
      slot.job = undefined;
      slot.worker.unref();
      if (reply.ok) job.resolve(reply.result);
      else job.reject(rebuildError(reply.error));
      if (!this.closed) this.dispatch(slot);
    });
    // An uncaught error ends the thread; 'exit' follows and fails its job.
    worker.on('error', (err) => {
      slot.crash = err;
    });
    worker.on('exit', (code) => {
      if (this.closed) return;
      const at = this.slots.indexOf(slot);
      if (at !== -1) this.slots.splice(at, 1);
      if (slot.job) {
        const why = slot.crash ? `: ${slot.crash.message}` : '';
        this.settle(slot.job, new TandemError('internal', `a preprocessing thread exited (code ${code})${why}`, { cause: slot.crash }));
      }
      slot.job = undefined;
      // Its queued work goes to a fresh thread.
      const next = this.queue.shift();
      if (next) {
        const fresh = this.idleSlot();
        if (fresh) this.start(fresh, next);
        else this.queue.unshift(next);
      }
    });
    this.slots.push(slot);
    return slot;
  }

  private settle(job: Job, err: unknown): void {
    if (job.onAbort) job.signal?.removeEventListener('abort', job.onAbort);
    job.reject(err);
  }
}

/** Typed errors cross the thread boundary as {code, name, message}. */
function rebuildError(wire: { code: string; name: string; message: string }): TandemError {
  const err = errorFromWire(wire.code, wire.message);
  if (err.name === 'TandemError' && wire.name) Object.defineProperty(err, 'name', { value: wire.name });
  return err;
}

