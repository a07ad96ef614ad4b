/**
 * The event plane: fire-and-forget publish/subscribe of msgpack payloads by subject.
 * `nats` uses subjects `tandem.{ns}.{component}.{topic}`; `direct` serves each instance's
 * topics as a stream on its own gRPC server and subscribers dial the instances discovery lists.
 */
import type { InstanceId } from '../../proto/wire.js';

export type EventPlaneKind = 'nats' | 'direct';

export interface EventScope {
  namespace: string;
  component: string;
  topic: string;
}

export interface ReceivedEvent<T = unknown> {
  /** Instance that published the event. */
  source: InstanceId;
  payload: T;
}

export interface Subscription {
  close(): Promise<void>;
}

export interface PublishOptions {
  /** Ask for durable delivery (JetStream on nats; ignored by direct). */
  durable?: boolean;
}

export interface EventPlane {
  readonly kind: EventPlaneKind;
  publish(scope: EventScope, payload: unknown, options?: PublishOptions): Promise<void>;
  subscribe<T = unknown>(scope: EventScope, onEvent: (event: ReceivedEvent<T>) => void): Promise<Subscription>;
  close(): Promise<void>;
}

export function natsSubject(scope: EventScope): string {
  return `tandem.${scope.namespace}.${scope.component}.${scope.topic}`;
}
