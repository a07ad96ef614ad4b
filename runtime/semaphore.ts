/**
 * Semaphore: at most `permits` holders at once; the rest wait in FIFO order, at most
 * `maxWaiting` of them: past that `acquire` answers undefined at once, so a caller can refuse
 * (429) instead of queueing without bound. Each holder's release function is idempotent. No
 * timers, no I/O.
 */
export type Release = () => void;

export class Semaphore {
  private held = 0;
  private readonly waiters: Array<(release: Release) => void> = [];

  constructor(
    readonly permits: number,
    readonly maxWaiting: number = Number.POSITIVE_INFINITY,
  ) {
    if (!(permits >= 1)) throw new RangeError(`Semaphore: permits must be >= 1, got ${permits}`);
  }

  /** Holders now. */
  get inUse(): number {
    return this.held;
  }

  /** Callers waiting now. */
  get waiting(): number {
    return this.waiters.length;
  }

  /** A permit (resolves when one is free), or undefined at once when `maxWaiting` callers already wait. */
  acquire(): Promise<Release> | undefined {
    if (this.held < this.permits) {
      this.held++;
      return Promise.resolve(this.releaser());
    }
    if (this.waiters.length >= this.maxWaiting) return undefined;
    return new Promise<Release>((resolve) => this.waiters.push(resolve));
  }

  private releaser(): Release {
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const next = this.waiters.shift();
      // The permit passes straight to the next waiter: `held` does not change.
      if (next !== undefined) next(this.releaser());
      else this.held--;
    };
  }
}
