/**
 * Compiling new grammars off the event loop, within each request's budget: the frontend's
 * check (spec → IR → automaton, no vocabulary) and the worker's compile (the same, then the
 * token classes of every node against its vocabulary). Both run here, on worker threads; the
 * event loop only posts the spec and takes the result (for a worker: the automaton and its
 * classes packed in one buffer, adopted into its GrammarCache).
 *
 *   prepare(spec, signal) ── known? ── yes ─▶ undefined
 *                              │ no
 *      same spec running? join it : queue ─▶ idle thread ─▶ compile-thread.ts (CompileBudget)
 *
 * - Budget: past `limits.timeoutMs` or `limits.memoryBytes` the thread stops with a GrammarError
 *   naming the budget (a 400). A thread that has not answered by the deadline plus a grace
 *   (busy where it does not check) is terminated.
 * - Cancellation: when every request waiting for a compile has gone, a queued compile is dropped
 *   and a running one gets its cancel flag set (it stops at its next check); a thread still
 *   busy with it after the grace is terminated.
 * - Memory: a compile that charged more than `recycleBytes` recycles its thread, so the heap and
 *   the caches it grew are returned rather than kept.
 * This is the grammar engine's one part with threads; everything it runs is the pure engine.
 */
import { Worker } from 'node:worker_threads';
import type { Vocabulary } from '../contract.js';
import { GrammarError } from '../contract.js';
import { type CompileLimits, compileTimeExceeded } from '../budget.js';
import type { Automaton } from '../automaton/automaton.js';
import type { GrammarCache } from '../automaton/cache.js';
import { packVocabulary } from '../vocabulary.js';
import type { StructuredOutputSpec } from '../../proto/wire.js';
// The main thread's side only (the thread's entry imports nothing of it but types), which has
// the whole runtime loaded anyway.
import { CancelledError, LruMap, TandemError, UnavailableError, threadEntry, type Logger } from '../../runtime/index.js';

/** Main thread → compile thread. */
export interface CompileJob {
  id: number;
  spec: StructuredOutputSpec;
  limits: CompileLimits;
  /** Int32Array over a SharedArrayBuffer: set to 1 to cancel. */
  cancel: Int32Array;
}

/** Compile thread → main thread. `used`: the bytes the compile charged. No vocabulary: no automaton. */
export type CompileReply =
  | { id: number; automaton?: Automaton; packed?: ArrayBuffer; used: number }
  | { id: number; error: { code: string; kind?: string; message: string }; used: number };

export type CompileOutcome = 'compiled' | 'budget_exceeded' | 'invalid' | 'cancelled' | 'failed';

export interface GrammarCompilerOptions {
  limits: CompileLimits;
  /**
   * A worker's: compile against this vocabulary and adopt the result into `cache`. Without,
   * only check that the spec compiles (the frontend), remembering recent successes.
   */
  target?: { vocab: Vocabulary; cache: GrammarCache };
  /** Compile threads (default 1). */
  threads?: number;
  log?: Logger;
  /** A compile that charged more bytes than this recycles its thread (default 64 MiB). */
  recycleBytes?: number;
  /** How long past the deadline (or a cancel) a thread may run before it is terminated (default 1 s). */
  graceMs?: number;
  /** Told of each compile's end (metrics). */
  onOutcome?: (outcome: CompileOutcome) => void;
}

interface Job {
  id: number;
  key: string;
  spec: StructuredOutputSpec;
  cancel: Int32Array;
  waiters: number;
  done: Promise<void>;
  resolve(): void;
  reject(err: unknown): void;
  timer: NodeJS.Timeout | undefined;
  slot: Slot | undefined;
}

interface Slot {
  worker: Worker;
  job: Job | undefined;
}

const DEFAULT_RECYCLE_BYTES = 64 * 1024 * 1024;
const DEFAULT_GRACE_MS = 1000;
/** Specs the frontend remembers as valid; spec texts longer than this are checked every time. */
const CHECKED_ENTRIES = 256;
const CHECKED_MAX_KEY_CHARS = 32 * 1024;

export class GrammarCompiler {
  private readonly slots: Slot[] = [];
  private readonly queue: Job[] = [];
  private readonly byKey = new Map<string, Job>();
  private readonly checked = new LruMap<string, true>({ maxEntries: CHECKED_ENTRIES });
  private readonly threads: number;
  private nextId = 1;
  private closed = false;
  /** Compiles finished on a thread; compiles cancelled; threads recycled or terminated (stats, tests). */
  compiled = 0;
  cancelled = 0;
  recycled = 0;

