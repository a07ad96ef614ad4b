/** Small response helpers shared by the HTTP handlers. */
import type { ServerResponse } from 'node:http';
import { ApiError, errorBody, isRetryable } from '../errors.js';

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const json = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(json), ...headers });
  res.end(json);
}

/** `shape`: the API's error body (the codec's); default OpenAI's. */
export function sendError(res: ServerResponse, err: ApiError, retryAfterSeconds: number, shape: (err: ApiError) => object = errorBody): void {
  if (res.destroyed || res.writableEnded) return;
  const headers: Record<string, string> = {};
  if (isRetryable(err)) headers['retry-after'] = String(retryAfterSeconds);
  // After a refused body we may not have read the rest of the upload: do not reuse the socket.
  if (err.code === 'body_too_large') headers.connection = 'close';
  sendJson(res, err.status, shape(err), headers);
}
