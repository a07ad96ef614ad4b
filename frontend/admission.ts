/**
 * Who may start a generation request in this frontend: at most `maxInflight` at once, and
 * nobody once the frontend drains. Admission is a check and a book in one call, so there is one
 * mutation path; every admitted request releases once.
 *
 * Drain (SIGTERM): `beginDrain()` closes the gate for good; requests already admitted run on.
 * `whenIdle(ms)` resolves when the last of them releases (or the wait runs out). `cutInflight()`
 * aborts the controller each admitted request registered (`onCut`) with reason DRAIN_CUT: the
 * handler then ends the stream with an error frame (unary: an error response) instead of
 * letting the socket close under it.
 */

/** The answer to "may this request start?". 'full' and 'draining' both mean 503 + Retry-After. */
export type AdmissionVerdict = 'admitted' | 'full' | 'draining';

/** The abort reason of a cut request: the drain timeout expired with it in flight. */
export const DRAIN_CUT = Object.freeze(new Error('the frontend is shutting down and its drain timeout expired'));

export class AdmissionGate {
  private count = 0;
  private isDraining = false;
  private isCut = false;
  /** Controllers of admitted requests; a Set, so registering and leaving are O(1). */
  private readonly cuttable = new Set<AbortController>();
  private idleWaiters: Array<() => void> = [];

  constructor(readonly maxInflight: number) {}

  get inflight(): number {
    return this.count;
  }

  get draining(): boolean {
    return this.isDraining;
  }

  /** Book a slot if one is free and the frontend is not draining. */
  tryAdmit(): AdmissionVerdict {
    if (this.isDraining) return 'draining';
    if (this.count >= this.maxInflight) return 'full';
    this.count += 1;
    return 'admitted';
  }

  release(): void {
    if (this.count > 0) this.count -= 1;
    if (this.count === 0 && this.idleWaiters.length > 0) {
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const wake of waiters) wake();
    }
  }

  /** Admit nobody from now on (idempotent). */
  beginDrain(): void {
    this.isDraining = true;
  }

  /** Abort `controller` with DRAIN_CUT if the drain runs out of time before `offCut`. */
  onCut(controller: AbortController): void {
    if (this.isCut) controller.abort(DRAIN_CUT);
    else this.cuttable.add(controller);
  }

  offCut(controller: AbortController): void {
    this.cuttable.delete(controller);
  }

  /** Abort every admitted request (they end with an error, never silently). */
  cutInflight(): void {
    this.isCut = true;
    const controllers = [...this.cuttable];
    this.cuttable.clear();
    for (const controller of controllers) controller.abort(DRAIN_CUT);
  }

  /** True once nothing is in flight; false if `timeoutMs` passed first. */
  whenIdle(timeoutMs: number): Promise<boolean> {
    if (this.count === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        resolve(true);
      };
      const timer = setTimeout(() => {
        this.idleWaiters = this.idleWaiters.filter((w) => w !== wake);
        resolve(false);
      }, timeoutMs);
      this.idleWaiters.push(wake);
    });
  }
}
