/**
 * The frontend's one error type and the one table that maps error codes to HTTP status and
 * OpenAI error `type`. Runtime errors (runtime/errors.ts) keep their codes; the frontend adds a
 * few of its own for things only HTTP can get wrong (bad JSON, body too large, unknown route).
 */
import { TandemError, isErrorCode, type ErrorCode } from '../runtime/errors.js';

export const FRONTEND_ERROR_CODES = [
  'invalid_json',
  'body_too_large',
  'model_not_found',
  'context_length_exceeded',
  'overloaded',
  'route_not_found',
  'method_not_allowed',
  'invalid_api_key',
  'unsupported_media_type',
] as const;
export type FrontendErrorCode = (typeof FRONTEND_ERROR_CODES)[number];
export type ApiErrorCode = ErrorCode | FrontendErrorCode;

interface StatusEntry {
  status: number;
  type: string;
  /** Overload answers carry Retry-After. */
  retryable: boolean;
}

/** The single code → HTTP mapping. Anything not listed is a 500. */
export const STATUS_TABLE: Readonly<Record<ApiErrorCode, StatusEntry>> = {
  invalid_argument: { status: 400, type: 'invalid_request_error', retryable: false },
  invalid_json: { status: 400, type: 'invalid_request_error', retryable: false },
  context_length_exceeded: { status: 400, type: 'invalid_request_error', retryable: false },
  model_not_found: { status: 404, type: 'invalid_request_error', retryable: false },
  not_found: { status: 404, type: 'invalid_request_error', retryable: false },
  instance_not_found: { status: 404, type: 'invalid_request_error', retryable: false },
  route_not_found: { status: 404, type: 'invalid_request_error', retryable: false },
  // OpenAI answers a missing or wrong key with 401, type invalid_request_error, code invalid_api_key.
  invalid_api_key: { status: 401, type: 'invalid_request_error', retryable: false },
  method_not_allowed: { status: 405, type: 'invalid_request_error', retryable: false },
  unsupported_media_type: { status: 415, type: 'invalid_request_error', retryable: false },
  body_too_large: { status: 413, type: 'invalid_request_error', retryable: false },
  resource_exhausted: { status: 429, type: 'rate_limit_error', retryable: true },
  overloaded: { status: 503, type: 'service_unavailable_error', retryable: true },
  no_instances: { status: 503, type: 'service_unavailable_error', retryable: true },
  unavailable: { status: 503, type: 'service_unavailable_error', retryable: true },
  deadline_exceeded: { status: 504, type: 'timeout_error', retryable: false },
  // 499 is nginx's "client closed request"; only logs and metrics ever see it.
  cancelled: { status: 499, type: 'cancelled', retryable: false },
  handler_error: { status: 500, type: 'internal_error', retryable: false },
  internal: { status: 500, type: 'internal_error', retryable: false },
  lease_lost: { status: 503, type: 'service_unavailable_error', retryable: true },
  config_invalid: { status: 500, type: 'internal_error', retryable: false },
};

export class ApiError extends Error {
  override readonly name = 'ApiError';
  constructor(
    readonly code: ApiErrorCode,
    message: string,
    readonly param: string | null = null,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }

  get status(): number {
    return STATUS_TABLE[this.code].status;
  }
}

/** The 404 for an unknown model; the name is quoted capped (it is client input). */
export function modelNotFound(name: string): ApiError {
  return new ApiError('model_not_found', `The model '${quoteInput(name)}' does not exist`, 'model');
}

export function badRequest(message: string, param: string | null = null): ApiError {
  return new ApiError('invalid_argument', message, param);
}

/** Any thrown value → ApiError, keeping runtime codes. Unknown faults become `internal`. */
export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof TandemError) return new ApiError(err.code, err.message, null, { cause: err });
  const code = (err as { code?: unknown } | null)?.code;
  if (isErrorCode(code)) return new ApiError(code, String((err as Error).message ?? code), null, { cause: err });
  return new ApiError('internal', 'internal server error', null, { cause: err });
}

export interface OpenAiErrorBody {
  error: { message: string; type: string; param: string | null; code: string };
}

/**
 * Longest error message sent to a client. Messages quote client input (a model name, a route);
 * capping here, the one place every error body is built, means no input of any size is
 * echoed back whole.
 */
export const MAX_ERROR_MESSAGE_CHARS = 512;
/** Longest quoted input inside a message (see `quoteInput`). */
export const MAX_QUOTED_INPUT_CHARS = 256;

/** Client input for an error message: at most MAX_QUOTED_INPUT_CHARS, then an ellipsis. */
export function quoteInput(value: string): string {
  return truncate(value, MAX_QUOTED_INPUT_CHARS);
}

function truncate(text: string, max: number): string {
  if (text.length <= max) return text;
  // Do not split a surrogate pair: a lone half would be replaced by U+FFFD on the wire.
  let end = max;
  const last = text.charCodeAt(end - 1);
  if (last >= 0xd800 && last <= 0xdbff) end--;
  return `${text.slice(0, end)}…`;
}

/**
 * Faults whose text, when it comes from the runtime, describes our own machinery (a dead
 * worker's socket: "No connection established. Last error: connect ECONNREFUSED 127.0.0.1:38765";
 * gRPC's "remote_addr=…" on a deadline; a worker's internal failure). The client gets a fixed
 * sentence per code instead; the log keeps the original (the ApiError's `cause`).
 */
const FAULT_MESSAGES: Partial<Record<ApiErrorCode, string>> = {
  unavailable: 'the worker serving this request became unavailable and no other worker could take it over; retry the request',
  lease_lost: 'the worker serving this request left the fleet; retry the request',
  internal: 'a worker failed while serving this request',
  handler_error: 'a worker failed while serving this request',
  deadline_exceeded: 'the request timed out on a worker',
  cancelled: 'a worker cancelled the request',
};

/** Network addresses (IPv4, [IPv6], host:port, unix sockets) and socket error names. */
const INTERNAL_DETAIL = [
  /\[[0-9a-f.%]*:[0-9a-f:.%]*\](?::\d+)?/gi, // an IPv6 literal has a colon; `tools[0]` is not one
  /\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b/g,
  /\b(?:localhost|[a-z0-9-]+(?:\.[a-z0-9-]+)+):\d{2,5}\b/gi,
  /\bunix:\S+/gi,
  /\bE(?:CONNREFUSED|CONNRESET|CONNABORTED|HOSTUNREACH|NETUNREACH|TIMEDOUT|PIPE|ADDRNOTAVAIL|NOTFOUND|AI_AGAIN)\b/g,
];

/**
 * What a client may read of an error: the one place internal errors become client-visible
 * (every error body and SSE error frame is built by `errorBody`). A runtime fault (an ApiError
 * whose cause is the runtime's error) gets its code's fixed sentence; any message, whatever its
 * source, loses network addresses and socket error names.
 */
export function clientMessage(err: ApiError): string {
  const fault = err.cause !== undefined ? FAULT_MESSAGES[err.code] : undefined;
  let message = fault ?? err.message;
  for (const pattern of INTERNAL_DETAIL) message = message.replace(pattern, '[internal]');
  return message;
}

export function errorBody(err: ApiError): OpenAiErrorBody {
  const param = err.param === null ? null : truncate(err.param, MAX_QUOTED_INPUT_CHARS);
  return { error: { message: truncate(clientMessage(err), MAX_ERROR_MESSAGE_CHARS), type: STATUS_TABLE[err.code].type, param, code: err.code } };
}

export function isRetryable(err: ApiError): boolean {
  return STATUS_TABLE[err.code].retryable;
}
