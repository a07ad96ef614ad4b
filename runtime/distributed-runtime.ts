/**
 * DistributedRuntime → Namespace → Component → Endpoint. One runtime per process: it owns the
 * discovery lease, the process's gRPC server (request plane + direct event streams), the event
 * plane, the metrics registry and the status server, and it runs graceful shutdown.
 */
import { Registry, collectDefaultMetrics } from 'prom-client';
import type { InstanceId, InstanceRecord } from '../proto/wire.js';
import { createDiscovery, type MemoryDiscoveryStore } from './discovery/index.js';
import type { Discovery, DiscoveryKind } from './discovery/discovery.js';
import { DEFAULT_NAMESPACE, instanceKey } from './discovery/keys.js';
import { EndpointClient } from './endpoint-client.js';
import { EXIT_CODES } from './exit-codes.js';
import { createEventPlane } from './event-plane/index.js';
import type { EventPlane, EventPlaneKind, ReceivedEvent, Subscription } from './event-plane/event-plane.js';
import { createLogger, type Logger } from './logging.js';
import { GrpcRequestPlaneClient, GrpcRequestPlaneServer } from './request-plane/index.js';
import type { RequestPlaneClient, RequestPlaneServer, StreamHandler } from './request-plane/types.js';
import { StatusServer } from './status-server.js';
import { onParentGone } from './supervisor/parent-link.js';
import { StopSignals } from './supervisor/stop-signals.js';

export interface RuntimeConfig {
  /** Process role for logs, e.g. 'worker' or 'frontend'. */
  name?: string;
  discovery: DiscoveryKind;
  discoveryDir?: string;
  etcdEndpoints?: string[];
  leaseTtlSeconds?: number;
  eventPlane: EventPlaneKind;
  natsServer?: string;
  /** Interface the gRPC server binds (default 0.0.0.0). */
  host?: string;
  /** Host peers should dial (default 127.0.0.1). */
  advertiseHost?: string;
  grpcPort?: number;
  /** Status server port; undefined = no status server, 0 = any free port. */
  statusPort?: number;
  /** How long in-flight streams may run after SIGTERM before they are cancelled. */
  drainTimeoutMs?: number;
  logger?: Logger;
  logLevel?: string;
  /** Install SIGTERM/SIGINT handlers and exit the process on shutdown or lease loss. */
  manageProcess?: boolean;
  /** Shared store so several runtimes in one process see each other (memory discovery). */
  memoryStore?: MemoryDiscoveryStore;
}

export class DistributedRuntime {
  readonly metrics = new Registry();
  readonly status: StatusServer;
  private server: RequestPlaneServer | undefined;
  private serverStarting: Promise<RequestPlaneServer> | undefined;
  private readonly clients: RequestPlaneClient;
  private readonly served = new Set<string>();
  private readonly shutdownHooks: Array<() => Promise<void> | void> = [];
  private readonly drainHooks: Array<(timeoutMs: number) => Promise<void> | void> = [];
  private shuttingDown: Promise<void> | undefined;
  statusUrl: string | undefined;

  private constructor(
    readonly config: RuntimeConfig,
    readonly discovery: Discovery,
    readonly events: EventPlane,
    readonly logger: Logger,
    private readonly serverFactory: () => Promise<RequestPlaneServer>,
    clients: GrpcRequestPlaneClient,
  ) {
    this.clients = clients;
    this.status = new StatusServer(this.metrics);
  }

