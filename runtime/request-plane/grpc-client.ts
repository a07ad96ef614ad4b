/**
 * GrpcRequestPlaneClient: dials instances' gRPC servers and streams handler items back.
 * One channel per address, cached and shared by every call to it. Each response message may
 * carry several items (the server coalesces when it is ahead); the iterator yields them one by
 * one. grpc-js stops reading from HTTP/2 while our consumer is behind, so a slow consumer
 * pushes back on the server instead of queueing here.
 */
import { randomBytes } from 'node:crypto';
import { Client, credentials, Metadata } from '@grpc/grpc-js';
import { CallIterator } from './call-iterator.js';
import { packr } from './codec.js';
import { DEFAULT_MAX_MESSAGE_BYTES, GENERATE_METHOD, SUBSCRIBE_METHOD } from './service.js';
import type { CallOptions, CallTarget, RequestPlaneClient } from './types.js';

const NO_CALL_OPTIONS = Object.freeze({});

// Request ids default to a per-process random prefix plus a counter: unique across the fleet
// for tracing, and cheaper than a UUID per call.
const REQUEST_ID_PREFIX = randomBytes(6).toString('hex');
let requestCounter = 0;
function nextRequestId(): string {
  requestCounter += 1;
  return `${REQUEST_ID_PREFIX}-${requestCounter.toString(36)}`;
}

export interface GrpcClientOptions {
  /** Max gRPC message size both ways (default 64 MiB). */
  maxMessageBytes?: number;
  /** HTTP/2 keepalive ping interval, so a dead peer fails streams instead of hanging them (default 10 s; 0 = off). */
  keepaliveMs?: number;
}

export class GrpcRequestPlaneClient implements RequestPlaneClient {
  private readonly channels = new Map<string, Client>();
  private readonly maxMessageBytes: number;
  private readonly keepaliveMs: number;

  constructor(options: GrpcClientOptions = {}) {
    this.maxMessageBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
    this.keepaliveMs = options.keepaliveMs ?? 10_000;
  }

  call<Req, Resp>(target: CallTarget, request: Req, options: CallOptions = {}): AsyncIterable<Resp> {
    return new CallIterator<Resp>(
      () => {
        const wire = { path: target.path, requestId: options.requestId ?? nextRequestId(), payload: packr.pack(request) };
        return this.channel(target.address).makeServerStreamRequest(
          GENERATE_METHOD.path,
          GENERATE_METHOD.requestSerialize,
          GENERATE_METHOD.responseDeserialize,
          wire,
          new Metadata(),
          options.timeoutMs !== undefined ? { deadline: Date.now() + options.timeoutMs } : NO_CALL_OPTIONS,
        );
      },
      { address: target.address, ...(options.signal ? { signal: options.signal } : {}), ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}) },
    );
  }

  /**
   * Open a `Subscribe` stream (direct event plane). Yields raw batches, including the empty
   * batch the server sends once the subscription is live.
   */
  subscribe(address: string, topic: string, signal?: AbortSignal): AsyncIterable<unknown[]> {
    return new CallIterator<unknown[]>(
      () =>
        this.channel(address).makeServerStreamRequest(
          SUBSCRIBE_METHOD.path,
          SUBSCRIBE_METHOD.requestSerialize,
          SUBSCRIBE_METHOD.responseDeserialize,
          topic,
          new Metadata(),
          NO_CALL_OPTIONS,
        ),
      { address, batches: true, ...(signal ? { signal } : {}) },
    );
  }

  /** Number of cached channels (one per address dialled). */
  get channelCount(): number {
    return this.channels.size;
  }

  close(): void {
    for (const client of this.channels.values()) client.close();
    this.channels.clear();
  }

  private channel(address: string): Client {
    let client = this.channels.get(address);
    if (!client) {
      client = new Client(address, credentials.createInsecure(), {
        'grpc.max_receive_message_length': this.maxMessageBytes,
        'grpc.max_send_message_length': this.maxMessageBytes,
        'grpc.enable_channelz': 0,
        ...(this.keepaliveMs > 0
          ? { 'grpc.keepalive_time_ms': this.keepaliveMs, 'grpc.keepalive_timeout_ms': 5_000, 'grpc.keepalive_permit_without_calls': 1 }
          : {}),
      });
      this.channels.set(address, client);
    }
    return client;
  }
}
