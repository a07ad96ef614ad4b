/** Public surface of the event plane. */
export * from './event-plane.js';
export { createEventPlane, DEFAULT_NATS_SERVER, type EventPlaneDeps } from './create-event-plane.js';
export { NatsEventPlane, streamNameFor, type NatsEventPlaneOptions } from './nats-event-plane.js';
export { DirectEventPlane, type DirectEventPlaneOptions } from './direct-event-plane.js';
export { decodeEnvelope, encodeEnvelope } from './envelope.js';
