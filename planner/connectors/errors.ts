/**
 * Typed connector failures. The live loop catches every one of them, counts it
 * (`tandem_planner_connector_errors_total`), forgets the pool's pending action and tries again
 * next interval: a connector error never ends the planner.
 */
import { TandemError, type ErrorCode } from '../../runtime/index.js';

export type ConnectorErrorKind = 'not_found' | 'conflict' | 'server' | 'unreachable' | 'timeout' | 'rejected';

export class ConnectorError extends TandemError {
  override readonly name = 'ConnectorError';
  constructor(
    readonly connector: string,
    readonly kind: ConnectorErrorKind,
    message: string,
    /** The HTTP status where there was one. */
    readonly status?: number,
    options?: { cause?: unknown },
  ) {
    super(CODES[kind], `${connector} connector: ${message}`, options);
  }
}

const CODES: Record<ConnectorErrorKind, ErrorCode> = {
  not_found: 'not_found',
  conflict: 'unavailable',
  server: 'unavailable',
  unreachable: 'unavailable',
  timeout: 'deadline_exceeded',
  rejected: 'invalid_argument',
};
