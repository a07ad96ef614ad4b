/**
 * The client side of one server-streaming call as an async iterator, without generator or
 * Readable-iterator layers (they cost more than the call itself on a loopback round trip).
 *
 * Response messages arrive as batches; next() hands out their items one by one, resolving
 * synchronously-available items with an already-settled promise. While more than
 * `highWaterBatches` batches wait unread the call is paused, so grpc-js stops reading HTTP/2 and
 * the server's flow control holds the producer back.
 *
 * An abort (caller's signal) fails the iterator at once, even with items buffered, and cancels
 * the call; a server error is raised after the items that preceded it.
 *
 * A consumer that stops early (return()) cancels only on evidence that the server goes on:
 * consumers commonly stop on the final item (a finish reason) a moment before the call's status
 * arrives, and under load that moment is often longer than any fixed grace. Cancelling those
 * calls sent one HTTP/2 RST_STREAM per request, and the peer's rapid-reset guard (nghttp2: a
 * burst of 1000, then 33/s per connection) closed the whole connection with every stream on it
 * (issue 12, fault 4). So after return() the call is read and discarded: more data means the
 * server is still producing, and it is cancelled then; its end means nothing was owed; a server
 * that sends neither for `lingerMs` (a handler parked on a wait) is cancelled then.
 *
 * Cancels go through `cancel` (the channel pool's reset budget). When it refuses, the call is
 * read and dropped, and the cancel is tried again on the next item or after another linger
 * (the budget refills): slower to free the server, but the connection survives.
 */
import type { ClientReadableStream, ServiceError } from '@grpc/grpc-js';
import { CancelledError, TandemError } from '../errors.js';
import { fromServiceError } from './wire-errors.js';

const EMPTY: unknown[] = [];
/** How long a call the consumer left may stay silent before it is cancelled anyway (default). */
export const RETURN_LINGER_MS = 1_000;

const cancelDirectly = (call: ClientReadableStream<unknown[]>): boolean => {
  call.cancel();
  return true;
};

export interface CallIteratorOptions {
  address: string;
  signal?: AbortSignal;
  timeoutMs?: number;
  /** Yield whole batches (subscribe streams) instead of items. */
  batches?: boolean;
  highWaterBatches?: number;
  /** After return(), how long a silent call waits for its end before it is cancelled (default RETURN_LINGER_MS). */
  lingerMs?: number;
  /** Send the RST_STREAM; false when the connection cannot afford it (default: always cancel). */
  cancel?: (call: ClientReadableStream<unknown[]>) => boolean;
}

type Waiter = { resolve: (result: IteratorResult<unknown>) => void; reject: (err: unknown) => void };

export class CallIterator<T> implements AsyncIterableIterator<T> {
  private call: ClientReadableStream<unknown[]> | undefined;
  private batch: unknown[] = EMPTY;
  private index = 0;
  private readonly queue: unknown[][] = [];
  private queueHead = 0;
  /** No more data will come: the stream ended or failed. */
  private ended = false;
  /** The call's status arrived (before buffered data is read, possibly): nothing left to cancel. */
  private statusReceived = false;
  private failure: TandemError | undefined;
  private aborted: TandemError | undefined;
  private finished = false;
  /** The consumer wants nothing more: data is dropped, and the call is cancelled or drained. */
  private discarding = false;
  private cancelSent = false;
  private lingerTimer: NodeJS.Timeout | undefined;
  private paused = false;
  private waiter: Waiter | undefined;
  private readonly highWater: number;
  private readonly onAbort = (): void => {
    this.aborted = new CancelledError('call cancelled by caller', { cause: this.options.signal?.reason });
    this.stopReading();
    this.cancelCall();
    this.settle();
  };
  private readonly cancelCall = (): void => {
    const call = this.call;
    if (call === undefined || this.statusReceived || this.cancelSent) return;
    if (this.lingerTimer !== undefined) clearTimeout(this.lingerTimer);
    this.cancelSent = (this.options.cancel ?? cancelDirectly)(call);
    if (!this.cancelSent) {
      // Refused: keep reading and dropping; try again on the next item or after another linger.
      this.lingerTimer = setTimeout(this.cancelCall, this.options.lingerMs ?? RETURN_LINGER_MS);
      this.lingerTimer.unref();
    }
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
    if (this.call !== undefined && this.failure === undefined && this.aborted === undefined && !this.discarding) {
      this.stopReading();
      // Wait for evidence (see the file comment): more data cancels at once, the end cancels nothing.
      if (!this.statusReceived) {
        this.lingerTimer = setTimeout(this.cancelCall, this.options.lingerMs ?? RETURN_LINGER_MS);
        this.lingerTimer.unref();
      }
    }
    this.queue.length = 0;
    this.queueHead = 0;
    this.finish();
    return Promise.resolve({ value: undefined, done: true });
  }

  /** From now on drop what arrives, and keep grpc-js reading so the call can reach its end. */
  private stopReading(): void {
    this.discarding = true;
    if (this.paused) {
      this.paused = false;
      this.call?.resume();
    }
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
      if (this.discarding) {
        // The consumer left, yet the server is still producing: it was not about to end.
        this.cancelCall();
        return;
      }
      this.queue.push(batch);
      if (!this.paused && this.queue.length - this.queueHead >= this.highWater) {
        this.paused = true;
        call.pause();
      }
      this.settle();
    });
    call.on('error', (err: Partial<ServiceError>) => {
      this.ended = true;
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
    call.once('status', () => {
      this.statusReceived = true;
      if (this.lingerTimer !== undefined) clearTimeout(this.lingerTimer);
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
