/**
 * The planner's configuration: one validated object, read once (a JSON file, flags, or a test's
 * literal), never written back. `parsePlannerConfig` turns any parsed JSON into it or throws a
 * ConfigError naming the field (the CLI maps that to exit 2).
 */
import { ConfigError } from '../../runtime/errors.js';
import { isObject } from '../../proto/wire.js';
import { isPredictorName, type PredictorName } from '../predictors/index.js';
import { isPoolName, POOL_NAMES, type PoolName } from './observation.js';

export interface PoolBounds {
  min: number;
  max: number;
  /** GPUs one worker of this pool holds (for a GPU budget). */
  gpusPerWorker: number;
  /** Whether `min` may be 0: a pool goes to zero only when this says so. */
  allowZero: boolean;
}

export interface LoadThresholds {
  /** Per worker: queued prefill tokens ÷ context length. */
  prefillQueueUp: number;
  prefillQueueDown: number;
  /** Mean KV usage, 0..1. */
  kvUp: number;
  kvDown: number;
}

/** Dynamo's LoadPlannerDefaults (planner/defaults.py): queue 5.0 / 0.2, KV 0.9 / 0.5. */
export const THROUGHPUT_THRESHOLDS: LoadThresholds = { prefillQueueUp: 5, prefillQueueDown: 0.2, kvUp: 0.9, kvDown: 0.5 };
/** Ours: scale up before anything queues, tolerate less KV pressure (over-provision for latency). */
export const LATENCY_THRESHOLDS: LoadThresholds = { prefillQueueUp: 1, prefillQueueDown: 0.1, kvUp: 0.7, kvDown: 0.3 };

export interface PlannerConfig {
  mode: 'sla' | 'load';
  /** Seconds between decisions. */
  intervalS: number;
  /** Either { agg } or { prefill, decode }. */
  pools: Partial<Record<PoolName, PoolBounds>>;
  /** Total workers over all pools; absent = no limit. */
  maxWorkers?: number;
  /** Total GPUs over all pools (workers × gpusPerWorker); absent = no limit. */
  maxGpus?: number;
  /** Seconds after a scale action before the next one in the same direction on that pool. */
  cooldownUpS: number;
  cooldownDownS: number;
  /** Scale down only after this many intervals in a row asked for less (hysteresis). */
  scaleDownIntervals: number;
  /** A pending action that has not reached its target after this long is dropped. */
  pendingTimeoutS: number;
  predictor: PredictorName;
  sla: {
    ttftMs: number;
    itlMs: number;
    /** KV capacity of one worker in tokens (total blocks × block size). */
    kvCapacityTokens: number;
    /** Upper bound on the prefill utilization the TTFT rule may choose. */
    maxUtilization: number;
    /** Fold measured/expected TTFT and ITL back into the targets. */
    corrections: boolean;
    /**
     * Size for predicted rate + rateZ × the rate forecast's recent RMS error (1.28 ≈ the 90th
     * percentile of a normal error): headroom that grows when the forecast is being wrong.
     */
    rateZ: number;
    /**
     * Size for this fraction of each target (0 < m ≤ 1). The planner sees interval means; the
     * second-to-second swing inside an interval needs room that no forecast provides.
     */
    targetMargin: number;
    /**
     * Half-life (s) of the learnt surge: the largest relative excess of an interval's rate over
     * its forecast, remembered and decaying with this half-life. The pools are also sized so that
     * a surge that large, arriving right after a decision, still meets the full targets while
     * new workers start (a scale-up cannot serve before one interval + the start-up time).
     * 0 turns surge headroom off.
     */
    surgeHalfLifeS: number;
  };
  load: {
    variant: 'throughput' | 'latency';
    /** The model's context length, the unit of the prefill queue signal. */
    contextLength: number;
    thresholds: LoadThresholds;
  };
}

export const DEFAULT_POOL: PoolBounds = { min: 1, max: 1000, gpusPerWorker: 1, allowZero: false };

/** The pools `c` sizes, in POOL_NAMES order (agg, prefill, decode). */
export function configuredPools(c: Pick<PlannerConfig, 'pools'>): PoolName[] {
  return POOL_NAMES.filter((p) => c.pools[p] !== undefined);
}

export function defaultPlannerConfig(): PlannerConfig {
  return {
    mode: 'sla',
    intervalS: 60,
    pools: { prefill: { ...DEFAULT_POOL }, decode: { ...DEFAULT_POOL } },
    cooldownUpS: 0,
    cooldownDownS: 180,
    scaleDownIntervals: 3,
    pendingTimeoutS: 600,
    predictor: 'kalman',
    sla: { ttftMs: 500, itlMs: 30, kvCapacityTokens: 131072, maxUtilization: 0.9, corrections: true, rateZ: 1.28, targetMargin: 0.9, surgeHalfLifeS: 21600 },
    load: { variant: 'throughput', contextLength: 8192, thresholds: { ...THROUGHPUT_THRESHOLDS } },
  };
}