  static async create(config: RuntimeConfig): Promise<DistributedRuntime> {
    const logger = config.logger ?? createLogger({ name: config.name ?? 'tandem', ...(config.logLevel ? { level: config.logLevel } : {}) });
    const discovery = await createDiscovery(config.discovery, {
      ttlSeconds: config.leaseTtlSeconds ?? 10,
      ...(config.etcdEndpoints ? { etcdEndpoints: config.etcdEndpoints } : {}),
      ...(config.discoveryDir ? { directory: config.discoveryDir } : {}),
      ...(config.memoryStore ? { memoryStore: config.memoryStore } : {}),
    });
    let serverPromise: Promise<RequestPlaneServer> | undefined;
    const serverFactory = () =>
      (serverPromise ??= GrpcRequestPlaneServer.start({
        host: config.host ?? '0.0.0.0',
        port: config.grpcPort ?? 0,
        advertiseHost: config.advertiseHost ?? '127.0.0.1',
        logger,
      }));
    const clients = new GrpcRequestPlaneClient();
    const events = await createEventPlane(config.eventPlane, {
      discovery,
      server: serverFactory,
      client: clients,
      instanceId: discovery.instanceId,
      ...(config.natsServer ? { natsServer: config.natsServer } : {}),
      logger,
    });
    const runtime = new DistributedRuntime(config, discovery, events, logger, serverFactory, clients);
    collectDefaultMetrics({ register: runtime.metrics, prefix: 'tandem_process_' });
    if (config.statusPort !== undefined) {
      runtime.statusUrl = await runtime.status.listen(config.statusPort, config.host ?? '0.0.0.0');
      logger.info({ url: runtime.statusUrl }, 'status server listening');
    }
    discovery.onLeaseLost((cause) => {
      logger.error({ err: cause }, 'discovery lease lost: draining and exiting');
      void runtime.shutdown('lease lost').then(() => {
        if (config.manageProcess) process.exit(EXIT_CODES.leaseLost);
      });
    });
    if (config.manageProcess) runtime.installSignalHandlers();
    return runtime;
  }

  get instanceId(): InstanceId {
    return this.discovery.instanceId;
  }

  namespace(name: string = DEFAULT_NAMESPACE): Namespace {
    return new Namespace(this, name);
  }

  /** The process's gRPC server, started on first use. */
  async requestServer(): Promise<RequestPlaneServer> {
    if (this.server) return this.server;
    this.serverStarting ??= this.serverFactory();
    this.server = await this.serverStarting;
    return this.server;
  }

  get requestClient(): RequestPlaneClient {
    return this.clients;
  }

  /** Mark the process ready on /health (called once its endpoints are registered). */
  markReady(): void {
    this.status.setState('ready');
  }

  /**
   * Work that drains with the request plane: called as shutdown starts (the same moment /health
   * turns 503) with the drain timeout, and awaited before anything closes. The frontend's HTTP
   * drain plugs in here.
   */
  onDrain(hook: (timeoutMs: number) => Promise<void> | void): void {
    this.drainHooks.push(hook);
  }

  /** Work to run during shutdown, after deregistration and draining, before connections close. */
  onShutdown(hook: () => Promise<void> | void): void {
    this.shutdownHooks.push(hook);
  }

  get isShuttingDown(): boolean {
    return this.shuttingDown !== undefined;
  }

  /** Deregister first, then drain in-flight streams within the timeout, then close. */
  shutdown(reason = 'shutdown'): Promise<void> {
    this.shuttingDown ??= this.runShutdown(reason);
    return this.shuttingDown;
  }

  private async runShutdown(reason: string): Promise<void> {
    this.logger.info({ reason }, 'shutting down: deregistering');
    this.status.setState('draining');
    const timeout = this.config.drainTimeoutMs ?? 30_000;
    // Drain hooks start now, so they stop taking work while deregistration is still under way.
    const drained = Promise.all(
      this.drainHooks.map(async (hook) => {
        try {
          await hook(timeout);
        } catch (err) {
          this.logger.warn({ err }, 'drain hook failed');
        }
      }),
    );
    await Promise.all([...this.served].map((key) => this.discovery.delete(key).catch(() => undefined)));
    if (this.server) {
      this.logger.info({ inflight: this.server.inflight, timeoutMs: timeout }, 'draining in-flight streams');
      await this.server.drain(timeout);
    }
    await drained;
    await this.server?.close();
    for (const hook of this.shutdownHooks) {
      try {
        await hook();
      } catch (err) {
        this.logger.warn({ err }, 'shutdown hook failed');
      }
    }
    this.clients.close();
    await this.events.close().catch((err: unknown) => this.logger.warn({ err }, 'event plane close failed'));
    await this.discovery.close().catch((err: unknown) => this.logger.warn({ err }, 'discovery close failed'));
    await this.status.close();
    this.logger.info('shutdown complete');
  }

