/**
 * The client side of one server-streaming call as an async iterator, without generator or
 * Readable-iterator layers (they cost more than the call itself on a loopback round trip).
 *
 * Response messages arrive as batches; next() hands out their items one by one, resolving
 * synchronously-available items with an already-settled promise. While more than
 * `highWaterBatches` batches wait unread the call is paused, so grpc-js stops reading HTTP/2 and
 * the server's flow control holds the producer back.
 *
 * An abort (caller's signal) fails the iterator at once, even with items buffered; a server error
 * is raised after the items that preceded it; a consumer that stops early (return()) cancels.
 *
 * That cancel waits RETURN_GRACE_MS for the server's own end first. Consumers commonly stop on
 * the final item (a finish reason) a moment before the call's status arrives; cancelling those
 * calls at once would send an HTTP/2 RST_STREAM per request, and the peer's rapid-reset guard
 * (nghttp2: a burst of 1000, then 33/s) closes the whole shared connection under load.
 */
import type { ClientReadableStream, ServiceError } from '@grpc/grpc-js';
import { CancelledError, TandemError } from '../errors.js';
import { fromServiceError } from './wire-errors.js';

const EMPTY: unknown[] = [];
const RETURN_GRACE_MS = 50;

export interface CallIteratorOptions {
  address: string;
  signal?: AbortSignal;
  timeoutMs?: number;
  /** Yield whole batches (subscribe streams) instead of items. */
  batches?: boolean;
  highWaterBatches?: number;
}

type Waiter = { resolve: (result: IteratorResult<unknown>) => void; reject: (err: unknown) => void };

export class CallIterator<T> implements AsyncIterableIterator<T> {
  private call: ClientReadableStream<unknown[]> | undefined;
  private batch: unknown[] = EMPTY;
  private index = 0;
  private readonly queue: unknown[][] = [];
  private queueHead = 0;
  private ended = false;
  private failure: TandemError | undefined;
  private aborted: TandemError | undefined;
  private finished = false;
  private returned = false;
  private paused = false;
  private waiter: Waiter | undefined;
  private readonly highWater: number;
  private readonly onAbort = (): void => {
    this.aborted = new CancelledError('call cancelled by caller', { cause: this.options.signal?.reason });
    this.call?.cancel();
    this.settle();
  };

  constructor(
    private readonly open: () => ClientReadableStream<unknown[]>,
    private readonly options: CallIteratorOptions,
  ) {
    this.highWater = options.highWaterBatches ?? 8;
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  next(): Promise<IteratorResult<T>> {
    if (this.call === undefined && !this.finished) {
      const started = this.start();
      if (started) return Promise.reject(started);
    }
    if (this.aborted) return this.fail(this.aborted);
    if (!this.options.batches && this.index < this.batch.length) {
      return Promise.resolve({ value: this.batch[this.index++] as T, done: false });
    }
    if (this.queueHead < this.queue.length) {
      const batch = this.takeBatch();
      if (this.options.batches) return Promise.resolve({ value: batch as T, done: false });
      this.batch = batch;
      this.index = 0;
      return this.next();
    }
    if (this.failure) return this.fail(this.failure);
    if (this.ended) return this.done();
    return new Promise<IteratorResult<T>>((resolve, reject) => {
      this.waiter = { resolve: resolve as Waiter['resolve'], reject };
    });
  }

  return(): Promise<IteratorResult<T>> {
    const call = this.call;
    this.returned = true;
    if (call !== undefined && !this.ended && this.failure === undefined && this.aborted === undefined) {
      // Let a call that is about to end do so; cancel only one the server keeps going.
      if (this.paused) call.resume();
      const timer = setTimeout(() => {
        if (!this.ended && this.failure === undefined) call.cancel();
      }, RETURN_GRACE_MS);
      timer.unref();
    }
    this.queue.length = 0;
    this.queueHead = 0;
    this.finish();
    return Promise.resolve({ value: undefined, done: true });
  }

  private start(): TandemError | undefined {
    const signal = this.options.signal;
    if (signal?.aborted) {
      this.finished = true;
      return new CancelledError('call cancelled before it started', { cause: signal.reason });
    }
    let call: ClientReadableStream<unknown[]>;
    try {
      call = this.open();
    } catch (err) {
      this.finished = true;
      return err instanceof TandemError ? err : new TandemError('invalid_argument', `cannot start call to ${this.options.address}: ${String(err)}`, { cause: err });
    }
    this.call = call;
    signal?.addEventListener('abort', this.onAbort, { once: true });
    call.on('data', (batch: unknown[]) => {
      if (this.returned) return;
      this.queue.push(batch);
      if (!this.paused && this.queue.length - this.queueHead >= this.highWater) {
        this.paused = true;
        call.pause();
      }
      this.settle();
    });
    call.on('error', (err: Partial<ServiceError>) => {
      if (this.aborted) return;
      const typed = fromServiceError(err);
      if (typed.code === 'deadline_exceeded' && this.options.timeoutMs !== undefined) {
        typed.message = `deadline of ${this.options.timeoutMs} ms exceeded calling ${this.options.address}`;
      }
      this.failure ??= typed;
      this.settle();
    });
    call.on('end', () => {
      this.ended = true;
      this.settle();
    });
    return undefined;
  }

  private takeBatch(): unknown[] {
    const batch = this.queue[this.queueHead]!;
    this.queue[this.queueHead] = EMPTY;
    this.queueHead += 1;
    if (this.queueHead === this.queue.length) {
      this.queue.length = 0;
      this.queueHead = 0;
    }
    if (this.paused && this.queue.length - this.queueHead <= this.highWater >>> 1) {
      this.paused = false;
      this.call?.resume();
    }
    return batch;
  }

  /** Wake a pending next() with whatever is now available. */
  private settle(): void {
    const waiter = this.waiter;
    if (!waiter) return;
    this.waiter = undefined;
    this.next().then(waiter.resolve, waiter.reject);
  }

  private fail(err: TandemError): Promise<IteratorResult<T>> {
    this.finish();
    return Promise.reject(err);
  }

  private done(): Promise<IteratorResult<T>> {
    this.finish();
    return Promise.resolve({ value: undefined, done: true });
  }

  private finish(): void {
    if (this.finished) return;
    this.finished = true;
    this.batch = EMPTY;
    this.options.signal?.removeEventListener('abort', this.onAbort);
  }
}