/** Validates a finished config; throws ConfigError naming the first bad field. */
export function validatePlannerConfig(c: PlannerConfig): PlannerConfig {
  if (c.mode !== 'sla' && c.mode !== 'load') bad('mode', `must be sla or load, got ${JSON.stringify(c.mode)}`);
  positive('intervalS', c.intervalS);
  const names = Object.keys(c.pools);
  for (const name of names) if (!isPoolName(name)) bad(`pools.${name}`, `unknown pool (known: ${POOL_NAMES.join(', ')})`);
  const agg = c.pools.agg !== undefined;
  const disagg = c.pools.prefill !== undefined || c.pools.decode !== undefined;
  if (agg && disagg) bad('pools', 'either agg, or prefill and decode, not both');
  if (!agg && !(c.pools.prefill && c.pools.decode)) bad('pools', 'needs agg, or both prefill and decode');
  for (const [name, p] of Object.entries(c.pools) as [PoolName, PoolBounds][]) {
    nonNegativeInt(`pools.${name}.min`, p.min);
    nonNegativeInt(`pools.${name}.max`, p.max);
    if (p.min > p.max) bad(`pools.${name}`, `min ${p.min} > max ${p.max}`);
    if (p.max < 1) bad(`pools.${name}.max`, 'must be at least 1');
    if (p.min === 0 && !p.allowZero) bad(`pools.${name}.min`, '0 needs allowZero: true (a pool goes to zero only when allowed)');
    positive(`pools.${name}.gpusPerWorker`, p.gpusPerWorker);
  }
  if (c.maxWorkers !== undefined) positive('maxWorkers', c.maxWorkers);
  if (c.maxGpus !== undefined) positive('maxGpus', c.maxGpus);
  const floor = Object.values(c.pools).reduce((s, p) => s + p!.min, 0);
  if (c.maxWorkers !== undefined && floor > c.maxWorkers) bad('maxWorkers', `${c.maxWorkers} is below the pools' minimums (${floor})`);
  nonNegative('cooldownUpS', c.cooldownUpS);
  nonNegative('cooldownDownS', c.cooldownDownS);
  if (!Number.isInteger(c.scaleDownIntervals) || c.scaleDownIntervals < 1) bad('scaleDownIntervals', 'must be an integer ≥ 1');
  positive('pendingTimeoutS', c.pendingTimeoutS);
  if (!isPredictorName(c.predictor)) bad('predictor', `unknown predictor ${JSON.stringify(c.predictor)} (constant, moving-window, holt, kalman)`);
  positive('sla.ttftMs', c.sla.ttftMs);
  positive('sla.itlMs', c.sla.itlMs);
  positive('sla.kvCapacityTokens', c.sla.kvCapacityTokens);
  if (!(c.sla.maxUtilization > 0 && c.sla.maxUtilization < 1)) bad('sla.maxUtilization', 'must be in (0, 1)');
  nonNegative('sla.rateZ', c.sla.rateZ);
  if (!(c.sla.targetMargin > 0 && c.sla.targetMargin <= 1)) bad('sla.targetMargin', 'must be in (0, 1]');
  nonNegative('sla.surgeHalfLifeS', c.sla.surgeHalfLifeS);
  if (c.load.variant !== 'throughput' && c.load.variant !== 'latency') bad('load.variant', 'must be throughput or latency');
  positive('load.contextLength', c.load.contextLength);
  const t = c.load.thresholds;
  if (!(t.prefillQueueDown < t.prefillQueueUp)) bad('load.thresholds', 'prefillQueueDown must be below prefillQueueUp');
  if (!(t.kvDown < t.kvUp && t.kvDown >= 0 && t.kvUp <= 1)) bad('load.thresholds', 'need 0 ≤ kvDown < kvUp ≤ 1');
  return c;
}

/**
 * A JSON config (any subset of PlannerConfig; pools given are the pools planned) over the
 * defaults. Unknown top-level keys are refused so a typo is not silently ignored.
 */
export function parsePlannerConfig(raw: unknown, base: PlannerConfig = defaultPlannerConfig()): PlannerConfig {
  if (!isObject(raw)) bad('config', 'expected a JSON object');
  const known = new Set(Object.keys(base).concat(['maxWorkers', 'maxGpus']));
  for (const key of Object.keys(raw)) if (!known.has(key)) bad(key, 'unknown field');
  const c: PlannerConfig = { ...base, ...(raw as Partial<PlannerConfig>), sla: { ...base.sla }, load: { ...base.load, thresholds: { ...base.load.thresholds } } };
  if (raw['sla'] !== undefined) {
    if (!isObject(raw['sla'])) bad('sla', 'expected an object');
    c.sla = { ...base.sla, ...(raw['sla'] as object) };
  }
  if (raw['load'] !== undefined) {
    if (!isObject(raw['load'])) bad('load', 'expected an object');
    const load = raw['load'] as Partial<PlannerConfig['load']>;
    const variant = load.variant ?? base.load.variant;
    const preset = variant === 'latency' ? LATENCY_THRESHOLDS : THROUGHPUT_THRESHOLDS;
    c.load = { ...base.load, ...load, thresholds: { ...preset, ...(load.thresholds ?? {}) } };
  }
  if (raw['pools'] !== undefined) {
    if (!isObject(raw['pools'])) bad('pools', 'expected an object');
    c.pools = {};
    for (const [name, p] of Object.entries(raw['pools'])) {
      if (!isPoolName(name)) bad(`pools.${name}`, `unknown pool (known: ${POOL_NAMES.join(', ')})`);
      if (!isObject(p)) bad(`pools.${name}`, 'expected an object');
      c.pools[name] = { ...DEFAULT_POOL, ...(p as Partial<PoolBounds>) };
    }
  }
  return validatePlannerConfig(c);
}

function bad(field: string, why: string): never {
  throw new ConfigError(`planner config: ${field}: ${why}`);
}

function positive(field: string, v: unknown): void {
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) bad(field, `must be a number > 0, got ${JSON.stringify(v)}`);
}

function nonNegative(field: string, v: unknown): void {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) bad(field, `must be a number ≥ 0, got ${JSON.stringify(v)}`);
}

function nonNegativeInt(field: string, v: unknown): void {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) bad(field, `must be an integer ≥ 0, got ${JSON.stringify(v)}`);
}
