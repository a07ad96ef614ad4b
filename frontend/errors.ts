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

export function errorBody(err: ApiError): OpenAiErrorBody {
  const param = err.param === null ? null : truncate(err.param, MAX_QUOTED_INPUT_CHARS);
  return { error: { message: truncate(err.message, MAX_ERROR_MESSAGE_CHARS), type: STATUS_TABLE[err.code].type, param, code: err.code } };
}

export function isRetryable(err: ApiError): boolean {
  return STATUS_TABLE[err.code].retryable;
}