  private installSignalHandlers(): void {
    // One Ctrl-C forwarded by a wrapper (npx) arrives twice: that is still the first (supervisor/stop-signals.ts).
    const signals = new StopSignals();
    const onSignal = (signal: NodeJS.Signals) => {
      const action = signals.receive(signal, Date.now());
      if (action === 'duplicate') return;
      if (action === 'now') {
        this.logger.warn({ signal }, 'second signal: exiting now');
        process.exit(EXIT_CODES.interrupted);
      }
      this.drainAndExit(signal);
    };
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
    // The supervisor died (supervisor/parent-link.ts): the same drain, but not a second signal.
    onParentGone(() => this.drainAndExit('parent gone'));
  }

  private drainAndExit(reason: string): void {
    void this.shutdown(reason).then(
      () => process.exit(EXIT_CODES.ok),
      (err: unknown) => {
        this.logger.error({ err }, 'shutdown failed');
        process.exit(EXIT_CODES.internal);
      },
    );
  }

  /** @internal bookkeeping for deregistration. */
  trackRegistration(key: string, present: boolean): void {
    if (present) this.served.add(key);
    else this.served.delete(key);
  }
}

export class Namespace {
  constructor(
    readonly runtime: DistributedRuntime,
    readonly name: string,
  ) {}

  component(name: string): Component {
    return new Component(this.runtime, this.name, name);
  }
}

export class Component {
  constructor(
    readonly runtime: DistributedRuntime,
    readonly namespace: string,
    readonly name: string,
  ) {}

  endpoint(name: string): Endpoint {
    return new Endpoint(this.runtime, this.namespace, this.name, name);
  }

  publish(topic: string, payload: unknown, options?: { durable?: boolean }): Promise<void> {
    return this.runtime.events.publish({ namespace: this.namespace, component: this.name, topic }, payload, options);
  }

  subscribe<T>(topic: string, onEvent: (event: ReceivedEvent<T>) => void): Promise<Subscription> {
    return this.runtime.events.subscribe<T>({ namespace: this.namespace, component: this.name, topic }, onEvent);
  }
}

export interface ServeOptions {
  metadata?: Record<string, unknown>;
}

export interface ServedEndpoint {
  readonly record: InstanceRecord;
  /** Deregister and stop routing new calls to this handler. */
  stop(): Promise<void>;
}

export class Endpoint {
  constructor(
    readonly runtime: DistributedRuntime,
    readonly namespace: string,
    readonly component: string,
    readonly name: string,
  ) {}

  get path(): string {
    return `${this.namespace}/${this.component}/${this.name}`;
  }

  /** Serve `handler` on this process's gRPC server and register the instance in discovery. */
  async serve<Req, Resp>(handler: StreamHandler<Req, Resp>, options: ServeOptions = {}): Promise<ServedEndpoint> {
    const server = await this.runtime.requestServer();
    server.register(this.path, handler);
    const record: InstanceRecord = {
      namespace: this.namespace,
      component: this.component,
      endpoint: this.name,
      instanceId: this.runtime.instanceId,
      address: server.address,
      metadata: { ...(options.metadata ?? {}), ...(this.runtime.statusUrl ? { statusUrl: this.runtime.statusUrl } : {}) },
    };
    const key = instanceKey(this.namespace, this.component, this.name, this.runtime.instanceId);
    await this.runtime.discovery.put(key, record);
    this.runtime.trackRegistration(key, true);
    this.runtime.logger.info({ endpoint: this.path, address: server.address, instanceId: record.instanceId }, 'endpoint registered');
    return {
      record,
      stop: async () => {
        this.runtime.trackRegistration(key, false);
        await this.runtime.discovery.delete(key);
        server.unregister(this.path);
      },
    };
  }

  client(): Promise<EndpointClient> {
    return EndpointClient.open(
      { namespace: this.namespace, component: this.component, endpoint: this.name },
      this.runtime.discovery,
      this.runtime.requestClient,
    );
  }
}
