/**
 * Moves one handler's items onto one gRPC server stream with bounded memory.
 *
 * Coalescing: an item is written at once when no write is in flight (lowest latency); while
 * writes are in flight, items collect in a batch that goes out as one message when a write
 * completes. The batch is bounded (maxBatchItems), in-flight writes are bounded
 * (maxWritesInFlight), and grpc's own `write() === false` is honoured by waiting for 'drain', so a
 * slow consumer stalls the handler instead of growing a queue. A write completes only when
 * HTTP/2 flow control let it out, so the client's read pace is what sets ours.
 */
import type { ServerWritableStream } from '@grpc/grpc-js';
import { TandemError } from '../errors.js';
import type { CallAbort } from './call-abort.js';
import { framedSize, frameBatch, packr } from './codec.js';
import { asTandemError, toServiceError } from './wire-errors.js';

export interface PumpLimits {
  /** Largest gRPC message we may send (the server's max send size). */
  maxMessageBytes: number;
  /** Most items per message and per pending batch. */
  maxBatchItems: number;
  /**
   * A coalesced message larger than this is split (a single item may still go up to
   * maxMessageBytes). Keeps messages well under a peer's receive limit and latency smooth.
   */
  maxBatchBytes: number;
  /** Most messages handed to grpc but not yet flushed to HTTP/2. */
  maxWritesInFlight: number;
}

export const DEFAULT_PUMP_LIMITS: PumpLimits = {
  maxMessageBytes: 64 * 1024 * 1024,
  maxBatchItems: 1024,
  maxBatchBytes: 1024 * 1024,
  maxWritesInFlight: 2,
};

type OutStream = ServerWritableStream<unknown, Buffer>;

class BatchWriter {
  private batch: unknown[] = [];
  private inFlight = 0;
  private needDrain = false;
  private wake: (() => void) | undefined;
  failure: TandemError | undefined;
  private readonly onWritten = (): void => {
    this.inFlight -= 1;
    if (this.batch.length > 0 && this.failure === undefined && !this.call.destroyed) this.flush();
    this.notify();
  };

  constructor(
    private readonly call: OutStream,
    private readonly limits: PumpLimits,
  ) {}

  push(item: unknown): void {
    this.batch.push(item);
    if (this.inFlight === 0 || (this.batch.length >= this.limits.maxBatchItems && this.inFlight < this.limits.maxWritesInFlight)) {
      this.flush();
    }
  }

  /** True when the producer must wait: the batch is full and the pipe is full, or grpc asked to drain. */
  get mustWait(): boolean {
    return this.failure === undefined && (this.needDrain || this.batch.length >= this.limits.maxBatchItems);
  }

  waitForCapacity(abort: CallAbort): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = () => {
        offAbort();
        this.call.removeListener('drain', onDrain);
        this.call.removeListener('close', done);
        this.wake = undefined;
        resolve();
      };
      const onDrain = () => {
        this.needDrain = false;
        if (this.batch.length > 0 && this.inFlight < this.limits.maxWritesInFlight) this.flush();
        if (!this.mustWait) done();
      };
      this.wake = () => {
        if (!this.mustWait) done();
      };
      const offAbort = abort.onAbort(done);
      this.call.on('drain', onDrain);
      this.call.once('close', done);
    });
  }

  /** Write whatever is batched. Splits a batch that would exceed the message limit. */
  flush(): void {
    if (this.batch.length === 0) return;
    const items = this.batch;
    this.batch = [];
    this.writeItems(items);
  }

  private writeItems(items: unknown[]): void {
    if (this.failure) return;
    const packed = packr.pack(items);
    const size = framedSize(packed.length);
    if (items.length === 1 && size > this.limits.maxMessageBytes) {
      this.failure = new TandemError(
        'resource_exhausted',
        `response item of ${packed.length} bytes exceeds the max message size ${this.limits.maxMessageBytes}`,
      );
      this.notify();
      return;
    }
    if (items.length > 1 && size > Math.min(this.limits.maxBatchBytes, this.limits.maxMessageBytes)) {
      const half = items.length >>> 1;
      this.writeItems(items.slice(0, half));
      this.writeItems(items.slice(half));
      return;
    }
    this.inFlight += 1;
    if (!this.call.write(frameBatch(packed), this.onWritten)) this.needDrain = true;
  }

  private notify(): void {
    this.wake?.();
  }
}

/** Send an error status unless the call is already gone (cancelled by the peer). */
export function failCall(call: OutStream, err: TandemError): void {
  if (call.cancelled || call.destroyed || call.writableEnded) return;
  call.emit('error', toServiceError(err));
}

/**
 * Pump `source` into `call` until it ends, fails, or `abort` fires. Always leaves the source
 * closed: on abort or failure it calls `return()` so the handler's finally blocks run.
 */
export async function pumpStream(call: OutStream, source: AsyncIterator<unknown>, abort: CallAbort, limits: PumpLimits): Promise<void> {
  const writer = new BatchWriter(call, limits);
  let sourceDone = false;
  try {
    while (!abort.aborted) {
      const next = await source.next();
      if (next.done) {
        sourceDone = true;
        break;
      }
      if (abort.aborted) break;
      writer.push(next.value);
      if (writer.failure) break;
      if (writer.mustWait) await writer.waitForCapacity(abort);
      if (call.destroyed && !abort.aborted) break;
    }
  } catch (err) {
    sourceDone = true;
    if (abort.aborted) {
      failCall(call, asTandemError(abort.reason));
    } else {
      writer.flush();
      failCall(call, asTandemError(err));
    }
    return;
  } finally {
    if (!sourceDone) {
      try {
        await source.return?.();
      } catch {
        // The handler failed while cleaning up after a cancelled call: nobody is listening.
      }
    }
  }
  if (writer.failure) {
    failCall(call, writer.failure);
  } else if (abort.aborted) {
    failCall(call, asTandemError(abort.reason));
  } else if (!call.destroyed && !call.writableEnded) {
    writer.flush();
    if (writer.failure) failCall(call, writer.failure);
    else call.end();
  }
}
