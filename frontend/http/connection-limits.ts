/**
 * Connection hygiene of the frontend's HTTP server: how long a client may take to send its
 * headers and its whole request, how long an idle keep-alive socket stays open, how many
 * connections are held at once, and how large the headers may be.
 *
 * Node's semantics, which the defaults rely on:
 * - `headersTimeout` and `requestTimeout` cover *receiving* the request only. Once the body is
 *   in, the connection leaves Node's checking list, so a long SSE response that is still
 *   streaming is never cut by them. A client that trickles its body (slowloris) is.
 * - They are checked every `connectionsCheckingInterval`, so a timeout fires up to one interval
 *   late; we check every second instead of Node's 30.
 * - `keepAliveTimeout` is the idle time between requests on a kept-alive socket.
 * - The connection cap is ours, not Node's `maxConnections` (which closes sockets past it before
 *   reading a byte): past `maxConnections`, a connection may still ask for `/live` or `/health`
 *   within its own budget, `maxProbeConnections` (connection-budget.ts).
 * - Headers over `maxHeaderSize` and timed-out requests surface as `clientError`; our handler
 *   answers 431 and 408 there, in OpenAI's error shape, like Node's default would (in status).
 */
import type { Server, ServerOptions } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import { ConnectionBudget } from './connection-budget.js';

export interface ConnectionLimits {
  /** Time to receive the request headers (ms). */
  headerTimeoutMs: number;
  /** Time to receive the whole request, headers and body (ms); 0 = no limit. */
  requestTimeoutMs: number;
  /** Idle time of a kept-alive connection between requests (ms). */
  idleTimeoutMs: number;
  /** Connections held at once; 0 = no cap. */
  maxConnections: number;
  /** Connections past `maxConnections` kept for liveness and health probes only (connection-budget.ts). */
  maxProbeConnections: number;
  /** Largest request head (request line + headers) in bytes; more gets 431. */
  maxHeaderBytes: number;
}

export const DEFAULT_CONNECTION_LIMITS: Readonly<ConnectionLimits> = {
  headerTimeoutMs: 30_000,
  // A 16 MiB body (--max-body-bytes) needs ~1.3 Mbit/s to arrive in time.
  requestTimeoutMs: 120_000,
  // Above the usual 60 s idle timeout of load balancers, so they close first and never reuse
  // a socket we are closing.
  idleTimeoutMs: 65_000,
  maxConnections: 4096,
  maxProbeConnections: 16,
  maxHeaderBytes: 16 * 1024,
};

/** How often Node checks header and request timeouts. */
const TIMEOUT_CHECK_INTERVAL_MS = 1_000;

/** Options that Node only takes at `createServer`. */
export function serverOptions(limits: ConnectionLimits): ServerOptions {
  return {
    maxHeaderSize: limits.maxHeaderBytes,
    connectionsCheckingInterval: TIMEOUT_CHECK_INTERVAL_MS,
    // Node 20's default; a stated choice here so `requestTimeout` below is the only knob.
    requestTimeout: limits.requestTimeoutMs,
    headersTimeout: headersTimeoutOf(limits),
    keepAliveTimeout: limits.idleTimeoutMs,
  };
}

/**
 * The rest of the limits, and the `clientError` answers. Returns the connection budget, whose
 * `refuse(req, res)` the request listener calls before routing.
 */
export function applyConnectionLimits(server: Server, limits: ConnectionLimits, log: Logger, retryAfterSeconds = 1): ConnectionBudget {
  server.requestTimeout = limits.requestTimeoutMs;
  server.headersTimeout = headersTimeoutOf(limits);
  server.keepAliveTimeout = limits.idleTimeoutMs;
  // The socket inactivity timeout stays off: a long prefill sends nothing for a while.
  server.timeout = 0;
  const budget = new ConnectionBudget(limits.maxConnections, limits.maxProbeConnections ?? DEFAULT_CONNECTION_LIMITS.maxProbeConnections, retryAfterSeconds, log);
  budget.attach(server);
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => answerClientError(err, socket));
  return budget;
}

/** Node refuses headersTimeout > requestTimeout when the latter is set. */
function headersTimeoutOf(limits: ConnectionLimits): number {
  return limits.requestTimeoutMs > 0 ? Math.min(limits.headerTimeoutMs, limits.requestTimeoutMs) : limits.headerTimeoutMs;
}

const CLIENT_ERRORS: Readonly<Record<string, { status: number; reason: string; message: string; type: string; code: string }>> = {
  HPE_HEADER_OVERFLOW: { status: 431, reason: 'Request Header Fields Too Large', message: 'the request headers are too large', type: 'invalid_request_error', code: 'headers_too_large' },
  ERR_HTTP_REQUEST_TIMEOUT: { status: 408, reason: 'Request Timeout', message: 'the request was not received in time', type: 'invalid_request_error', code: 'request_timeout' },
};
const BAD_REQUEST = { status: 400, reason: 'Bad Request', message: 'malformed HTTP request', type: 'invalid_request_error', code: 'invalid_request' };

function answerClientError(err: NodeJS.ErrnoException, socket: Duplex): void {
  // A response already under way on this socket (a refused upload that kept coming, say):
  // another status line would corrupt it.
  const inProgress = (socket as { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent === true;
  if (!socket.writable || inProgress || err.code === 'ECONNRESET') {
    socket.destroy();
    return;
  }
  const answer = (err.code !== undefined ? CLIENT_ERRORS[err.code] : undefined) ?? BAD_REQUEST;
  const body = JSON.stringify({ error: { message: answer.message, type: answer.type, param: null, code: answer.code } });
  socket.end(`HTTP/1.1 ${answer.status} ${answer.reason}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
}
