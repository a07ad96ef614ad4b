/**
 * The event envelope both planes carry: msgpack `{source, payload}` (proto/events.md). NATS
 * sends it as the message body; the direct plane sends it as a msgpack `bin` inside a batch.
 */
import type { InstanceId } from '../../proto/wire.js';
import { packr } from '../request-plane/codec.js';
import type { ReceivedEvent } from './event-plane.js';

export function encodeEnvelope(source: InstanceId, payload: unknown): Uint8Array {
  return packr.pack({ source, payload });
}

/** Undefined for bytes that are not an envelope (a foreign publisher on our subject). */
export function decodeEnvelope<T>(bytes: Uint8Array): ReceivedEvent<T> | undefined {
  let value: unknown;
  try {
    value = packr.unpack(bytes);
  } catch {
    return undefined;
  }
  if (typeof value !== 'object' || value === null || typeof (value as { source?: unknown }).source !== 'string') return undefined;
  const { source, payload } = value as { source: InstanceId; payload: T };
  return { source, payload };
}
