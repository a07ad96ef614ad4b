/**
 * DirectEventPlane: events without a broker. publish() hands the envelope to this process's
 * gRPC server, which fans it out to the `Subscribe` streams open on it (TopicHub). subscribe()
 * watches discovery for the scope's component and keeps one `Subscribe` stream per instance
 * address (a process serving several endpoints is one server, so one stream), reopening it
 * with backoff while the instance stays listed and closing it when the instance goes away.
 *
 * Only processes registered under the scope's component are heard: a publisher must serve at
 * least one endpoint of that component.
 */
import type { InstanceId, InstanceRecord } from '../../proto/wire.js';
import type { Discovery, WatchHandle } from '../discovery/discovery.js';
import { instancePrefix } from '../discovery/keys.js';
import { TandemError } from '../errors.js';
import type { Logger } from '../logging.js';
import { GrpcRequestPlaneClient } from '../request-plane/grpc-client.js';
import { TopicHub } from '../request-plane/topic-hub.js';
import type { RequestPlaneServer } from '../request-plane/types.js';
import { natsSubject, type EventPlane, type EventScope, type PublishOptions, type ReceivedEvent, type Subscription } from './event-plane.js';
import { decodeEnvelope, encodeEnvelope } from './envelope.js';

export interface DirectEventPlaneOptions {
  instanceId: InstanceId;
  discovery: Discovery;
  /** The process's gRPC server (started on first publish). */
  server: () => Promise<RequestPlaneServer>;
  /** Shared client; by default the plane makes and owns one. */
  client?: GrpcRequestPlaneClient;
  logger?: Logger;
  /** How long subscribe() waits for the streams to instances listed at that moment (default 3 s). */
  readyTimeoutMs?: number;
}

/** A server that can fan events out, i.e. a GrpcRequestPlaneServer. */
interface TopicServer {
  readonly topics: TopicHub;
}

function hasTopics(server: RequestPlaneServer): server is RequestPlaneServer & TopicServer {
  return (server as Partial<TopicServer>).topics instanceof TopicHub;
}

export class DirectEventPlane implements EventPlane {
  readonly kind = 'direct' as const;
  private hub: TopicHub | undefined;
  private hubStarting: Promise<TopicHub> | undefined;
  private readonly client: GrpcRequestPlaneClient;
  private readonly ownsClient: boolean;
  private readonly subscriptions = new Set<DirectSubscription>();
  private closed = false;

  constructor(private readonly options: DirectEventPlaneOptions) {
    this.client = options.client ?? new GrpcRequestPlaneClient();
    this.ownsClient = options.client === undefined;
  }

  async publish(scope: EventScope, payload: unknown, _options?: PublishOptions): Promise<void> {
    if (this.closed) return;
    let hub = this.hub;
    if (!hub) {
      try {
        hub = await this.startHub();
      } catch (err) {
        // Events are fire-and-forget: report the fault, drop the event, retry on the next publish.
        this.hubStarting = undefined;
        this.options.logger?.warn({ err }, 'direct event plane has no server to publish from; event dropped');
        return;
      }
    }
    const topic = natsSubject(scope);
    if (hub.subscriberCount(topic) === 0) return;
    hub.publish(topic, encodeEnvelope(this.options.instanceId, payload));
  }

  async subscribe<T = unknown>(scope: EventScope, onEvent: (event: ReceivedEvent<T>) => void): Promise<Subscription> {
    if (this.closed) throw new TandemError('unavailable', 'event plane is closed');
    const sub = new DirectSubscription(scope, onEvent as (event: ReceivedEvent) => void, this.options, this.client, () => this.subscriptions.delete(sub));
    this.subscriptions.add(sub);
    await sub.start(this.options.readyTimeoutMs ?? 3_000);
    return sub;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.all([...this.subscriptions].map((sub) => sub.close()));
    if (this.ownsClient) this.client.close();
  }

  private startHub(): Promise<TopicHub> {
    this.hubStarting ??= this.options.server().then((server) => {
      if (!hasTopics(server)) throw new TandemError('internal', 'the direct event plane needs a GrpcRequestPlaneServer');
      this.hub = server.topics;
      return server.topics;
    });
    return this.hubStarting;
  }
}

/** One open `Subscribe` stream to one instance's server, reopened until closed. */
class Peer {
  readonly keys = new Set<string>();
  private readonly controller = new AbortController();
  private readonly loop: Promise<void>;
  private markReady!: () => void;
  readonly ready = new Promise<void>((resolve) => (this.markReady = resolve));

