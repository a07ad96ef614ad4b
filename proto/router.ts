/**
 * Router messages: the standalone router's request-plane protocol (`{ns}/router/route`) and
 * `router_sync`, the event-plane topic router replicas share their bookings on
 * (docs/design.md "Router").
 *
 * Prompts travel as token ids (msgpack packs them compactly) and block hashes as u64 decimal
 * strings, like every hash on the wire, so payloads survive JSON and msgpack without BigInt.
 */
import type { InstanceId } from './wire.js';

/** Component and endpoint of a standalone `runtime router` replica. */
export const ROUTER_COMPONENT = 'router';
export const ROUTE_ENDPOINT = 'route';
/**
 * No-op endpoint a process with an embedded router registers under the sync component, so
 * direct-plane peers find its `router_sync` stream.
 */
export const SYNC_PRESENCE_ENDPOINT = 'sync_peer';

// ---- `{ns}/router/route`: one call per message, one answer item per call ----

/** Which worker pool a call is about: its component and KV block size (model card). */
export interface RouteTarget {
  component: string;
  blockSize: number;
}

/**
 * A frontend with `--router-endpoint` sends `route` for each request and the lifecycle calls
 * (`book`, `first_token`, `finished`) to the replica that answered it, so that replica's
 * bookings stay exact without waiting for router_sync.
 */
export type RouterCall =
  | (RouteTarget & { type: 'route'; requestId: string; tokens: number[]; candidates?: InstanceId[]; noOverlapCredit?: boolean; loraId?: number; loraResident?: InstanceId[] })
  /** Book a request on a worker the frontend chose itself (pinned header, migration). */
  | (RouteTarget & { type: 'book'; requestId: string; tokens: number[]; instanceId: InstanceId })
  | (RouteTarget & { type: 'first_token'; requestId: string })
  /** `outputTokens` (optional): tokens the stream produced, so the router can measure its ITL. */
  | (RouteTarget & { type: 'finished'; requestId: string; outputTokens?: number });

export type RouterAnswer =
  /** `loraPrefetch` (optional): a worker that should load the request's adapter ahead of need. */
  | { type: 'routed'; instanceId: InstanceId; overlapBlocks: number; requestBlocks: number; loraPrefetch?: InstanceId }
  | { type: 'all_busy'; retryAfterMs: number }
  | { type: 'no_candidates' }
  | { type: 'ok' };

// ---- topic `router_sync` ----

/** One active-sequence change (router/active-sequences.ts) with its hashes as decimal strings. */
export type WireActiveSequenceUpdate =
  | {
      type: 'add';
      requestId: string;
      workerId: InstanceId;
      blockHashes: string[];
      promptTokens: number;
      overlapBlocks: number;
      /** Multi-LoRA: the request's adapter (lora_id); absent = base model. Optional: older replicas omit it. */
      loraId?: number;
    }
  | { type: 'prefill_done'; requestId: string }
  | { type: 'free'; requestId: string };

/** One replica's batch of updates for one worker component. */
export interface RouterSyncMessage {
  /** Publishing replica; a replica ignores its own messages. */
  replicaId: string;
  /** Per-replica counter, for diagnosing loss; updates are idempotent by request id. */
  seq: number;
  updates: WireActiveSequenceUpdate[];
}

/**
 * Payload of `router_sync` on `{ns}/{syncComponent}/router_sync`. The envelope names the
 * worker component (the message does not), so one topic serves every component.
 */
export interface RouterSyncEnvelope {
  component: string;
  blockSize: number;
  message: RouterSyncMessage;
}
