/**
 * `{ns}/{component}/kv_events`: the request-plane endpoint every worker serves for KV-event
 * recovery (docs/design.md "KV events and block hashing"). A router that sees a gap asks for
 * a replay of the missing range; on discovering a worker it asks for a dump. One call, one
 * answer item. The worker keeps its last 1024 events; an older range is answered `too_old` and
 * the router falls back to a dump.
 */
import type { InstanceId, KvEvent, KvEventData } from './wire.js';

/** Endpoint name, under the worker's component (`backend`, `prefill`, `decode`). */
export const KV_EVENTS_ENDPOINT = 'kv_events';

/** Router → worker: resend events [fromEventId, toEventId] (inclusive), or send every block. */
export type KvRecoveryRequest = { type: 'replay'; fromEventId: number; toEventId: number } | { type: 'dump' };

/** Worker → router, the answer to `replay`. */
export type KvReplayResponse =
  | { type: 'events'; workerId: InstanceId; events: KvEvent[] }
  | { type: 'too_old'; workerId: InstanceId; oldestEventId: number };

/**
 * Worker → router, the answer to `dump`: the worker's whole block set as Stored events
 * (parents first), taken when its next event id was `nextEventId`: the dump reflects exactly
 * events [0, nextEventId).
 */
export interface KvDumpResponse {
  workerId: InstanceId;
  nextEventId: number;
  events: KvEventData[];
}