  constructor(private readonly options: GrammarCompilerOptions) {
    this.threads = Math.max(1, Math.floor(options.threads ?? 1));
  }

  /**
   * Undefined when the spec is known good (compiled, or recently checked); else a promise that
   * resolves when it is (or when `signal` aborts: the caller checks its signal) and rejects
   * with a GrammarError (invalid spec, budget exceeded) or a TandemError.
   */
  prepare(spec: StructuredOutputSpec, signal?: AbortSignal): Promise<void> | undefined {
    const target = this.options.target;
    const key = JSON.stringify(spec);
    if (target !== undefined ? target.cache.lookup(spec, target.vocab) !== undefined : this.checked.get(key) !== undefined) return undefined;
    if (this.closed) return Promise.reject(new UnavailableError('the grammar compiler is closed'));
    if (signal?.aborted) return Promise.resolve();
    const job = this.byKey.get(key) ?? this.enqueue(spec, key);
    job.waiters++;
    if (signal === undefined) return job.done;
    return new Promise<void>((resolve, reject) => {
      const onAbort = (): void => {
        if (--job.waiters === 0) this.cancel(job);
        resolve();
      };
      signal.addEventListener('abort', onAbort, { once: true });
      job.done.then(
        () => {
          signal.removeEventListener('abort', onAbort);
          resolve();
        },
        (err: unknown) => {
          signal.removeEventListener('abort', onAbort);
          reject(err);
        },
      );
    });
  }

  /** Compiles waiting for a thread, compiles running, threads alive. */
  get stats(): { queued: number; running: number; threads: number } {
    let running = 0;
    for (const s of this.slots) if (s.job !== undefined) running++;
    return { queued: this.queue.length, running, threads: this.slots.length };
  }

  async close(): Promise<void> {
    this.closed = true;
    const err = new UnavailableError('the grammar compiler is closed');
    for (const job of this.queue.splice(0)) this.settle(job, err);
    const slots = this.slots.splice(0);
    for (const slot of slots) if (slot.job !== undefined) this.settle(slot.job, err);
    await Promise.all(slots.map((s) => s.worker.terminate()));
  }

  private enqueue(spec: StructuredOutputSpec, key: string): Job {
    let resolve!: () => void;
    let reject!: (err: unknown) => void;
    const done = new Promise<void>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    // A job whose waiters all left may still fail; nobody listens then.
    done.catch(() => {});
    const job: Job = { id: this.nextId++, key, spec, cancel: new Int32Array(new SharedArrayBuffer(4)), waiters: 0, done, resolve, reject, timer: undefined, slot: undefined };
    this.byKey.set(key, job);
    this.queue.push(job);
    this.dispatch();
    return job;
  }

  private dispatch(): void {
    while (!this.closed && this.queue.length > 0) {
      const slot = this.idleSlot();
      if (slot === undefined) return;
      this.start(slot, this.queue.shift()!);
    }
  }

  private idleSlot(): Slot | undefined {
    for (const s of this.slots) if (s.job === undefined) return s;
    return this.slots.length < this.threads ? this.spawn() : undefined;
  }

  private start(slot: Slot, job: Job): void {
    slot.job = job;
    job.slot = slot;
    slot.worker.ref();
    const limits = this.options.limits;
    slot.worker.postMessage({ id: job.id, spec: job.spec, limits, cancel: job.cancel } satisfies CompileJob);
    // The thread checks its own deadline; this catches a thread stuck where it does not check.
    job.timer = setTimeout(() => this.abandon(job, compileTimeExceeded(limits.timeoutMs), 'budget_exceeded'), limits.timeoutMs + this.grace());
  }

  private cancel(job: Job): void {
    const queued = this.queue.indexOf(job);
    if (queued !== -1) {
      this.queue.splice(queued, 1);
      this.settle(job, cancelledError());
      this.cancelled++;
      this.options.onOutcome?.('cancelled');
      return;
    }
    if (job.slot === undefined) return;
    // A request for the same spec from now on gets a compile of its own.
    if (this.byKey.get(job.key) === job) this.byKey.delete(job.key);
    Atomics.store(job.cancel, 0, 1);
    clearTimeout(job.timer);
    job.timer = setTimeout(() => this.abandon(job, cancelledError(), 'cancelled'), this.grace());
  }

