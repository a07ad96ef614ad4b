/**
 * GrpcRequestPlaneClient: dials instances' gRPC servers and streams handler items back.
 * A small pool of channels (HTTP/2 connections) per address, opened as concurrency needs them
 * and spending cancels within what the peer's rapid-reset guard allows (channel-pool.ts). Each response message may
 * carry several items (the server coalesces when it is ahead); the iterator yields them one by
 * one. grpc-js stops reading from HTTP/2 while our consumer is behind, so a slow consumer
 * pushes back on the server instead of queueing here.
 */
import { randomBytes } from 'node:crypto';
import { Metadata, type ChannelOptions, type ClientReadableStream } from '@grpc/grpc-js';
import { CallIterator } from './call-iterator.js';
import { ChannelPool, DEFAULT_CHANNELS_PER_ADDRESS, DEFAULT_STREAMS_PER_CHANNEL, type ChannelStats } from './channel-pool.js';
import type { ResetBudgetLimits } from './reset-budget.js';
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
  /** Most connections per address (default 4). */
  channelsPerAddress?: number;
  /** Open another connection to an address once each carries this many streams (default 64). */
  streamsPerChannel?: number;
  /**
   * The servers' rapid-reset limits (default nghttp2's: 1000, then 33/s). Raise them only for
   * servers configured with larger ones; tests lower or lift them to provoke the guard.
   */
  resetLimits?: ResetBudgetLimits;
  /** How long a call whose consumer stopped may stay silent before it is cancelled (default 1 s). */
  returnLingerMs?: number;
}

export class GrpcRequestPlaneClient implements RequestPlaneClient {
  private readonly pools = new Map<string, ChannelPool>();
  private readonly channelOptions: ChannelOptions;
  private readonly channelsPerAddress: number;
  private readonly streamsPerChannel: number;
  private readonly resetLimits: ResetBudgetLimits | undefined;
  private readonly lingerMs: number | undefined;

  constructor(options: GrpcClientOptions = {}) {
    const maxMessageBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
    const keepaliveMs = options.keepaliveMs ?? 10_000;
    this.channelsPerAddress = options.channelsPerAddress ?? DEFAULT_CHANNELS_PER_ADDRESS;
    this.streamsPerChannel = options.streamsPerChannel ?? DEFAULT_STREAMS_PER_CHANNEL;
    this.resetLimits = options.resetLimits;
    this.lingerMs = options.returnLingerMs;
    this.channelOptions = {
      'grpc.max_receive_message_length': maxMessageBytes,
      'grpc.max_send_message_length': maxMessageBytes,
      'grpc.enable_channelz': 0,
      ...(keepaliveMs > 0 ? { 'grpc.keepalive_time_ms': keepaliveMs, 'grpc.keepalive_timeout_ms': 5_000, 'grpc.keepalive_permit_without_calls': 1 } : {}),
    };
  }

  call<Req, Resp>(target: CallTarget, request: Req, options: CallOptions = {}): AsyncIterable<Resp> {
    const pool = this.pool(target.address);
    return new CallIterator<Resp>(
      () => {
        const wire = { path: target.path, requestId: options.requestId ?? nextRequestId(), payload: packr.pack(request) };
        return pool.open((client) =>
          client.makeServerStreamRequest(
            GENERATE_METHOD.path,
            GENERATE_METHOD.requestSerialize,
            GENERATE_METHOD.responseDeserialize,
            wire,
            new Metadata(),
            options.timeoutMs !== undefined ? { deadline: Date.now() + options.timeoutMs } : NO_CALL_OPTIONS,
          ),
        );
      },
      {
        address: target.address,
        cancel: pool.cancelCall,
        ...(this.lingerMs !== undefined ? { lingerMs: this.lingerMs } : {}),
        ...(options.signal ? { signal: options.signal } : {}),
        ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
      },
    );
  }

  /**
   * Open a `Subscribe` stream (direct event plane). Yields raw batches, including the empty
   * batch the server sends once the subscription is live.
   */
  subscribe(address: string, topic: string, signal?: AbortSignal): AsyncIterable<unknown[]> {
    const pool = this.pool(address);
    return new CallIterator<unknown[]>(
      () =>
        pool.open(
          (client) =>
            client.makeServerStreamRequest(
              SUBSCRIBE_METHOD.path,
              SUBSCRIBE_METHOD.requestSerialize,
              SUBSCRIBE_METHOD.responseDeserialize,
              topic,
              new Metadata(),
              NO_CALL_OPTIONS,
            ) as ClientReadableStream<unknown[]>,
        ),
      { address, batches: true, cancel: pool.cancelCall, ...(signal ? { signal } : {}) },
    );
  }

  /** Open channels (connections) over every address dialled. */
  get channelCount(): number {
    let count = 0;
    for (const pool of this.pools.values()) count += pool.channelCount;
    return count;
  }

  /** Per-connection load and reset budget for one address (empty when never dialled). */
  channelStats(address: string): ChannelStats[] {
    return this.pools.get(address)?.stats() ?? [];
  }

  close(): void {
    for (const pool of this.pools.values()) pool.close();
    this.pools.clear();
  }

  private pool(address: string): ChannelPool {
    let pool = this.pools.get(address);
    if (!pool) {
      pool = new ChannelPool(address, {
        maxChannels: this.channelsPerAddress,
        streamsPerChannel: this.streamsPerChannel,
        channelOptions: this.channelOptions,
        ...(this.resetLimits ? { resetLimits: this.resetLimits } : {}),
      });
      this.pools.set(address, pool);
    }
    return pool;
  }
}
