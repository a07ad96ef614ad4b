/**
 * GrpcRequestPlaneServer: the process's one gRPC server. Many endpoint paths register on it;
 * each `Generate` call is dispatched by path to an async-generator handler whose items are
 * pumped back with coalescing and backpressure (stream-pump.ts). The same server answers
 * `Subscribe` for the direct event plane from its TopicHub.
 */
import { Server, ServerCredentials, type ServerWritableStream } from '@grpc/grpc-js';
import { CancelledError, DeadlineExceededError, TandemError, UnavailableError } from '../errors.js';
import type { Logger } from '../logging.js';
import { CallAbort } from './call-abort.js';
import { frameBatch, packr, type WireRequest } from './codec.js';
import { DEFAULT_MAX_MESSAGE_BYTES, REQUEST_PLANE_SERVICE } from './service.js';
import { DEFAULT_PUMP_LIMITS, failCall, pumpStream, type PumpLimits } from './stream-pump.js';
import { TopicHub } from './topic-hub.js';
import type { RequestContext, RequestPlaneServer, StreamHandler } from './types.js';

export interface GrpcServerOptions {
  /** Interface to bind (default 0.0.0.0). */
  host?: string;
  /** 0 (default) picks a free port; `address` reports the real one. */
  port?: number;
  /** Host peers dial (default: host, or 127.0.0.1 when binding every interface). */
  advertiseHost?: string;
  /** Max gRPC message size both ways (default 64 MiB). */
  maxMessageBytes?: number;
  /** Most items coalesced into one message (default 1024). */
  maxBatchItems?: number;
  logger?: Logger;
}

type Call<Req> = ServerWritableStream<Req, Buffer>;

/** How long before the server's deadline a stream reset still counts as the deadline (transit time under load). */
const DEADLINE_RESET_SLACK_MS = 100;

/** One call in progress: its cancellation state, deadline timer and cancel listener. */
class ActiveCall {
  readonly abort = new CallAbort();
  readonly deadlineMs: number | undefined;
  private timer: NodeJS.Timeout | undefined;
  private done = false;

  constructor(readonly call: Call<unknown>) {
    const deadline = call.getDeadline();
    const ms = deadline instanceof Date ? deadline.getTime() : deadline;
    this.deadlineMs = Number.isFinite(ms) ? ms : undefined;
    if (this.deadlineMs !== undefined) {
      this.timer = setTimeout(() => this.abort.abort(new DeadlineExceededError()), Math.max(0, this.deadlineMs - Date.now()));
    }
    call.once('cancelled', this.onCancelled);
  }

  // grpc-js reports 'cancelled' for every call when its HTTP/2 stream closes, finished or not;
  // only a call still running was cancelled (and building the error is not free). A client
  // whose deadline passes resets the stream, and the server's own deadline (receipt time plus
  // the caller's timeout) is later by the request's transit time: a reset that close to it is
  // the deadline, not a cancel.
  private readonly onCancelled = (): void => {
    if (this.done || this.abort.aborted) return;
    const late = this.deadlineMs !== undefined && Date.now() >= this.deadlineMs - DEADLINE_RESET_SLACK_MS;
    this.abort.abort(late ? new DeadlineExceededError() : new CancelledError('caller cancelled the call'));
  };

  dispose(): void {
    this.done = true;
    if (this.timer) clearTimeout(this.timer);
    this.call.removeListener('cancelled', this.onCancelled);
  }
}

