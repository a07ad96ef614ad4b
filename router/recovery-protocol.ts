/**
 * Messages between a router and a worker for KV-event recovery (DESIGN.md "KV events"):
 * the router asks for a replay of a missing event range, or for a full dump of the worker's
 * blocks. The router core emits these requests as data (`RecoveryAction`); an adapter sends
 * them over the request plane and feeds the answers back. The worker keeps its last 1024
 * events; older ranges are answered `too_old` and the router falls back to a dump.
 */
import type { InstanceId, KvEvent, KvEventData } from '../proto/wire.js';

/** Router → worker: resend events with ids in [fromEventId, toEventId] (inclusive). */
export interface KvReplayRequest {
  workerId: InstanceId;
  fromEventId: number;
  toEventId: number;
}

/** Worker → router. */
export type KvReplayResponse =
  | { type: 'events'; workerId: InstanceId; events: KvEvent[] }
  | { type: 'too_old'; workerId: InstanceId; oldestEventId: number };

/** Router → worker: send every block you hold. */
export interface KvDumpRequest {
  workerId: InstanceId;
}

/**
 * Worker → router: the worker's whole block set as Stored events (parents first), taken when
 * its next event id was `nextEventId`: the dump reflects exactly events [0, nextEventId).
 */
export interface KvDumpResponse {
  workerId: InstanceId;
  nextEventId: number;
  events: KvEventData[];
}

/** What the router core asks its adapter to do next. */
export type RecoveryAction =
  | { type: 'request_replay'; workerId: InstanceId; fromEventId: number; toEventId: number }
  | { type: 'request_dump'; workerId: InstanceId };
