/**
 * ChannelPool: the grpc-js channels (each its own HTTP/2 connection) that carry calls to one
 * address.
 *
 * Why more than one: everything an HTTP/2 server guards is per connection (the rapid-reset
 * bucket, flow-control windows, one socket's ordering), and a connection that dies takes all
 * its streams with it. One connection per worker made every stream a frontend had on that
 * worker share one fate (issue 12, fault 4).
 *
 *   open(make) ──▶ least-active serving channel (a new one while all carry ≥ streamsPerChannel
 *                  and fewer than maxChannels exist) ──▶ stream; 'status' gives the slot back
 *   cancel(call) ─▶ spend a token of that connection's ResetBudget, then RST_STREAM
 *                  · bucket below half: the channel retires (no new calls; closed when idle)
 *                    and a fresh connection, with a full bucket, takes new calls
 *                  · bucket at its reserve: no RST; the caller keeps reading and retries later
 *
 * Channels are opened lazily: light traffic uses one connection, as before. Each channel sets
 * `grpc.use_local_subchannel_pool`, otherwise grpc-js would hand every channel with equal
 * options the same subchannel, hence the same connection.
 */
import { Client, credentials, Metadata, status as GrpcStatus, type ChannelOptions, type ClientReadableStream, type StatusObject } from '@grpc/grpc-js';
import { NGHTTP2_RESET_LIMITS, ResetBudget, type ResetBudgetLimits } from './reset-budget.js';
import { ERROR_CODE_METADATA_KEY } from './wire-errors.js';

export interface ChannelPoolOptions {
  /** Most serving connections to the address (default 4). */
  maxChannels?: number;
  /** Open another connection once every one carries this many streams (default 64). */
  streamsPerChannel?: number;
  /** grpc-js options of every channel (message sizes, keepalive). */
  channelOptions?: ChannelOptions;
  /** The peer's rapid-reset limits (default nghttp2's). */
  resetLimits?: ResetBudgetLimits;
  /** Clock in ms, for tests. */
  now?: () => number;
}

export const DEFAULT_CHANNELS_PER_ADDRESS = 4;
export const DEFAULT_STREAMS_PER_CHANNEL = 64;

/** What a pooled channel's state is, for tests and logs. */
export interface ChannelStats {
  active: number;
  resetsLeft: number;
  retiring: boolean;
}

class PooledChannel {
  active = 0;
  retiring = false;
  readonly resets: ResetBudget;

  constructor(
    readonly client: Client,
    limits: ResetBudgetLimits,
    nowMs: number,
  ) {
    this.resets = new ResetBudget(limits, nowMs);
  }
}

type AnyCall = ClientReadableStream<unknown>;

export class ChannelPool {
  private serving: PooledChannel[] = [];
  private readonly retired = new Set<PooledChannel>();
  private readonly channelOf = new WeakMap<AnyCall, PooledChannel>();
  /** Calls we cancelled ourselves: their CANCELLED status is already paid for. */
  private readonly cancelled = new WeakSet<AnyCall>();
  private readonly maxChannels: number;
  private readonly streamsPerChannel: number;
  private readonly resetLimits: ResetBudgetLimits;
  private readonly now: () => number;
  private closed = false;

  constructor(
    readonly address: string,
    private readonly options: ChannelPoolOptions = {},
  ) {
    this.maxChannels = Math.max(1, options.maxChannels ?? DEFAULT_CHANNELS_PER_ADDRESS);
    this.streamsPerChannel = Math.max(1, options.streamsPerChannel ?? DEFAULT_STREAMS_PER_CHANNEL);
    this.resetLimits = options.resetLimits ?? NGHTTP2_RESET_LIMITS;
    this.now = options.now ?? Date.now;
  }

  /** Start a call on the least-loaded channel; the pool tracks it until its status arrives. */
  open<T>(make: (client: Client) => ClientReadableStream<T>): ClientReadableStream<T> {
    const channel = this.pick();
    const call = make(channel.client);
    channel.active += 1;
    this.channelOf.set(call as AnyCall, channel);
    call.once('status', (status: StatusObject) => this.onStatus(channel, call as AnyCall, status));
    return call;
  }

  /** `cancel`, bound: what a CallIterator is given. */
  readonly cancelCall = (call: AnyCall): boolean => this.cancel(call);

  /**
   * Cancel `call` (RST_STREAM) if its connection can afford it. False: it cannot, nothing was
   * sent; the caller keeps reading the call (so the server is not stalled) and tries again later.
   */
  cancel(call: AnyCall): boolean {
    const channel = this.channelOf.get(call);
    if (!channel) {
      call.cancel();
      return true;
    }
    if (!channel.resets.take(this.now())) return false;
    this.cancelled.add(call);
    call.cancel();
    this.checkBudget(channel);
    return true;
  }

  /** Open connections: serving plus retiring ones not yet idle. */
  get channelCount(): number {
    return this.serving.length + this.retired.size;
  }

  stats(): ChannelStats[] {
    const now = this.now();
    return [...this.serving, ...this.retired].map((c) => ({ active: c.active, resetsLeft: c.resets.available(now), retiring: c.retiring }));
  }

  close(): void {
    this.closed = true;
    for (const channel of [...this.serving, ...this.retired]) channel.client.close();
    this.serving = [];
    this.retired.clear();
  }

  private pick(): PooledChannel {
    let best: PooledChannel | undefined;
    for (const channel of this.serving) if (best === undefined || channel.active < best.active) best = channel;
    if (best === undefined || (best.active >= this.streamsPerChannel && this.serving.length < this.maxChannels)) {
      best = new PooledChannel(
        new Client(this.address, credentials.createInsecure(), { ...this.options.channelOptions, 'grpc.use_local_subchannel_pool': 1 }),
        this.resetLimits,
        this.now(),
      );
      this.serving.push(best);
    }
    return best;
  }

  private onStatus(channel: PooledChannel, call: AnyCall, status: StatusObject): void {
    channel.active -= 1;
    // grpc-js resets a stream itself when a call fails on the client side (its deadline, a
    // message over the size limit): the peer counts those frames too. Our server tags every
    // status it sends, so an untagged failure we did not cancel was (conservatively) a reset.
    if (status.code !== GrpcStatus.OK && !this.cancelled.has(call) && !isTagged(status.metadata)) {
      channel.resets.take(this.now());
      this.checkBudget(channel);
    }
    if (channel.retiring && channel.active === 0) this.dispose(channel);
  }

  /** Below half its bucket, a connection takes no new calls: a fresh one starts full. */
  private checkBudget(channel: PooledChannel): void {
    if (channel.retiring || channel.resets.available(this.now()) >= this.resetLimits.burst / 2) return;
    channel.retiring = true;
    this.serving = this.serving.filter((c) => c !== channel);
    this.retired.add(channel);
    if (channel.active === 0) this.dispose(channel);
  }

  private dispose(channel: PooledChannel): void {
    this.retired.delete(channel);
    if (!this.closed) channel.client.close();
  }
}

function isTagged(metadata: Metadata | undefined): boolean {
  return metadata !== undefined && metadata.get(ERROR_CODE_METADATA_KEY).length > 0;
}
