/**
 * etcd discovery (the cluster default). Every record is put under this process's one lease,
 * so when the process dies etcd deletes its records after the TTL. The instance id is the
 * lease id. If keep-alive fails for longer than the TTL, `onLeaseLost` callbacks run once and
 * the handle refuses further puts; if etcd returns sooner, the lease is kept (or re-granted
 * with the same id and the records put back), and the process never notices.
 */
import { EtcdLeaseInvalidError, Range, type Etcd3 } from 'etcd3';
import type { InstanceId } from '../../proto/wire.js';
import { TandemError, UnavailableError } from '../errors.js';
import type { Discovery, DiscoveryEvent, DiscoveryKind, DiscoveryRecord, WatchHandle } from './discovery.js';
import { createEtcdClient } from './etcd-client.js';
import { EtcdLease } from './etcd-lease.js';
import { EtcdPrefixWatch } from './etcd-watch.js';
import { DiscoveryClosedError, LeaseLostError } from './errors.js';
import { DiscoveryHandleState } from './handle-state.js';
import { formatInstanceId } from './keys.js';
import { cloneJson, compareKeys } from './prefix-watchers.js';
import { SerialQueue } from './serial-queue.js';

export interface EtcdDiscoveryOptions {
  /** Client URLs (default `$ETCD_ENDPOINTS`, comma-separated, else http://127.0.0.1:2379). */
  endpoints?: string[];
  /** Lease TTL in whole seconds (default 10). Keep-alive runs every TTL/3. */
  ttlSeconds?: number;
  /** Deadline of each unary etcd call (default 5000 ms). */
  callTimeoutMs?: number;
  /** How long `connect()` keeps trying to reach etcd (default 5000 ms). */
  connectTimeoutMs?: number;
}

export const DEFAULT_ETCD_ENDPOINT = 'http://127.0.0.1:2379';

/** After loss, keep trying to revoke so no record outlives the process's decision to leave. */
const REVOKE_RETRY_MS = 1000;

export class EtcdDiscovery implements Discovery {
  readonly kind: DiscoveryKind = 'etcd';
  readonly instanceId: InstanceId;
  /** Records this process put: key → JSON text, re-put after a same-id re-grant. */
  private readonly owned = new Map<string, string>();
  private readonly watches = new Set<EtcdPrefixWatch>();
  // The loss cause is always a LeaseLostError here, so put() rethrows it as is.
  private readonly state = new DiscoveryHandleState(this.kind, (cause) => cause);
  private readonly queue = new SerialQueue();
  private revokeTimer: NodeJS.Timeout | undefined;
  private lease!: EtcdLease;

  private constructor(
    private readonly client: Etcd3,
    leaseId: string,
    readonly endpoints: string[],
  ) {
    this.instanceId = formatInstanceId(BigInt(leaseId));
  }

  /** Connect, grant the lease and start keep-alive. Rejects with UnavailableError if etcd is unreachable. */
  static async connect(options: EtcdDiscoveryOptions = {}): Promise<EtcdDiscovery> {
    const endpoints = options.endpoints ?? endpointsFromEnv();
    const ttlSeconds = options.ttlSeconds ?? 10;
    const client = createEtcdClient({ endpoints, callTimeoutMs: options.callTimeoutMs ?? 5000 });
    let self: EtcdDiscovery | undefined;
    let lease: EtcdLease;
    try {
      lease = await EtcdLease.grant(
        client,
        ttlSeconds,
        {
          restore: () => self!.restore(),
          onLost: (cause) => self!.leaseLost(cause),
        },
        options.connectTimeoutMs ?? 5000,
      );
    } catch (err) {
      client.close();
      if (err instanceof RangeError) throw err;
      throw new UnavailableError(`cannot reach etcd at ${endpoints.join(',')}: ${(err as Error).message}`, { cause: err });
    }
    self = new EtcdDiscovery(client, lease.id, endpoints);
    self.lease = lease;
    return self;
  }

  /** The lease id in etcd's decimal form (for etcdctl). */
  get leaseId(): string {
    return this.lease.id;
  }

