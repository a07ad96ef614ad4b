/** Pick a discovery backend by kind; the one place that knows all three. */
import type { Discovery, DiscoveryKind, DiscoveryOptions } from './discovery.js';
import { EtcdDiscovery, endpointsFromEnv } from './etcd-discovery.js';
import { FileDiscovery } from './file-discovery.js';
import { MemoryDiscovery, type MemoryDiscoveryStore } from './memory-discovery.js';
import { ConfigError } from '../errors.js';

export interface CreateDiscoveryOptions extends DiscoveryOptions {
  /** memory: share a store between handles (default: a private store). */
  memoryStore?: MemoryDiscoveryStore;
  /** file: poll period of watchers (default 300 ms). */
  pollIntervalMs?: number;
  /** etcd: deadline of each unary call (default 5000 ms). */
  callTimeoutMs?: number;
  /** etcd: how long to keep trying to reach etcd at start (default 5000 ms). */
  connectTimeoutMs?: number;
}

export async function createDiscovery(kind: DiscoveryKind, options: CreateDiscoveryOptions = {}): Promise<Discovery> {
  const ttlSeconds = options.ttlSeconds ?? 10;
  if (!(ttlSeconds > 0) || (kind === 'etcd' && !Number.isInteger(ttlSeconds))) {
    throw new ConfigError(`discovery TTL must be a positive ${kind === 'etcd' ? 'whole ' : ''}number of seconds, got ${ttlSeconds}`);
  }
  switch (kind) {
    case 'memory':
      return new MemoryDiscovery(options.memoryStore === undefined ? {} : { store: options.memoryStore });
    case 'file':
      return FileDiscovery.open({
        ttlSeconds,
        ...(options.directory !== undefined && { directory: options.directory }),
        ...(options.pollIntervalMs !== undefined && { pollIntervalMs: options.pollIntervalMs }),
      });
    case 'etcd':
      return EtcdDiscovery.connect({
        ttlSeconds,
        endpoints: options.etcdEndpoints ?? endpointsFromEnv(),
        ...(options.callTimeoutMs !== undefined && { callTimeoutMs: options.callTimeoutMs }),
        ...(options.connectTimeoutMs !== undefined && { connectTimeoutMs: options.connectTimeoutMs }),
      });
    default: {
      const never: never = kind;
      throw new ConfigError(`unknown discovery kind: ${String(never)}`);
    }
  }
}
