/**
 * The life cycle every discovery handle shares: open → (lease lost) → closed. One place owns
 * the closed flag, the loss cause and the `onLeaseLost` callbacks, so the three backends agree
 * on which error each call raises and on "a callback registered after the loss still runs".
 */
import type { DiscoveryKind } from './discovery.js';
import { DiscoveryClosedError } from './errors.js';

export class DiscoveryHandleState {
  private isClosed = false;
  private lostCause: Error | undefined;
  private readonly lostCallbacks: Array<(cause: Error) => void> = [];

  /**
   * @param lostError what `assertUsable` throws after a loss, built from the cause (a backend
   *   may rethrow the cause itself or wrap it with its own message).
   */
  constructor(
    private readonly kind: DiscoveryKind,
    private readonly lostError: (cause: Error) => Error,
  ) {}

  get closed(): boolean {
    return this.isClosed;
  }

  get lost(): boolean {
    return this.lostCause !== undefined;
  }

  /** Mark closed; false when it already was (close() is idempotent). */
  close(): boolean {
    if (this.isClosed) return false;
    this.isClosed = true;
    return true;
  }

  /** Every call but close() rejects once the handle is closed. */
  assertOpen(): void {
    if (this.isClosed) throw new DiscoveryClosedError(this.kind);
  }

  /** Writes (put) also reject once the lease is lost. */
  assertUsable(): void {
    this.assertOpen();
    if (this.lostCause !== undefined) throw this.lostError(this.lostCause);
  }

  onLeaseLost(callback: (cause: Error) => void): void {
    if (this.lostCause !== undefined) {
      const cause = this.lostCause;
      queueMicrotask(() => callback(cause));
      return;
    }
    this.lostCallbacks.push(callback);
  }

  /** Record the loss and run the callbacks once, each on a microtask; false if already lost. */
  markLost(cause: Error): boolean {
    if (this.lostCause !== undefined) return false;
    this.lostCause = cause;
    for (const callback of this.lostCallbacks.splice(0)) queueMicrotask(() => callback(cause));
    return true;
  }
}