  async put(key: string, value: unknown): Promise<void> {
    this.state.assertUsable();
    const text = JSON.stringify(cloneJson(value));
    await this.queue.run(async () => {
      this.state.assertUsable();
      await this.call('put', () => this.client.kv.put({ key: Buffer.from(key), value: Buffer.from(text), lease: this.lease.id }));
      this.owned.set(key, text);
    });
  }

  async delete(key: string): Promise<void> {
    this.state.assertOpen();
    await this.queue.run(async () => {
      if (!this.owned.has(key)) return;
      await this.call('delete', () => this.client.kv.deleteRange({ key: Buffer.from(key) }));
      this.owned.delete(key);
    });
  }

  async list<T = unknown>(prefix: string): Promise<Array<DiscoveryRecord<T>>> {
    this.state.assertOpen();
    const range = Range.prefix(prefix);
    const res = await this.call('list', () => this.client.kv.range({ key: range.start, range_end: range.end }));
    const out: Array<DiscoveryRecord<T>> = [];
    for (const kv of res.kvs) {
      try {
        out.push({ key: kv.key.toString('utf8'), value: JSON.parse(kv.value.toString('utf8')) as T });
      } catch {
        // Not ours (not JSON): invisible, as in watch().
      }
    }
    return out.sort(compareKeys);
  }

  async watch<T = unknown>(prefix: string, onEvent: (event: DiscoveryEvent<T>) => void): Promise<WatchHandle> {
    this.state.assertOpen();
    const watch = await this.call('watch', () =>
      EtcdPrefixWatch.start(this.client, prefix, onEvent as (event: DiscoveryEvent) => void, (w) => this.watches.delete(w)),
    );
    if (this.state.closed) {
      watch.close();
      throw new DiscoveryClosedError(this.kind);
    }
    this.watches.add(watch);
    return watch;
  }

  onLeaseLost(callback: (cause: Error) => void): void {
    this.state.onLeaseLost(callback);
  }

  /** Revoke the lease (etcd deletes every record at once), stop watches, close the client. */
  async close(): Promise<void> {
    if (!this.state.close()) return;
    clearTimeout(this.revokeTimer);
    this.lease.stop();
    for (const watch of [...this.watches]) watch.close();
    await this.queue.idle();
    this.owned.clear();
    // Best effort: if etcd is down the records expire with the TTL instead.
    await this.lease.revoke(2000).catch(() => undefined);
    this.client.close();
  }

  /** Same-id re-grant succeeded: put every record back under it. */
  private restore(): Promise<void> {
    return this.queue.run(async () => {
      for (const [key, text] of this.owned) {
        await this.client.kv.put({ key: Buffer.from(key), value: Buffer.from(text), lease: this.lease.id });
      }
    });
  }

  private leaseLost(cause: LeaseLostError): void {
    if (this.state.closed || !this.state.markLost(cause)) return;
    this.owned.clear();
    this.revokeUntilDone();
  }

  private revokeUntilDone(): void {
    if (this.state.closed) return;
    this.lease.revoke(REVOKE_RETRY_MS).then(
      () => undefined,
      () => {
        if (this.state.closed) return;
        this.revokeTimer = setTimeout(() => this.revokeUntilDone(), REVOKE_RETRY_MS);
        this.revokeTimer.unref();
      },
    );
  }

  /** Run an etcd call, turning library errors into typed runtime errors. */
  private async call<R>(op: string, fn: () => Promise<R>): Promise<R> {
    try {
      return await fn();
    } catch (err) {
      if (err instanceof TandemError) throw err;
      if (err instanceof EtcdLeaseInvalidError) throw new LeaseLostError(`etcd ${op}: lease ${this.lease.id} is gone`, { cause: err });
      throw new UnavailableError(`etcd ${op} failed: ${(err as Error).message}`, { cause: err });
    }
  }
}

export function endpointsFromEnv(): string[] {
  const raw = process.env.ETCD_ENDPOINTS;
  if (raw === undefined || raw.trim() === '') return [DEFAULT_ETCD_ENDPOINT];
  return raw
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0)
    .map((s) => (/^https?:\/\//.test(s) ? s : `http://${s}`));
}
