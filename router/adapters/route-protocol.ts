/**
 * The standalone router's request-plane protocol, as the adapters read it: the messages
 * themselves (`RouterCall`, `RouterAnswer`, `ROUTE_ENDPOINT`, ...) live in proto/router.ts;
 * this file is the one place a replica turns an untrusted call into a typed one.
 */
import type { InstanceId, RouterCall } from '../../proto/wire.js';
import { TandemError } from '../../runtime/errors.js';

/** Throws `invalid_argument` unless `v` is a well-formed call; returns a fresh typed copy. */
export function parseRouterCall(v: unknown): RouterCall {
  const bad = (what: string): never => {
    throw new TandemError('invalid_argument', `router call: ${what}`);
  };
  if (typeof v !== 'object' || v === null) return bad('not an object');
  const c = v as Record<string, unknown>;
  const requestId = c.requestId;
  const component = c.component;
  const blockSize = c.blockSize;
  if (typeof requestId !== 'string' || requestId.length === 0) return bad('requestId must be a non-empty string');
  if (typeof component !== 'string' || component.length === 0) return bad('component must be a non-empty string');
  if (typeof blockSize !== 'number' || !Number.isInteger(blockSize) || blockSize < 1) return bad('blockSize must be a positive integer');
  const base = { requestId, component, blockSize };
  switch (c.type) {
    case 'route': {
      const tokens = c.tokens;
      if (!isTokenArray(tokens)) return bad('tokens must be an array of token ids');
      const call: RouterCall = { type: 'route', ...base, tokens };
      if (c.candidates !== undefined) {
        if (!isIdArray(c.candidates)) return bad('candidates must be instance ids');
        call.candidates = c.candidates;
      }
      if (c.noOverlapCredit === true) call.noOverlapCredit = true;
      return call;
    }
    case 'book': {
      const tokens = c.tokens;
      if (!isTokenArray(tokens)) return bad('tokens must be an array of token ids');
      if (typeof c.instanceId !== 'string') return bad('instanceId must be a string');
      return { type: 'book', ...base, tokens, instanceId: c.instanceId };
    }
    case 'first_token':
      return { type: c.type, ...base };
    case 'finished':
      // Output tokens of the stream, when the frontend knows them: the latency cost's ITL sample.
      return Number.isInteger(c.outputTokens) && (c.outputTokens as number) >= 0 ? { type: 'finished', ...base, outputTokens: c.outputTokens as number } : { type: 'finished', ...base };
    default:
      return bad(`unknown type ${String(c.type)}`);
  }
}

function isTokenArray(v: unknown): v is number[] {
  return Array.isArray(v) && v.every((t) => Number.isInteger(t) && t >= 0);
}

function isIdArray(v: unknown): v is InstanceId[] {
  return Array.isArray(v) && v.every((x) => typeof x === 'string');
}
