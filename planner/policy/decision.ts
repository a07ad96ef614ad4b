/**
 * What the planner decided for one pool in one interval, and why. Every decision, holds
 * included, carries its inputs and the rule that fired, so a run can be audited line by line.
 */
import type { PoolName } from './observation.js';

/** The sizing rule that produced `desired`. */
export const RULES = [
  'sla.prefill', // M/D/1 utilization cap from the TTFT target at the predicted ISL
  'sla.decode', // best decode operating point under the ITL target at the predicted context
  'sla.agg', // both shares on one worker (see sla-sizing.ts sizeAgg)
  'load.up', // a load signal above its scale-up threshold: +1
  'load.down', // every load signal below its scale-down threshold: −1
  'load.within', // between thresholds: keep
  'no_signal', // nothing to size from yet (no traffic observed, no prediction): keep
] as const;
export type Rule = (typeof RULES)[number];

/** A constraint that moved the target away from `desired`. */
export type Limit = 'min' | 'max' | 'pending' | 'cooldown' | 'hysteresis' | 'budget';

export interface Prediction {
  rate: number;
  isl: number;
  osl: number;
  /** Rate the pools are sized for: rate + rateZ × recent RMS forecast error. */
  plannedRate: number;
  /**
   * The learnt surge: the largest recent excess of a measured rate over its forecast, as a
   * fraction (0.8 = 80% above), decaying with `sla.surgeHalfLifeS`. The pools also cover
   * rate × (1 + surge) at the full targets.
   */
  surge: number;
}

export interface Decision {
  pool: PoolName;
  atMs: number;
  /** Replicas the pool had (observed). */
  current: number;
  /** What the rule asked for, before constraints. */
  desired: number;
  /** What the planner asks the connector for. */
  target: number;
  action: 'up' | 'down' | 'hold';
  rule: Rule;
  limitedBy: Limit[];
  /** One line with the arithmetic, for logs and `--decisions`. */
  reason: string;
  prediction?: Prediction;
  corrections?: { ttft: number; itl: number };
}
