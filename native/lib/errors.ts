/**
 * Errors from the native engine. The addon rejects with `err.code` set to one of
 * runtime/errors.ts's codes (config_invalid, not_found, invalid_argument,
 * resource_exhausted, internal); they are rebuilt here into typed errors once, at the edge.
 */
import { TandemError, isErrorCode, type ErrorCode } from '../../runtime/errors.js';

export class NativeEngineError extends TandemError {
  override readonly name = 'NativeEngineError';
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
  }
}

/** The addon is not built (or cannot load on this machine). */
export class NativeUnavailableError extends TandemError {
  override readonly name = 'NativeUnavailableError';
  constructor(message: string, options?: { cause?: unknown }) {
    super('unavailable', message, options);
  }
}

/** Converts whatever the addon threw into a NativeEngineError, keeping the native code. */
export function fromNativeError(err: unknown): TandemError {
  if (err instanceof TandemError) return err;
  const code = (err as { code?: unknown } | null)?.code;
  const message = err instanceof Error ? err.message : String(err);
  return new NativeEngineError(isErrorCode(code) ? code : 'internal', message, { cause: err });
}
