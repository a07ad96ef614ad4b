/**
 * Constraints between what a rule asks for and what the planner orders, applied in this order:
 *   1. min / max of the pool (a pool reaches 0 only if its config allows it);
 *   2. at most one pending action per pool: while one is in flight, hold;
 *   3. scale-down hysteresis: only after `scaleDownIntervals` intervals in a row asked for less,
 *      and then to the largest of those asks (the least aggressive);
 *   4. cooldown since the pool's last action (separate for up and down);
 *   5. the total budget across pools (workers, or GPUs), which trims growth proportionally.
 * Pure: state in, state out, the clock passed in.
 */
import type { PlannerConfig, PoolBounds } from './config.js';
import type { Limit } from './decision.js';
import type { PoolName } from './observation.js';

export interface PoolState {
  pending?: { target: number; sinceMs: number };
  lastActionMs?: number;
  /** Consecutive intervals whose (clamped) ask was below the current count. */
  downStreak: number;
  /** Largest ask over that streak. */
  downStreakMax: number;
}

export const freshPoolState = (): PoolState => ({ downStreak: 0, downStreakMax: 0 });

export interface Constrained {
  target: number;
  limitedBy: Limit[];
  state: PoolState;
}

export function constrainPool(current: number, desired: number, bounds: PoolBounds, state: PoolState, config: PlannerConfig, nowMs: number): Constrained {
  const limitedBy: Limit[] = [];
  const floor = bounds.allowZero ? Math.max(0, bounds.min) : Math.max(1, bounds.min);
  let ask = desired;
  if (ask < floor) {
    ask = floor;
    limitedBy.push('min');
  } else if (ask > bounds.max) {
    ask = bounds.max;
    limitedBy.push('max');
  }
  const next: PoolState = { ...state };
  if (ask < current) {
    next.downStreak = state.downStreak + 1;
    next.downStreakMax = state.downStreak === 0 ? ask : Math.max(state.downStreakMax, ask);
  } else {
    next.downStreak = 0;
    next.downStreakMax = 0;
  }
  if (state.pending) return { target: current, limitedBy: ask !== current ? [...limitedBy, 'pending'] : limitedBy, state: next };
  if (ask === current) return { target: current, limitedBy, state: next };

  const since = state.lastActionMs === undefined ? Infinity : nowMs - state.lastActionMs;
  if (ask > current) {
    if (since < config.cooldownUpS * 1000) return { target: current, limitedBy: [...limitedBy, 'cooldown'], state: next };
    return { target: ask, limitedBy, state: next };
  }
  if (next.downStreak < config.scaleDownIntervals) return { target: current, limitedBy: [...limitedBy, 'hysteresis'], state: next };
  if (since < config.cooldownDownS * 1000) return { target: current, limitedBy: [...limitedBy, 'cooldown'], state: next };
  const target = next.downStreakMax;
  if (target !== ask) limitedBy.push('hysteresis');
  return { target, limitedBy, state: next };
}

export interface BudgetEntry {
  pool: PoolName;
  current: number;
  target: number;
  gpusPerWorker: number;
  limitedBy: Limit[];
}

/**
 * Trims growth so the sum over pools fits `maxWorkers` and `maxGpus`. Only growth is cut (each
 * growing pool keeps the same share of what is left, rounded down); a pool is never shrunk to
 * make room, so a fleet already over budget (a human scaled it) stays where it is.
 *
 * Worked: maxWorkers 10; prefill 2 → 5 (+3), decode 4 → 10 (+6): 15 > 10 by 5; growth 9 → 4,
 * factor 4/9: prefill +floor(1.33) = 1 → 3, decode +floor(2.67) = 2 → 6; total 9 ≤ 10.
 */
export function applyBudget(entries: BudgetEntry[], maxWorkers: number | undefined, maxGpus: number | undefined): void {
  const trim = (budget: number, weight: (e: BudgetEntry) => number) => {
    const used = entries.reduce((s, e) => s + weight(e) * e.target, 0);
    if (used <= budget) return;
    const growing = entries.filter((e) => e.target > e.current);
    const growth = growing.reduce((s, e) => s + weight(e) * (e.target - e.current), 0);
    if (growth === 0) return;
    const factor = Math.max(0, (growth - (used - budget)) / growth);
    for (const e of growing) {
      e.target = e.current + Math.floor((e.target - e.current) * factor);
      if (!e.limitedBy.includes('budget')) e.limitedBy.push('budget');
    }
  };
  if (maxWorkers !== undefined) trim(maxWorkers, () => 1);
  if (maxGpus !== undefined) trim(maxGpus, (e) => e.gpusPerWorker);
}
