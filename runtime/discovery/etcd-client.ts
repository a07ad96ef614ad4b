/**
 * The etcd3 client as discovery needs it. The library's defaults are tuned for long-lived
 * batch clients and fight a short lease:
 *  - its per-host circuit breaker refuses every call for 5 s after 3 failures, longer than a
 *    3 s TTL, so a process could not renew even after etcd came back. We pass calls through;
 *  - its global policy retries deadline errors 3 times, turning a hung etcd into a 3x hang.
 *    We retry only "unavailable" (a dead channel is replaced by a fresh one, which then
 *    connects at once), twice, with a short pause;
 *  - unary calls get a deadline so a SIGSTOPped etcd cannot hang a caller.
 * Streams (watch, keep-alive) set their own deadlines or none.
 */
import { Etcd3, GRPCUnavailableError, type IOptions } from 'etcd3';

type Policy = ReturnType<NonNullable<NonNullable<IOptions['faultHandling']>['host']>>;
type PolicyFn = (context: { signal: AbortSignal; attempt: number }) => unknown;

export interface EtcdClientOptions {
  endpoints: string[];
  /** Deadline for unary calls (default 5000 ms). */
  callTimeoutMs?: number;
}

const neverAborted = new AbortController().signal;

const passThrough = {
  execute: (fn: PolicyFn) => Promise.resolve().then(() => fn({ signal: neverAborted, attempt: 0 })),
} as unknown as Policy;

const UNAVAILABLE_RETRIES = 2;

const retryUnavailable = {
  async execute(fn: PolicyFn): Promise<unknown> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await fn({ signal: neverAborted, attempt });
      } catch (err) {
        if (!(err instanceof GRPCUnavailableError) || attempt >= UNAVAILABLE_RETRIES) throw err;
        await new Promise((resolve) => setTimeout(resolve, 50 * (attempt + 1)));
      }
    }
  },
} as unknown as Policy;

export function createEtcdClient(options: EtcdClientOptions): Etcd3 {
  const callTimeoutMs = options.callTimeoutMs ?? 5000;
  return new Etcd3({
    hosts: options.endpoints,
    dialTimeout: callTimeoutMs,
    faultHandling: { host: () => passThrough, global: retryUnavailable },
    defaultCallOptions: (context) => (context.isStream ? {} : { deadline: Date.now() + callTimeoutMs }),
    grpcOptions: {
      // Reconnect quickly after an etcd restart; grpc-js would otherwise back off up to 120 s.
      'grpc.initial_reconnect_backoff_ms': 100,
      'grpc.max_reconnect_backoff_ms': 1000,
      // Detect a silently dead peer under a long-lived watch. etcd allows pings every 5 s+.
      'grpc.keepalive_time_ms': 10_000,
      'grpc.keepalive_timeout_ms': 5_000,
    },
  });
}

/** Milliseconds until `deadline`, as a grpc call option. */
export function deadlineIn(ms: number): { deadline: number } {
  return { deadline: Date.now() + ms };
}

/**
 * End, then cancel, a stream we are done with. Ending first clears `writable`, which keeps
 * etcd3 from treating our own cancel as a host failure and resetting every channel.
 */
export function closeStream(stream: { end(): void; cancel(): void }): void {
  try {
    stream.end();
  } catch {
    // already ended
  }
  try {
    stream.cancel();
  } catch {
    // already closed
  }
}
