/**
 * Errors of a KV transfer. The addon rejects with `err.code` set to one of runtime/errors.ts's
 * codes ('unavailable' when the peer died or its endpoint was dropped, 'deadline_exceeded'
 * when a read ran past its timeout, 'invalid_argument', 'internal'); they are rebuilt here
 * into typed errors once, at the edge.
 */
import { TandemError, isErrorCode, type ErrorCode } from '../../runtime/errors.js';

/** A transfer failed; switch on `code`. */
export class KvTransferError extends TandemError {
  override readonly name = 'KvTransferError';
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
  }
}

/** The UCX addon is not built or cannot load on this machine. */
export class UcxUnavailableError extends TandemError {
  override readonly name = 'UcxUnavailableError';
  constructor(message: string, options?: { cause?: unknown }) {
    super('unavailable', message, options);
  }
}

/** Converts whatever the addon threw or rejected with into a KvTransferError. */
export function fromAddonError(err: unknown): TandemError {
  if (err instanceof TandemError) return err;
  const code = (err as { code?: unknown } | null)?.code;
  const message = err instanceof Error ? err.message : String(err);
  return new KvTransferError(isErrorCode(code) ? code : 'internal', message, { cause: err });
}