function formatAddress(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

export class GrpcRequestPlaneServer implements RequestPlaneServer {
  readonly topics = new TopicHub();
  private readonly handlers = new Map<string, StreamHandler<unknown, unknown>>();
  private readonly calls = new Set<ActiveCall>();
  private readonly subscriptions = new Set<ActiveCall>();
  private readonly idleWaiters = new Set<() => void>();
  private readonly limits: PumpLimits;
  private draining = false;
  private closed: Promise<void> | undefined;

  private constructor(
    private readonly server: Server,
    readonly address: string,
    options: GrpcServerOptions,
    private readonly logger: Logger | undefined,
  ) {
    const maxMessageBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
    this.limits = {
      ...DEFAULT_PUMP_LIMITS,
      maxMessageBytes,
      maxBatchBytes: Math.min(DEFAULT_PUMP_LIMITS.maxBatchBytes, maxMessageBytes),
      ...(options.maxBatchItems ? { maxBatchItems: options.maxBatchItems } : {}),
    };
  }

  static async start(options: GrpcServerOptions = {}): Promise<GrpcRequestPlaneServer> {
    const host = options.host ?? '0.0.0.0';
    const maxMessageBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
    const server = new Server({
      'grpc.max_receive_message_length': maxMessageBytes,
      'grpc.max_send_message_length': maxMessageBytes,
      'grpc.keepalive_permit_without_calls': 1,
      // Channelz bookkeeping costs a measurable share of a loopback round trip and nothing reads it.
      'grpc.enable_channelz': 0,
    });
    const port = await new Promise<number>((resolve, reject) => {
      server.bindAsync(formatAddress(host, options.port ?? 0), ServerCredentials.createInsecure(), (err, bound) =>
        err ? reject(new UnavailableError(`cannot bind request plane on ${host}:${options.port ?? 0}: ${err.message}`, { cause: err })) : resolve(bound),
      );
    });
    const advertise = options.advertiseHost ?? (host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host);
    const self = new GrpcRequestPlaneServer(server, formatAddress(advertise, port), options, options.logger);
    server.addService(REQUEST_PLANE_SERVICE, {
      Generate: (call: Call<WireRequest>) => self.onGenerate(call),
      Subscribe: (call: Call<string>) => self.onSubscribe(call),
    });
    return self;
  }

  get inflight(): number {
    return this.calls.size;
  }

  register<Req, Resp>(path: string, handler: StreamHandler<Req, Resp>): void {
    if (this.handlers.has(path)) throw new TandemError('invalid_argument', `a handler is already registered for ${path}`);
    this.handlers.set(path, handler as StreamHandler<unknown, unknown>);
  }

  unregister(path: string): void {
    this.handlers.delete(path);
  }

  async drain(timeoutMs: number): Promise<void> {
    this.draining = true;
    if (this.calls.size > 0) await this.waitIdle(timeoutMs);
    if (this.calls.size > 0) {
      this.logger?.warn({ inflight: this.calls.size }, 'drain timeout: cancelling in-flight streams');
      for (const active of this.calls) active.abort.abort(new UnavailableError('server shut down before the stream finished'));
      await this.waitIdle(2_000);
    }
  }

  close(): Promise<void> {
    this.closed ??= this.shutdown();
    return this.closed;
  }

  private async shutdown(): Promise<void> {
    this.draining = true;
    const reason = new UnavailableError('server closed');
    for (const active of [...this.calls, ...this.subscriptions]) active.abort.abort(reason);
    this.topics.closeAll();
    await this.waitIdle(2_000);
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.server.forceShutdown();
        resolve();
      }, 1_000);
      this.server.tryShutdown(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  private waitIdle(timeoutMs: number): Promise<void> {
    if (this.calls.size === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.idleWaiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, timeoutMs);
      this.idleWaiters.add(done);
    });
  }

  private onGenerate(call: Call<WireRequest>): void {
    const { path, requestId, payload } = call.request;
    if (this.draining) return failCall(call, new UnavailableError('server is draining'));
    const handler = this.handlers.get(path);
    if (!handler) return failCall(call, new TandemError('not_found', `no handler for ${path} on ${this.address}`));
    let request: unknown;
    try {
      request = packr.unpack(payload);
    } catch (err) {
      return failCall(call, new TandemError('invalid_argument', `request payload is not msgpack: ${String(err)}`));
    }
    const active = new ActiveCall(call as Call<unknown>);
    this.calls.add(active);
    const abort = active.abort;
    const ctx: RequestContext = {
      get signal() {
        return abort.signal;
      },
      requestId,
      ...(active.deadlineMs !== undefined ? { deadlineMs: active.deadlineMs } : {}),
    };
    void this.run(active, () => handler(request, ctx)[Symbol.asyncIterator]()).finally(() => {
      this.calls.delete(active);
      if (this.calls.size === 0) for (const wake of [...this.idleWaiters]) wake();
    });
  }

  private onSubscribe(call: Call<string>): void {
    if (this.draining) return failCall(call, new UnavailableError('server is draining'));
    const active = new ActiveCall(call as Call<unknown>);
    this.subscriptions.add(active);
    const queue = this.topics.open(call.request);
    // The pump may be parked on queue.next() with nothing to send: closing wakes it on cancel.
    active.abort.onAbort(() => queue.close());
    // An empty batch first, so the subscriber knows the subscription is live before anything is published.
    call.write(frameBatch(packr.pack([])));
    void this.run(active, () => queue).finally(() => {
      queue.close();
      this.subscriptions.delete(active);
      if (queue.dropped > 0) this.logger?.debug({ topic: queue.topic, dropped: queue.dropped }, 'slow subscriber lost events');
    });
  }

  private async run(active: ActiveCall, open: () => AsyncIterator<unknown>): Promise<void> {
    try {
      // A handler that throws before its first yield still counts as a stream that failed.
      const source = (() => {
        try {
          return open();
        } catch (err) {
          return (async function* failed(): AsyncGenerator<unknown> {
            throw err;
          })();
        }
      })();
      await pumpStream(active.call, source, active.abort, this.limits);
    } catch (err) {
      this.logger?.error({ err }, 'request plane stream failed');
    } finally {
      active.dispose();
    }
  }
}
