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
  method_not_allowed: { status: 405, type: 'invalid_request_error', retryable: false },
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

export function errorBody(err: ApiError): OpenAiErrorBody {
  return { error: { message: err.message, type: STATUS_TABLE[err.code].type, param: err.param, code: err.code } };
}

export function isRetryable(err: ApiError): boolean {
  return STATUS_TABLE[err.code].retryable;
}
