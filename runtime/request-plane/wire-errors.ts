/**
 * Typed errors across the request plane. The server puts the stable Tandem code in trailing
 * metadata (`tandem-error-code`) next to a gRPC status chosen so that plain gRPC tooling still
 * reads something sensible; the client prefers the Tandem code and falls back to the status.
 */
import { Metadata, status as GrpcStatus, type ServiceError, type StatusObject } from '@grpc/grpc-js';
import { ConnectRefusedError, errorFromWire, TandemError, type ErrorCode } from '../errors.js';

export const ERROR_CODE_METADATA_KEY = 'tandem-error-code';

const GRPC_STATUS_FOR_CODE: Record<ErrorCode, GrpcStatus> = {
  cancelled: GrpcStatus.CANCELLED,
  deadline_exceeded: GrpcStatus.DEADLINE_EXCEEDED,
  unavailable: GrpcStatus.UNAVAILABLE,
  no_instances: GrpcStatus.UNAVAILABLE,
  instance_not_found: GrpcStatus.NOT_FOUND,
  invalid_argument: GrpcStatus.INVALID_ARGUMENT,
  resource_exhausted: GrpcStatus.RESOURCE_EXHAUSTED,
  not_found: GrpcStatus.NOT_FOUND,
  handler_error: GrpcStatus.UNKNOWN,
  internal: GrpcStatus.INTERNAL,
  lease_lost: GrpcStatus.UNAVAILABLE,
  config_invalid: GrpcStatus.FAILED_PRECONDITION,
};

function codeForGrpcStatus(code: number): ErrorCode {
  switch (code) {
    case GrpcStatus.CANCELLED:
      return 'cancelled';
    case GrpcStatus.DEADLINE_EXCEEDED:
      return 'deadline_exceeded';
    case GrpcStatus.UNAVAILABLE:
      return 'unavailable';
    case GrpcStatus.NOT_FOUND:
    case GrpcStatus.UNIMPLEMENTED:
      return 'not_found';
    case GrpcStatus.INVALID_ARGUMENT:
      return 'invalid_argument';
    case GrpcStatus.RESOURCE_EXHAUSTED:
      return 'resource_exhausted';
    case GrpcStatus.UNKNOWN:
      return 'handler_error';
    default:
      return 'internal';
  }
}

/** Anything a handler throws becomes a TandemError; foreign errors are `handler_error`. */
export function asTandemError(err: unknown): TandemError {
  if (err instanceof TandemError) return err;
  const message = err instanceof Error ? err.message : String(err);
  return new TandemError('handler_error', message, { cause: err });
}

/** Server side: the error to emit on a call so the client can rebuild it. */
export function toServiceError(err: TandemError): Partial<StatusObject> & { code: GrpcStatus; details: string; metadata: Metadata } {
  const metadata = new Metadata();
  metadata.set(ERROR_CODE_METADATA_KEY, err.code);
  return { code: GRPC_STATUS_FOR_CODE[err.code], details: err.message, metadata };
}

/**
 * grpc-js reports a stream that its HTTP/2 connection killed as INTERNAL: "Received RST_STREAM
 * with code 2 triggered by internal client error: Session closed with error code 2" when the
 * peer sent GOAWAY(INTERNAL_ERROR), "... (Call ended without gRPC status)" when the stream just
 * stopped. Neither came from a handler (our server tags every status it sends), and neither
 * says anything about the request: the call may be sent again, so they are `unavailable`,
 * which callers retry on another instance (before the first item) or migrate (after it).
 */
const TRANSPORT_FAILURE = /RST_STREAM|Session closed|GOAWAY/;

function isTransportFailure(err: Partial<ServiceError> & { rstCode?: unknown }): boolean {
  if (err.code !== GrpcStatus.INTERNAL) return false;
  return typeof err.rstCode === 'number' || TRANSPORT_FAILURE.test(err.details ?? err.message ?? '');
}

/**
 * grpc-js reports a channel that could not connect as UNAVAILABLE "No connection established.
 * Last error: Error: connect ECONNREFUSED 127.0.0.1:38765 ...". Parsed here, once, into a
 * typed error, so callers never match the string.
 */
const CONNECT_REFUSED = /\bECONNREFUSED\b/;

/** Client side: rebuild the typed error from a gRPC failure. */
export function fromServiceError(err: Partial<ServiceError>): TandemError {
  const tagged = err.metadata?.get(ERROR_CODE_METADATA_KEY)[0];
  if (typeof tagged !== 'string' && err.code === GrpcStatus.UNAVAILABLE && CONNECT_REFUSED.test(err.details ?? err.message ?? '')) {
    return new ConnectRefusedError(err.details ?? err.message ?? 'connection refused');
  }
  const code = typeof tagged === 'string' ? tagged : isTransportFailure(err) ? 'unavailable' : codeForGrpcStatus(err.code ?? GrpcStatus.UNKNOWN);
  const message = err.details ?? err.message ?? 'request plane error';
  const rebuilt = errorFromWire(code, message);
  return rebuilt;
}
