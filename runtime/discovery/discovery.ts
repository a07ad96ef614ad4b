/**
 * Discovery: a key/value registry whose records live as long as the registering process.
 * Three mechanisms implement it (etcd leases, a directory of JSON files with mtime heartbeats,
 * in-process memory); all of them pass one contract suite (test/runtime/discovery.contract.ts).
 */
import type { InstanceId } from '../../proto/wire.js';

export type DiscoveryKind = 'etcd' | 'file' | 'memory';

export interface DiscoveryRecord<T = unknown> {
  key: string;
  value: T;
}

export type DiscoveryEvent<T = unknown> =
  | { type: 'added'; key: string; value: T }
  | { type: 'removed'; key: string };

export interface WatchHandle {
  /** Stop delivering events. Idempotent. */
  close(): void;
}

export interface Discovery {
  readonly kind: DiscoveryKind;
  /** This process's lease id; the instance id of every endpoint it serves. */
  readonly instanceId: InstanceId;
  /** Create or replace `key` under this process's lease. */
  put(key: string, value: unknown): Promise<void>;
  /** Remove a key this process registered. Missing keys are not an error. */
  delete(key: string): Promise<void>;
  /** Current records under a prefix, sorted by key. */
  list<T = unknown>(prefix: string): Promise<Array<DiscoveryRecord<T>>>;
  /**
   * Watch a prefix. The callback first receives an `added` for every record that exists now,
   * then live changes. A value that changes is reported as `added` again with the new value.
   */
  watch<T = unknown>(prefix: string, onEvent: (event: DiscoveryEvent<T>) => void): Promise<WatchHandle>;
  /**
   * Called once when the lease is lost for longer than the TTL (etcd) or cannot be refreshed
   * (file). The process must stop taking work, drain, and exit non-zero.
   */
  onLeaseLost(callback: (cause: Error) => void): void;
  /** Delete this process's records and release the lease. */
  close(): Promise<void>;
}

export interface DiscoveryOptions {
  /** Lease TTL in seconds (default 10). */
  ttlSeconds?: number;
  /** etcd: endpoints such as http://127.0.0.1:2379. */
  etcdEndpoints?: string[];
  /** file: directory of records. */
  directory?: string;
}
