/**
 * Typed runtime errors. Each has a stable `code` that crosses the request plane, so a caller
 * switches on codes instead of matching message strings.
 */
export const ERROR_CODES = [
  'cancelled',
  'deadline_exceeded',
  'unavailable',
  'no_instances',
  'instance_not_found',
  'invalid_argument',
  'resource_exhausted',
  'not_found',
  'handler_error',
  'internal',
  'lease_lost',
  'config_invalid',
] as const;
export type ErrorCode = (typeof ERROR_CODES)[number];

export class TandemError extends Error {
  override readonly name: string = 'TandemError';
  constructor(
    readonly code: ErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export class CancelledError extends TandemError {
  override readonly name = 'CancelledError';
  constructor(message = 'call cancelled', options?: { cause?: unknown }) {
    super('cancelled', message, options);
  }
}

export class DeadlineExceededError extends TandemError {
  override readonly name = 'DeadlineExceededError';
  constructor(message = 'deadline exceeded', options?: { cause?: unknown }) {
    super('deadline_exceeded', message, options);
  }
}

export class UnavailableError extends TandemError {
  override readonly name: string = 'UnavailableError';
  constructor(message: string, options?: { cause?: unknown }) {
    super('unavailable', message, options);
  }
}

/**
 * The peer's host refused the connection: nothing listens at the instance's address, so the
 * process is gone (a new process of the same worker registers a new instance). Unlike other
 * `unavailable` failures (a dropped connection, a draining server) this one is definite.
 */
export class ConnectRefusedError extends UnavailableError {
  override readonly name: string = 'ConnectRefusedError';
}

export class NoInstancesError extends TandemError {
  override readonly name = 'NoInstancesError';
  constructor(message: string) {
    super('no_instances', message);
  }
}

export class ConfigError extends TandemError {
  override readonly name = 'ConfigError';
  constructor(message: string) {
    super('config_invalid', message);
  }
}

export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === 'string' && (ERROR_CODES as readonly string[]).includes(value);
}

/** Rebuild a typed error from a code and message received from a peer. */
export function errorFromWire(code: string, message: string): TandemError {
  switch (code) {
    case 'cancelled':
      return new CancelledError(message);
    case 'deadline_exceeded':
      return new DeadlineExceededError(message);
    case 'unavailable':
      return new UnavailableError(message);
    case 'no_instances':
      return new NoInstancesError(message);
    default:
      return new TandemError(isErrorCode(code) ? code : 'internal', message);
  }
}
