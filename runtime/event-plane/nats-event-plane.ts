/**
 * NatsEventPlane: core NATS publish/subscribe on `tandem.{ns}.{component}.{topic}`, with
 * JetStream for publishes that ask for durability (one stream per `tandem.{ns}.{component}.>`
 * prefix, created on first use). The connection reconnects forever, so publishers and
 * subscribers resume by themselves after a NATS restart; nats.js re-sends our SUBs.
 *
 * During an outage core publishes queue in nats.js's outbound buffer up to a byte budget and
 * are dropped (debug log) beyond it; durable publishes that cannot be acknowledged are dropped
 * with a debug log. Publishing never throws for an outage: events are fire-and-forget.
 */
import { connect, type NatsConnection, type Subscription as NatsSubscription } from '@nats-io/transport-node';
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import type { InstanceId } from '../../proto/wire.js';
import { UnavailableError } from '../errors.js';
import type { Logger } from '../logging.js';
import { natsSubject, type EventPlane, type EventScope, type PublishOptions, type ReceivedEvent, type Subscription } from './event-plane.js';
import { decodeEnvelope, encodeEnvelope } from './envelope.js';

export interface NatsEventPlaneOptions {
  /** e.g. nats://127.0.0.1:4222; several for a cluster. */
  servers: string | string[];
  instanceId: InstanceId;
  logger?: Logger;
  /** Connection name shown by the server (default tandem-{instanceId}). */
  name?: string;
  /** Core publishes held while disconnected before new ones are dropped (default 8 MiB). */
  outageBufferBytes?: number;
  /** Wait for a server at startup instead of failing (default false: fail fast). */
  waitOnFirstConnect?: boolean;
  /** JetStream stream max age in ms (default 1 h). */
  durableMaxAgeMs?: number;
  /** Timeout for a durable publish acknowledgement (default 2 s). */
  durableAckTimeoutMs?: number;
}

/** JetStream stream names may not contain '.', '*', '>', whitespace or path separators. */
export function streamNameFor(scope: Pick<EventScope, 'namespace' | 'component'>): string {
  return `TANDEM_${scope.namespace}_${scope.component}`.replace(/[^A-Za-z0-9_-]/g, '_');
}

export class NatsEventPlane implements EventPlane {
  readonly kind = 'nats' as const;
  private connected = true;
  private bufferedBytes = 0;
  private droppedWhileDown = 0;
  private readonly streams = new Map<string, Promise<void>>();
  private manager: Promise<JetStreamManager> | undefined;
  private js: JetStreamClient | undefined;
  private readonly subs = new Set<NatsSubscription>();
  private closing: Promise<void> | undefined;

  private constructor(
    private readonly nc: NatsConnection,
    private readonly options: NatsEventPlaneOptions,
  ) {
    void this.watchStatus();
    this.nc.closed().then(
      (err) => err && this.log('warn', { err }, 'nats connection closed with error'),
      () => undefined,
    );
  }

  static async connect(options: NatsEventPlaneOptions): Promise<NatsEventPlane> {
    try {
      const nc = await connect({
        servers: options.servers,
        name: options.name ?? `tandem-${options.instanceId}`,
        maxReconnectAttempts: -1,
        reconnectTimeWait: 250,
        reconnectJitter: 100,
        pingInterval: 5_000,
        maxPingOut: 2,
        waitOnFirstConnect: options.waitOnFirstConnect ?? false,
      });
      return new NatsEventPlane(nc, options);
    } catch (err) {
      throw new UnavailableError(`cannot connect to NATS at ${String(options.servers)}: ${(err as Error).message}`, { cause: err });
    }
  }

  get isConnected(): boolean {
    return this.connected;
  }

  async publish(scope: EventScope, payload: unknown, options?: PublishOptions): Promise<void> {
    if (this.closing) return;
    const subject = natsSubject(scope);
    const data = encodeEnvelope(this.options.instanceId, payload);
    if (options?.durable) return this.publishDurable(scope, subject, data);
    if (!this.connected) {
      if (this.bufferedBytes + data.length > (this.options.outageBufferBytes ?? 8 * 1024 * 1024)) {
        this.droppedWhileDown += 1;
        if (this.droppedWhileDown === 1) this.log('debug', { subject }, 'nats down and outage buffer full: dropping events');
        return;
      }
      this.bufferedBytes += data.length;
    }
    try {
      this.nc.publish(subject, data);
    } catch (err) {
      this.log('debug', { err, subject }, 'nats publish failed: event dropped');
    }
  }

