/**
 * The request plane: server-streaming calls between processes. A handler is an async generator
 * over one request; a client picks an instance and streams the handler's items back.
 * Payloads are msgpack-encoded; errors cross the wire with a stable code and message.
 */
import type { InstanceId } from '../../proto/wire.js';

export interface RequestContext {
  /** Aborts when the caller cancels, disconnects, or its deadline passes. */
  readonly signal: AbortSignal;
  readonly requestId: string;
  /** Absolute deadline in ms since epoch, when the caller set one. */
  readonly deadlineMs?: number;
}

export type StreamHandler<Req = unknown, Resp = unknown> = (
  request: Req,
  ctx: RequestContext,
) => AsyncIterable<Resp>;

export type RoutingChoice =
  | { mode: 'round-robin' }
  | { mode: 'random' }
  | { mode: 'direct'; instanceId: InstanceId };

export interface CallOptions {
  signal?: AbortSignal;
  /** Relative deadline in ms. */
  timeoutMs?: number;
  requestId?: string;
}

/** Where a call goes: the address of the instance's gRPC server and the endpoint path. */
export interface CallTarget {
  address: string;
  /** `namespace/component/endpoint` */
  path: string;
}

export interface RequestPlaneClient {
  call<Req, Resp>(target: CallTarget, request: Req, options?: CallOptions): AsyncIterable<Resp>;
  close(): void;
}

export interface RequestPlaneServer {
  /** host:port that peers dial. */
  readonly address: string;
  register<Req, Resp>(path: string, handler: StreamHandler<Req, Resp>): void;
  unregister(path: string): void;
  /** Number of calls in progress, for draining. */
  readonly inflight: number;
  /** Stop accepting, wait for in-flight calls up to timeoutMs, then cancel the rest. */
  drain(timeoutMs: number): Promise<void>;
  close(): Promise<void>;
}
