/** Discovery failures as typed errors (codes from runtime/errors.ts). */
import { TandemError } from '../errors.js';

/** The process's lease is gone; it must drain and exit. */
export class LeaseLostError extends TandemError {
  override readonly name = 'LeaseLostError';
  constructor(message: string, options?: { cause?: unknown }) {
    super('lease_lost', message, options);
  }
}

/** A call on a discovery handle after `close()`. */
export class DiscoveryClosedError extends TandemError {
  override readonly name = 'DiscoveryClosedError';
  constructor(kind: string) {
    super('unavailable', `${kind} discovery is closed`);
  }
}