  /** The running job did not stop in time: terminate its thread (a fresh one takes the queue). */
  private abandon(job: Job, err: unknown, outcome: CompileOutcome): void {
    const slot = job.slot;
    if (slot === undefined) return;
    this.options.log?.warn({ outcome }, 'structured output: a grammar compile thread did not stop in time; terminating it');
    this.finish(job, err, outcome);
    this.recycle(slot);
    this.dispatch();
  }

  private finish(job: Job, err: unknown, outcome: CompileOutcome): void {
    clearTimeout(job.timer);
    if (job.slot !== undefined) {
      job.slot.job = undefined;
      job.slot = undefined;
    }
    if (outcome === 'cancelled') this.cancelled++;
    this.options.onOutcome?.(outcome);
    if (err === undefined) {
      if (this.byKey.get(job.key) === job) this.byKey.delete(job.key);
      job.resolve();
    } else this.settle(job, err);
  }

  private settle(job: Job, err: unknown): void {
    clearTimeout(job.timer);
    if (this.byKey.get(job.key) === job) this.byKey.delete(job.key);
    job.reject(err);
  }

  private onReply(slot: Slot, reply: CompileReply): void {
    const job = slot.job;
    if (job === undefined || job.id !== reply.id) return;
    if ('error' in reply) {
      const err = rebuildError(reply.error);
      this.finish(job, err, outcomeOf(err));
    } else {
      try {
        this.accept(job, reply);
        this.compiled++;
        this.finish(job, undefined, 'compiled');
      } catch (err) {
        this.finish(job, err, 'failed');
      }
    }
    // A big compile leaves a big heap and big caches behind on the thread: start afresh.
    if (reply.used > (this.options.recycleBytes ?? DEFAULT_RECYCLE_BYTES)) this.recycle(slot);
    else slot.worker.unref();
    this.dispatch();
  }

  private accept(job: Job, reply: { automaton?: Automaton; packed?: ArrayBuffer }): void {
    const target = this.options.target;
    if (target === undefined) {
      if (job.key.length <= CHECKED_MAX_KEY_CHARS) this.checked.set(job.key, true);
      return;
    }
    target.cache.adopt(job.spec, target.vocab, reply.automaton!, reply.packed!);
  }

  private recycle(slot: Slot): void {
    const at = this.slots.indexOf(slot);
    if (at === -1) return;
    this.slots.splice(at, 1);
    this.recycled++;
    void slot.worker.terminate();
  }

  private grace(): number {
    return this.options.graceMs ?? DEFAULT_GRACE_MS;
  }

  private spawn(): Slot {
    const entry = threadEntry(import.meta.url, 'compiler-thread');
    const vocab = this.options.target?.vocab;
    const worker = new Worker(entry.code, { eval: entry.eval, workerData: vocab !== undefined ? packVocabulary(vocab) : null });
    const slot: Slot = { worker, job: undefined };
    worker.on('message', (reply: CompileReply) => this.onReply(slot, reply));
    let crash: unknown;
    worker.on('error', (err) => {
      crash = err;
    });
    worker.on('exit', (code) => {
      const at = this.slots.indexOf(slot);
      if (at === -1) return; // terminated on purpose
      this.slots.splice(at, 1);
      this.options.log?.warn({ err: crash, code }, 'structured output: a grammar compile thread stopped');
      const job = slot.job;
      if (job !== undefined) this.finish(job, new TandemError('internal', `structured output: the grammar compile thread stopped (exit ${code})`, { cause: crash }), 'failed');
      this.dispatch();
    });
    worker.unref();
    this.slots.push(slot);
    return slot;
  }
}

function cancelledError(): CancelledError {
  return new CancelledError('grammar compile cancelled: the request went away');
}

function rebuildError(wire: { code: string; kind?: string; message: string }): Error {
  if (wire.kind !== undefined) return new GrammarError(wire.kind as GrammarError['kind'], wire.message);
  if (wire.code === 'cancelled') return new CancelledError(wire.message);
  return new TandemError('internal', `structured output: grammar compile failed: ${wire.message}`);
}

function outcomeOf(err: Error): CompileOutcome {
  if (err instanceof GrammarError) return err.kind === 'budget_exceeded' ? 'budget_exceeded' : 'invalid';
  if (err instanceof CancelledError) return 'cancelled';
  return 'failed';
}