  async subscribe<T = unknown>(scope: EventScope, onEvent: (event: ReceivedEvent<T>) => void): Promise<Subscription> {
    const subject = natsSubject(scope);
    const sub = this.nc.subscribe(subject, {
      callback: (err, msg) => {
        if (err) {
          this.log('debug', { err, subject }, 'nats subscription error');
          return;
        }
        const event = decodeEnvelope<T>(msg.data);
        if (!event) {
          this.log('debug', { subject }, 'ignoring a message that is not a tandem event envelope');
          return;
        }
        try {
          onEvent(event);
        } catch (handlerErr) {
          this.log('warn', { err: handlerErr, subject }, 'event handler threw');
        }
      },
    });
    this.subs.add(sub);
    // Make sure the server has the SUB before we return, so the next publish reaches us.
    await this.flush(2_000);
    return {
      close: async () => {
        if (!this.subs.delete(sub)) return;
        try {
          sub.unsubscribe();
        } catch {
          // Connection already closed: nothing to unsubscribe from.
        }
      },
    };
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      this.subs.clear();
      try {
        if (this.connected) await withTimeout(this.nc.drain(), 2_000);
      } catch (err) {
        this.log('debug', { err }, 'nats drain failed; closing');
      }
      if (!this.nc.isClosed()) await this.nc.close().catch(() => undefined);
    })();
    return this.closing;
  }

  private async publishDurable(scope: EventScope, subject: string, data: Uint8Array): Promise<void> {
    try {
      await this.ensureStream(scope);
      this.js ??= jetstream(this.nc);
      await this.js.publish(subject, data, { timeout: this.options.durableAckTimeoutMs ?? 2_000 });
    } catch (err) {
      this.log('debug', { err, subject }, 'durable publish not acknowledged: event dropped');
    }
  }

  private ensureStream(scope: EventScope): Promise<void> {
    const name = streamNameFor(scope);
    let ready = this.streams.get(name);
    if (!ready) {
      ready = (async () => {
        this.manager ??= jetstreamManager(this.nc, { timeout: 2_000 });
        const jsm = await this.manager;
        const subjects = [`tandem.${scope.namespace}.${scope.component}.>`];
        try {
          await jsm.streams.info(name);
        } catch {
          await jsm.streams.add({ name, subjects, max_age: (this.options.durableMaxAgeMs ?? 3_600_000) * 1_000_000 });
        }
      })();
      this.streams.set(name, ready);
      // A failure (outage, JetStream off) must not stick: the next durable publish retries.
      ready.catch(() => {
        this.streams.delete(name);
        this.manager = undefined;
      });
    }
    return ready;
  }

  private async flush(timeoutMs: number): Promise<void> {
    try {
      await withTimeout(this.nc.flush(), timeoutMs);
    } catch (err) {
      this.log('debug', { err }, 'nats flush did not complete (server down?); continuing');
    }
  }

  private async watchStatus(): Promise<void> {
    try {
      for await (const status of this.nc.status()) {
        if (status.type === 'disconnect') {
          this.connected = false;
          this.log('warn', { server: status.server }, 'nats disconnected; reconnecting');
        } else if (status.type === 'reconnect') {
          this.connected = true;
          if (this.droppedWhileDown > 0) this.log('warn', { dropped: this.droppedWhileDown }, 'events dropped during nats outage');
          this.bufferedBytes = 0;
          this.droppedWhileDown = 0;
          this.log('info', { server: status.server }, 'nats reconnected');
        }
      }
    } catch (err) {
      this.log('debug', { err }, 'nats status stream ended');
    }
  }

  private log(level: 'debug' | 'info' | 'warn', obj: object, msg: string): void {
    this.options.logger?.[level](obj, msg);
  }
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    promise,
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}
