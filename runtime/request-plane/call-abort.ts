/**
 * Per-call cancellation state. A Node AbortController costs microseconds to build, a visible
 * share of a loopback round trip, so the handler's `ctx.signal` is made only when a handler
 * reads it; the pump and the server watch this cheaper flag instead.
 */
import type { TandemError } from '../errors.js';

export class CallAbort {
  aborted = false;
  reason: TandemError | undefined;
  private controller: AbortController | undefined;
  private listeners: Array<() => void> | undefined;

  /** An AbortSignal mirroring this state, created on first use. */
  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.aborted) this.controller.abort(this.reason);
    }
    return this.controller.signal;
  }

  abort(reason: TandemError): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    this.controller?.abort(reason);
    const listeners = this.listeners;
    this.listeners = undefined;
    if (listeners) for (const listener of listeners) listener();
  }

  /** Run `listener` once on abort (at once if already aborted); returns an unsubscribe. */
  onAbort(listener: () => void): () => void {
    if (this.aborted) {
      listener();
      return () => undefined;
    }
    (this.listeners ??= []).push(listener);
    return () => {
      const list = this.listeners;
      if (!list) return;
      const i = list.indexOf(listener);
      if (i >= 0) list.splice(i, 1);
    };
  }
}