  constructor(
    readonly address: string,
    topic: string,
    client: GrpcRequestPlaneClient,
    onEvent: (event: ReceivedEvent) => void,
    logger: Logger | undefined,
  ) {
    this.loop = this.run(topic, client, onEvent, logger);
  }

  private async run(topic: string, client: GrpcRequestPlaneClient, onEvent: (event: ReceivedEvent) => void, logger: Logger | undefined): Promise<void> {
    const signal = this.controller.signal;
    let backoffMs = 100;
    while (!signal.aborted) {
      try {
        for await (const batch of client.subscribe(this.address, topic, signal)) {
          this.markReady();
          backoffMs = 100;
          for (const item of batch) {
            const event = item instanceof Uint8Array ? decodeEnvelope(item) : undefined;
            if (!event) continue;
            try {
              onEvent(event);
            } catch (err) {
              logger?.warn({ err, topic }, 'event handler threw');
            }
          }
        }
      } catch (err) {
        if (signal.aborted) break;
        logger?.debug({ err, address: this.address, topic }, 'direct event stream failed; retrying');
      }
      if (signal.aborted) break;
      await new Promise<void>((resolve) => {
        const wake = () => {
          clearTimeout(timer);
          signal.removeEventListener('abort', wake);
          resolve();
        };
        const timer = setTimeout(wake, backoffMs);
        signal.addEventListener('abort', wake, { once: true });
      });
      backoffMs = Math.min(backoffMs * 2, 2_000);
    }
  }

  async close(): Promise<void> {
    this.controller.abort();
    this.markReady();
    await this.loop;
  }
}

class DirectSubscription implements Subscription {
  private readonly peers = new Map<string, Peer>();
  private readonly keyAddress = new Map<string, string>();
  private readonly topic: string;
  private readonly prefix: string;
  private watch: WatchHandle | undefined;
  private closed = false;

  constructor(
    scope: EventScope,
    private readonly onEvent: (event: ReceivedEvent) => void,
    private readonly options: DirectEventPlaneOptions,
    private readonly client: GrpcRequestPlaneClient,
    private readonly onClosed: () => void,
  ) {
    this.topic = natsSubject(scope);
    this.prefix = instancePrefix(scope.namespace, scope.component);
  }

  async start(readyTimeoutMs: number): Promise<void> {
    this.watch = await this.options.discovery.watch<InstanceRecord>(this.prefix, (event) => {
      if (event.type === 'added') this.add(event.key, event.value);
      else this.remove(event.key);
    });
    // Wait until the instances listed now have live streams, so that a publish made after
    // subscribe() resolves reaches us (the same guarantee the NATS plane gives).
    const listed = await this.options.discovery.list<InstanceRecord>(this.prefix);
    const addresses = new Set(listed.map((record) => record.value?.address).filter((a): a is string => typeof a === 'string'));
    const deadline = Date.now() + readyTimeoutMs;
    for (const address of addresses) {
      // The watch delivers the records it found asynchronously; give it until the deadline.
      while (!this.peers.has(address) && !this.closed && Date.now() < deadline) await delay(10);
      const peer = this.peers.get(address);
      if (peer && !(await settlesWithin(peer.ready, deadline - Date.now()))) {
        this.options.logger?.debug({ address, topic: this.topic }, 'instance stream not live yet; subscribing anyway');
      }
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.watch?.close();
    const peers = [...this.peers.values()];
    this.peers.clear();
    this.keyAddress.clear();
    await Promise.all(peers.map((peer) => peer.close()));
    this.onClosed();
  }

  private add(key: string, record: InstanceRecord | undefined): void {
    if (this.closed || typeof record?.address !== 'string') return;
    const previous = this.keyAddress.get(key);
    if (previous === record.address) return;
    if (previous !== undefined) this.remove(key);
    this.keyAddress.set(key, record.address);
    let peer = this.peers.get(record.address);
    if (!peer) {
      peer = new Peer(record.address, this.topic, this.client, this.onEvent, this.options.logger);
      this.peers.set(record.address, peer);
    }
    peer.keys.add(key);
  }

  private remove(key: string): void {
    const address = this.keyAddress.get(key);
    if (address === undefined) return;
    this.keyAddress.delete(key);
    const peer = this.peers.get(address);
    if (!peer) return;
    peer.keys.delete(key);
    if (peer.keys.size === 0) {
      this.peers.delete(address);
      void peer.close();
    }
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** True if `promise` settles within `ms`; never leaves a timer behind. */
async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), Math.max(0, ms));
  });
  try {
    return await Promise.race([promise.then(() => true), timeout]);
  } finally {
    clearTimeout(timer);
  }
}
