/**
 * In-process discovery. Several `MemoryDiscovery` handles may share one `MemoryDiscoveryStore`,
 * each acting as a separate "process" with its own lease, so a single test can run a frontend,
 * a router and workers that see one another. `store.revokeLease(id)` simulates a lost lease.
 *
 * Events are delivered on a microtask, in order, never inside the `put`/`delete` call: callers
 * behave the same as with the networked backends, where delivery is always asynchronous.
 */
import type { InstanceId } from '../../proto/wire.js';
import type { Discovery, DiscoveryEvent, DiscoveryKind, DiscoveryRecord, WatchHandle } from './discovery.js';
import { LeaseLostError } from './errors.js';
import { DiscoveryHandleState } from './handle-state.js';
import { randomInstanceId } from './instance-id.js';
import { PrefixWatchers, cloneJson, compareKeys, deliver } from './prefix-watchers.js';

interface StoredRecord {
  value: unknown;
  owner: InstanceId;
}

interface LeaseHolder {
  revoke(cause: Error): void;
}

/** The shared "cluster" that memory discovery handles register in. */
export class MemoryDiscoveryStore {
  private readonly records = new Map<string, StoredRecord>();
  private readonly watchers = new PrefixWatchers();
  private readonly leases = new Map<InstanceId, LeaseHolder>();

  /** @internal */
  attach(id: InstanceId, holder: LeaseHolder): void {
    this.leases.set(id, holder);
  }

  /** @internal */
  detach(id: InstanceId): void {
    this.leases.delete(id);
    this.deleteOwnedBy(id);
  }

  /** @internal */
  put(owner: InstanceId, key: string, value: unknown): void {
    const stored = cloneJson(value);
    this.records.set(key, { value: stored, owner });
    this.emit({ type: 'added', key, value: stored });
  }

  /** @internal */
  delete(key: string): void {
    if (this.records.delete(key)) this.emit({ type: 'removed', key });
  }

  list<T>(prefix: string): Array<DiscoveryRecord<T>> {
    const out: Array<DiscoveryRecord<T>> = [];
    for (const [key, rec] of this.records) {
      if (key.startsWith(prefix)) out.push({ key, value: cloneJson<T>(rec.value) });
    }
    return out.sort(compareKeys);
  }

  /** @internal: snapshot then subscribe in one synchronous step, so nothing is missed. */
  watch<T>(prefix: string, onEvent: (event: DiscoveryEvent<T>) => void): WatchHandle {
    const initial = this.list<T>(prefix);
    let ready = false;
    let open = true;
    const pending: Array<DiscoveryEvent<T>> = [];
    const send = (event: DiscoveryEvent<T>): void => {
      if (open) deliver(onEvent, event);
    };
    const inner = this.watchers.add(prefix, (event) => {
      const copy = cloneEvent<T>(event);
      if (ready) queueMicrotask(() => send(copy));
      else pending.push(copy);
    });
    queueMicrotask(() => {
      ready = true;
      for (const rec of initial) send({ type: 'added', key: rec.key, value: rec.value });
      for (const event of pending.splice(0)) send(event);
    });
    return {
      close: () => {
        open = false;
        inner.close();
      },
    };
  }

  /**
   * Simulate lease loss: the instance's records vanish and its `onLeaseLost` callbacks fire,
   * as when an etcd lease expires. Returns false for an unknown id.
   */
  revokeLease(id: InstanceId, cause: Error = new LeaseLostError(`lease ${id} revoked`)): boolean {
    const holder = this.leases.get(id);
    if (holder === undefined) return false;
    this.leases.delete(id);
    this.deleteOwnedBy(id);
    holder.revoke(cause);
    return true;
  }

  /** Instance ids that currently hold a lease in this store. */
  instanceIds(): InstanceId[] {
    return [...this.leases.keys()];
  }

  private deleteOwnedBy(id: InstanceId): void {
    for (const [key, rec] of [...this.records]) {
      if (rec.owner === id) this.delete(key);
    }
  }

  // Synchronous fan-out; each subscription defers its own delivery (see watch()).
  private emit(event: DiscoveryEvent): void {
    this.watchers.emit(event);
  }
}

function cloneEvent<T>(event: DiscoveryEvent): DiscoveryEvent<T> {
  return event.type === 'added' ? { type: 'added', key: event.key, value: cloneJson<T>(event.value) } : event;
}

export interface MemoryDiscoveryOptions {
  /** Share one store between handles to simulate several processes (default: a private store). */
  store?: MemoryDiscoveryStore;
}

export class MemoryDiscovery implements Discovery {
  readonly kind: DiscoveryKind = 'memory';
  readonly instanceId: InstanceId = randomInstanceId();
  readonly store: MemoryDiscoveryStore;
  private readonly owned = new Set<string>();
  private readonly watches = new Set<WatchHandle>();
  private readonly state = new DiscoveryHandleState(
    this.kind,
    (cause) => new LeaseLostError('memory lease was revoked', { cause }),
  );

  constructor(options: MemoryDiscoveryOptions = {}) {
    this.store = options.store ?? new MemoryDiscoveryStore();
    this.store.attach(this.instanceId, { revoke: (cause) => this.leaseLost(cause) });
  }

  async put(key: string, value: unknown): Promise<void> {
    this.state.assertUsable();
    this.store.put(this.instanceId, key, value);
    this.owned.add(key);
  }

  async delete(key: string): Promise<void> {
    this.state.assertOpen();
    if (!this.owned.delete(key)) return;
    this.store.delete(key);
  }

  async list<T = unknown>(prefix: string): Promise<Array<DiscoveryRecord<T>>> {
    this.state.assertOpen();
    return this.store.list<T>(prefix);
  }

  async watch<T = unknown>(prefix: string, onEvent: (event: DiscoveryEvent<T>) => void): Promise<WatchHandle> {
    this.state.assertOpen();
    const inner = this.store.watch<T>(prefix, onEvent);
    const handle: WatchHandle = {
      close: () => {
        inner.close();
        this.watches.delete(handle);
      },
    };
    this.watches.add(handle);
    return handle;
  }

  onLeaseLost(callback: (cause: Error) => void): void {
    this.state.onLeaseLost(callback);
  }

  async close(): Promise<void> {
    if (!this.state.close()) return;
    for (const handle of [...this.watches]) handle.close();
    this.store.detach(this.instanceId);
    this.owned.clear();
  }

  private leaseLost(cause: Error): void {
    if (this.state.markLost(cause)) this.owned.clear();
  }
}
