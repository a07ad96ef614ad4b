/**
 * The standalone router's request-plane protocol: endpoint `{ns}/router/route`, one call per
 * message, one answer item per call. A frontend with `--router-endpoint` sends `route` for
 * each request and the lifecycle calls (`book`, `first_token`, `finished`) to the replica that
 * answered it, so that replica's bookings stay exact without waiting for router_sync.
 *
 * Prompts travel as token ids (msgpack packs them compactly); the replica hashes them, so the
 * frontend needs no hashing and replicas stay the only owners of block-size details.
 */
import type { InstanceId } from '../../proto/wire.js';
import { TandemError } from '../../runtime/errors.js';

export const ROUTER_COMPONENT = 'router';
export const ROUTE_ENDPOINT = 'route';

/** Which worker pool a call is about: its component and KV block size (model card). */
export interface RouteTarget {
  component: string;
  blockSize: number;
}

export type RouterCall =
  | (RouteTarget & { type: 'route'; requestId: string; tokens: number[]; candidates?: InstanceId[]; noOverlapCredit?: boolean })
  /** Book a request on a worker the frontend chose itself (pinned header, migration). */
  | (RouteTarget & { type: 'book'; requestId: string; tokens: number[]; instanceId: InstanceId })
  | (RouteTarget & { type: 'first_token'; requestId: string })
  | (RouteTarget & { type: 'finished'; requestId: string });

export type RouterAnswer =
  | { type: 'routed'; instanceId: InstanceId; overlapBlocks: number; requestBlocks: number }
  | { type: 'all_busy'; retryAfterMs: number }
  | { type: 'no_candidates' }
  | { type: 'ok' };

/** Throws `invalid_argument` unless `v` is a well-formed call. */
export function parseRouterCall(v: unknown): RouterCall {
  const c = v as Partial<Record<string, unknown>> | null;
  const bad = (what: string): never => {
    throw new TandemError('invalid_argument', `router call: ${what}`);
  };
  if (typeof c !== 'object' || c === null) return bad('not an object');
  if (typeof c.requestId !== 'string' || c.requestId.length === 0) bad('requestId must be a non-empty string');
  if (typeof c.component !== 'string' || c.component.length === 0) bad('component must be a non-empty string');
  if (!Number.isInteger(c.blockSize) || (c.blockSize as number) < 1) bad('blockSize must be a positive integer');
  switch (c.type) {
    case 'route':
      if (!isTokenArray(c.tokens)) bad('tokens must be an array of token ids');
      if (c.candidates !== undefined && !(Array.isArray(c.candidates) && c.candidates.every((x) => typeof x === 'string'))) bad('candidates must be instance ids');
      break;
    case 'book':
      if (!isTokenArray(c.tokens)) bad('tokens must be an array of token ids');
      if (typeof c.instanceId !== 'string') bad('instanceId must be a string');
      break;
    case 'first_token':
    case 'finished':
      break;
    default:
      bad(`unknown type ${String(c.type)}`);
  }
  return c as unknown as RouterCall;
}

function isTokenArray(v: unknown): v is number[] {
  return Array.isArray(v) && v.every((t) => Number.isInteger(t) && t >= 0);
}
