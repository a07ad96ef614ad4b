/**
 * `GET /v1/responses/{id}`, `DELETE /v1/responses/{id}`, `POST /v1/responses/{id}/cancel`: the
 * stored responses (response-store.ts). A response still generating is returned as it stands
 * (`in_progress`) and can be cancelled; a finished one cannot (400), an unknown one is a 404,
 * and so is one another API key made.
 */
import type { ServerResponse } from 'node:http';
import { ApiError, quoteInput } from '../../errors.js';
import type { ResponseStore } from './response-store.js';

export const RESPONSES_PREFIX = '/v1/responses/';

export type ResponsesRouteResult = { status: number; body: unknown } | { error: ApiError; allow?: string };

/** `rest`: the path after RESPONSES_PREFIX; `owner`: the caller (http/auth.ts callerScope), who sees only their own responses. */
export function responsesRoute(store: ResponseStore, method: string, rest: string, owner: string): ResponsesRouteResult {
  const parts = rest.split('/');
  const id = parts[0]!;
  const action = parts[1];
  if (id.length === 0 || parts.length > 2 || (action !== undefined && action !== 'cancel')) {
    return { error: new ApiError('route_not_found', `no route for ${quoteInput(method)} ${quoteInput(RESPONSES_PREFIX + rest)}`) };
  }
  const notFound = () => ({ error: new ApiError('not_found', `no response with id '${quoteInput(id)}' (never stored, deleted, or expired)`, 'response_id') });
  if (action === 'cancel') {
    if (method !== 'POST') return { error: new ApiError('method_not_allowed', 'use POST'), allow: 'POST' };
    const cancelled = store.cancel(id, owner);
    if (cancelled) return { status: 200, body: cancelled };
    if (store.get(id, owner)) return { error: new ApiError('invalid_argument', `response '${quoteInput(id)}' has already finished; only a response that is generating can be cancelled`, 'response_id') };
    return notFound();
  }
  if (method === 'GET') {
    const live = store.inProgress(id, owner);
    if (live) return { status: 200, body: live };
    const stored = store.get(id, owner);
    return stored ? { status: 200, body: stored.response } : notFound();
  }
  if (method === 'DELETE') return store.delete(id, owner) ? { status: 200, body: { id, object: 'response', deleted: true } } : notFound();
  return { error: new ApiError('method_not_allowed', 'use GET or DELETE'), allow: 'GET, DELETE' };
}

export function sendResponsesRoute(res: ServerResponse, result: ResponsesRouteResult, send: { json(status: number, body: unknown): void; error(err: ApiError): void }): void {
  if ('error' in result) {
    if (result.allow) res.setHeader('allow', result.allow);
    send.error(result.error);
  } else send.json(result.status, result.body);
}
