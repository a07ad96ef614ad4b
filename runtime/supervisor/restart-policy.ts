/**
 * When to restart a child that exited on its own: exponential backoff with a cap, reset once a
 * run has stayed up long enough to count as healthy, and an optional give-up after too many
 * fast crashes in a row. Pure: the caller passes the start and exit times, so a test drives it
 * with a fake clock.
 *
 * Worked example (defaults: 500 ms, ×2, cap 30 s, healthy after 30 s): a child that crashes
 * 1 s after each start is restarted after 500, 1000, 2000, 4000, … ms, never more than 30 s.
 * If one run then lasts 45 s, the next crash restarts after 500 ms again.
 */

export interface RestartPolicy {
  /** Delay before the first restart of a streak (ms). */
  initialDelayMs: number;
  /** Upper bound of the delay (ms). */
  maxDelayMs: number;
  /** Growth of the delay per consecutive fast crash. */
  multiplier: number;
  /** A run at least this long (ms) ends the streak: the next crash starts again at `initialDelayMs`. */
  healthyAfterMs: number;
  /** Give up at this many consecutive fast crashes (3: restart twice, then stop); undefined restarts forever. */
  maxFastCrashes?: number;
}

export const DEFAULT_RESTART_POLICY: RestartPolicy = {
  initialDelayMs: 500,
  maxDelayMs: 30_000,
  multiplier: 2,
  healthyAfterMs: 30_000,
};

export type RestartDecision =
  | { kind: 'restart'; /** 1 for the first restart of a streak */ attempt: number; delayMs: number }
  | { kind: 'give_up'; /** consecutive fast crashes, the last one included */ crashes: number };

/** The delay before restart number `attempt` (1-based) of a streak. */
export function backoffDelayMs(policy: RestartPolicy, attempt: number): number {
  const raw = policy.initialDelayMs * policy.multiplier ** Math.max(0, attempt - 1);
  return Math.min(policy.maxDelayMs, Math.round(raw));
}

/** The restart state of one named child across its runs. */
export class RestartBackoff {
  private fastCrashes = 0;

  constructor(readonly policy: RestartPolicy = DEFAULT_RESTART_POLICY) {}

  /** Consecutive fast crashes so far. */
  get streak(): number {
    return this.fastCrashes;
  }

  /** Decide what to do about a run that started at `startedAtMs` and exited on its own at `exitedAtMs`. */
  onUnexpectedExit(startedAtMs: number, exitedAtMs: number): RestartDecision {
    const ranHealthy = exitedAtMs - startedAtMs >= this.policy.healthyAfterMs;
    this.fastCrashes = ranHealthy ? 1 : this.fastCrashes + 1;
    if (!ranHealthy && this.policy.maxFastCrashes !== undefined && this.fastCrashes >= this.policy.maxFastCrashes) {
      return { kind: 'give_up', crashes: this.fastCrashes };
    }
    return { kind: 'restart', attempt: this.fastCrashes, delayMs: backoffDelayMs(this.policy, this.fastCrashes) };
  }
}
