/**
 * A client of one endpoint: it follows the endpoint's instances in discovery and sends each
 * call to one of them by round-robin, random choice, or an explicit instance id.
 */
import type { InstanceId, InstanceRecord } from '../proto/wire.js';
import type { Discovery, WatchHandle } from './discovery/discovery.js';
import { instancePrefix } from './discovery/keys.js';
import { NoInstancesError, TandemError } from './errors.js';
import type { CallOptions, RequestPlaneClient, RoutingChoice } from './request-plane/types.js';

export interface EndpointAddress {
  namespace: string;
  component: string;
  endpoint: string;
}

export type GenerateOptions = CallOptions & { routing?: RoutingChoice };

export class EndpointClient {
  private readonly byId = new Map<InstanceId, InstanceRecord>();
  private ordered: InstanceRecord[] = [];
  private cursor = 0;
  private readonly listeners = new Set<(ids: InstanceId[]) => void>();
  private watch: WatchHandle | undefined;
  private readonly waiters = new Set<() => void>();

  private constructor(
    readonly address: EndpointAddress,
    private readonly requests: RequestPlaneClient,
  ) {}

  static async open(address: EndpointAddress, discovery: Discovery, requests: RequestPlaneClient): Promise<EndpointClient> {
    const client = new EndpointClient(address, requests);
    client.watch = await discovery.watch<InstanceRecord>(
      instancePrefix(address.namespace, address.component, address.endpoint),
      (event) => client.onDiscovery(event.type, event.key, event.type === 'added' ? event.value : undefined),
    );
    return client;
  }

  get path(): string {
    return `${this.address.namespace}/${this.address.component}/${this.address.endpoint}`;
  }

  instances(): InstanceRecord[] {
    return this.ordered;
  }

  instanceIds(): InstanceId[] {
    return this.ordered.map((r) => r.instanceId);
  }

  instance(id: InstanceId): InstanceRecord | undefined {
    return this.byId.get(id);
  }

  /** Subscribe to instance-set changes; returns an unsubscribe function. */
  onChange(listener: (ids: InstanceId[]) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Resolve once at least `count` instances are known. */
  async waitForInstances(count = 1, timeoutMs = 30_000): Promise<void> {
    if (this.ordered.length >= count) return;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters.delete(check);
        reject(new NoInstancesError(`timed out after ${timeoutMs} ms waiting for ${count} instance(s) of ${this.path}`));
      }, timeoutMs);
      const check = () => {
        if (this.ordered.length >= count) {
          clearTimeout(timer);
          this.waiters.delete(check);
          resolve();
        }
      };
      this.waiters.add(check);
    });
  }

  /** Pick the instance a call goes to, without side effects beyond the round-robin cursor. */
  pick(routing: RoutingChoice = { mode: 'round-robin' }): InstanceRecord {
    if (routing.mode === 'direct') {
      const record = this.byId.get(routing.instanceId);
      if (!record) throw new TandemError('instance_not_found', `instance ${routing.instanceId} does not serve ${this.path}`);
      return record;
    }
    const n = this.ordered.length;
    if (n === 0) throw new NoInstancesError(`no instances serve ${this.path}`);
    if (routing.mode === 'random') return this.ordered[Math.floor(Math.random() * n)]!;
    const record = this.ordered[this.cursor % n]!;
    this.cursor = (this.cursor + 1) % n;
    return record;
  }

  generate<Req, Resp>(request: Req, options: GenerateOptions = {}): AsyncIterable<Resp> {
    const record = this.pick(options.routing);
    return this.requests.call<Req, Resp>({ address: record.address, path: this.path }, request, options);
  }

  close(): void {
    this.watch?.close();
    this.watch = undefined;
    this.listeners.clear();
  }

  private onDiscovery(type: 'added' | 'removed', key: string, value: InstanceRecord | undefined): void {
    const id = key.slice(key.lastIndexOf('/') + 1);
    if (type === 'added' && value) this.byId.set(id, value);
    else this.byId.delete(id);
    this.ordered = [...this.byId.values()].sort((a, b) => (a.instanceId < b.instanceId ? -1 : 1));
    const ids = this.instanceIds();
    for (const listener of this.listeners) listener(ids);
    for (const waiter of [...this.waiters]) waiter();
  }
}
