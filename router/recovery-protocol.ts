/**
 * What the router core asks its adapter to do when its view of a worker's blocks has a hole
 * (docs/design.md "KV events and block hashing"): replay a missing event range, or dump the
 * worker's whole block set. The core emits these as data; the adapter
 * (adapters/kv-router-service.ts) sends them to the worker's `kv_events` endpoint and feeds
 * the answers back. The messages on that endpoint (`KvRecoveryRequest`, `KvReplayResponse`,
 * `KvDumpResponse`) are wire types and live in proto/kv-recovery.ts.
 */
import type { InstanceId } from '../proto/wire.js';

/** What the router core asks its adapter to do next. */
export type RecoveryAction =
  | { type: 'request_replay'; workerId: InstanceId; fromEventId: number; toEventId: number }
  | { type: 'request_dump'; workerId: InstanceId };
