/**
 * `--router-cost latency`: the score of a worker is its predicted TTFT plus a weighted ITL
 * penalty, in milliseconds, from the latency estimator (latency-estimator.ts) scaled by that
 * worker's online calibration (calibration.ts):
 *
 *   ttft  = ttftRatio(worker) · (estimate.ttftMs − estimate.kvWaitMs) + itlRatio(worker) · estimate.kvWaitMs
 *   itl   = itlRatio(worker)  · estimate.itlMs
 *   cost  = ttft + itlWeight · itlRatio(worker) · estimate.itlImpactMs
 *
 * SLA targets (optional): a worker whose predicted ITL is over `itlTargetMs` (or TTFT over
 * `ttftTargetMs`) is ineligible while some other worker is within target; when none is, the
 * targets are ignored and the lowest cost wins (a target never turns traffic away on its own:
 * that is the overload policy's job).
 *
 * A KV wait is streams ending, so it scales with the worker's measured ITL, not its TTFT ratio.
 * The drain model behind it is rough (it reads the wait 2–5× short when a pool is
 * oversubscribed, against the mocker in virtual time), so KvRouter also prefers a worker with
 * room in its pool over one predicted to wait, whatever the milliseconds say (`withinTargets`).
 *
 * It also keeps, per routed request, what it predicted and when, so the first token and the
 * end of the stream calibrate the worker: measured TTFT = first token − admission; measured
 * ITL = (end − first token) / (output tokens − 1). Only requests predicted to find room in the
 * pool calibrate TTFT: the ratio is meant to capture the worker's speed, and a request that
 * waited for KV measures the queueing model's error instead (under KV pressure that error is
 * several times the speed difference, and it would make a loaded fast worker look slow). Time is an argument; entries of requests
 * never finished are dropped by `expire`.
 */
import type { InstanceId } from '../proto/wire.js';
import { LatencyCalibration, type CalibrationOptions } from './calibration.js';
import type { CostRow } from './cost.js';
import { DEFAULT_LATENCY_ESTIMATOR_OPTIONS, estimateLatency, type LatencyEstimatorOptions, type RequestLatencyView, type WorkerLatencyView } from './latency-estimator.js';
import { PolynomialPerfModel, type PerfModel } from '../perf-model/index.js';

export type RouterCostKind = 'blocks' | 'latency';
export const ROUTER_COST_KINDS: readonly RouterCostKind[] = ['blocks', 'latency'];

export interface LatencyCostConfig {
  /** The step-time model (a worker profile from `runtime profile`, or the polynomial defaults). */
  perfModel: PerfModel;
  /** Weight of the ITL penalty against TTFT (both ms). */
  itlWeight: number;
  ttftTargetMs?: number;
  itlTargetMs?: number;
  estimator: LatencyEstimatorOptions;
  calibration: Partial<CalibrationOptions>;
}

export const DEFAULT_LATENCY_COST: LatencyCostConfig = {
  perfModel: new PolynomialPerfModel(),
  itlWeight: 1,
  estimator: DEFAULT_LATENCY_ESTIMATOR_OPTIONS,
  calibration: {},
};

/** The predicted values a latency-scored cost row carries (and logs). */
/**
 * How much worse than predicted a KV wait is taken to be in the cost: the drain model reads
 * such waits 2–5× short when a pool is oversubscribed (virtual-time measurement), so a worker
 * predicted to wait is charged its wait this many times over (the prediction itself stays as
 * estimated). Such a worker used to be left out whenever any worker had room, which turned the
 * latency cost back into block counting in the middle band: a fast worker a moment from room
 * lost to a slow one with room. Now it wins when even the pessimistic wait leaves it ahead.
 */
export const KV_WAIT_PESSIMISM = 5;

export interface LatencyPrediction {
  /** Calibrated predictions, ms. */
  ttftMs: number;
  itlMs: number;
  itlImpactMs: number;
  /** Part of `ttftMs` waiting for KV blocks (calibrated), and the prompt tokens queued ahead. */
  kvWaitMs: number;
  queuedTokens: number;
  /** Calibration ratios applied (measured / model). */
  ttftRatio: number;
  itlRatio: number;
  /** Over an SLA target (ineligible while another worker is within target). */
  overTarget: boolean;
  /**
   * What the request would cost on an idle worker of the model's nominal speed (uncalibrated
   * ms, TTFT + weighted ITL impact): `idleMs` with the prefix this worker holds, `coldMs` with
   * nothing held. `cost − idleMs` is the worker's load as prefix affinity reads it (its queue,
   * its streams and its measured slowness), `coldMs − idleMs` the prefill its prefix saves.
   */
  idleMs: number;
  coldMs: number;
}

interface Pending {
  workerId: InstanceId;
  /** Uncalibrated predictions: what the calibration compares against. */
  rawTtftMs: number | undefined;
  rawItlMs: number;
  admittedAtMs: number;
  firstTokenAtMs?: number;
}

/** A finished request's prediction next to what it measured (dashboard, tests). */
export interface LatencyObservation {
  requestId: string;
  workerId: InstanceId;
  predictedTtftMs: number;
  measuredTtftMs: number;
}

export class LatencyCost {
  /** Set at construction; the perf model may be replaced once the served model is known (`setPerfModel`). */
  config: LatencyCostConfig;
  readonly calibration: LatencyCalibration;
  private readonly pending = new Map<string, Pending>();
  /** Estimator options with the learned mean output length (EWMA over finished streams). */
  private estimator: LatencyEstimatorOptions;

  constructor(config: Partial<LatencyCostConfig> = {}) {
    this.config = { ...DEFAULT_LATENCY_COST, ...config, estimator: { ...DEFAULT_LATENCY_ESTIMATOR_OPTIONS, ...config.estimator } };
    this.calibration = new LatencyCalibration(this.config.calibration);
    this.estimator = this.config.estimator;
  }

  /**
   * Predict from `perfModel` from now on (KvRouter.useModelParameters: the served model's size
   * became known), and onboard tier hits at `onboardMsPerToken` when given. Calibration ratios
   * are kept: they are measured ÷ predicted, and the next samples re-learn them.
   */
  setPerfModel(perfModel: PerfModel, onboardMsPerToken?: Readonly<Record<string, number>>): void {
    this.config = { ...this.config, perfModel };
    if (onboardMsPerToken !== undefined) {
      this.config.estimator = { ...this.config.estimator, onboardMsPerToken };
      this.estimator = { ...this.estimator, onboardMsPerToken };
    }
  }

  /** Mean output tokens of the streams seen to end (how long a KV-full worker takes to free blocks). */
  get meanOutputTokens(): number {
    return this.estimator.meanOutputTokens ?? 128;
  }

  /** Re-score one cost row (filled by `workerCost`) in milliseconds; sets `row.latency`. */
  score(row: CostRow, worker: WorkerLatencyView, req: RequestLatencyView, nowMs: number): LatencyPrediction {
    const est = estimateLatency(this.config.perfModel, worker, req, this.estimator);
    const cal = this.calibration.of(row.instanceId, nowMs);
    const kvWaitMs = cal.itlRatio * est.kvWaitMs;
    const ttftMs = cal.ttftRatio * (est.ttftMs - est.kvWaitMs) + kvWaitMs;
    const itlMs = cal.itlRatio * est.itlMs;
    const itlImpactMs = cal.itlRatio * est.itlImpactMs;
    const { ttftTargetMs, itlTargetMs } = this.config;
    const overTarget = (itlTargetMs !== undefined && itlMs > itlTargetMs) || (ttftTargetMs !== undefined && ttftMs > ttftTargetMs);
    const idleWorker: WorkerLatencyView = { queuedPrefillTokens: 0, runningSequences: 0, kvUsage: 0, ...(worker.totalBlocks !== undefined ? { totalBlocks: worker.totalBlocks, usedBlocks: 0 } : {}) };
    const idle = estimateLatency(this.config.perfModel, idleWorker, req, this.estimator);
    const cold = estimateLatency(this.config.perfModel, idleWorker, { promptTokens: req.promptTokens, cachedTokens: 0 }, this.estimator);
    const prediction: LatencyPrediction = {
      ttftMs,
      itlMs,
      itlImpactMs,
      kvWaitMs,
      queuedTokens: worker.queuedPrefillTokens,
      ttftRatio: cal.ttftRatio,
      itlRatio: cal.itlRatio,
      overTarget,
      idleMs: idle.ttftMs + this.config.itlWeight * idle.itlImpactMs,
      coldMs: cold.ttftMs + this.config.itlWeight * cold.itlImpactMs,
    };
    row.cost = ttftMs + (KV_WAIT_PESSIMISM - 1) * kvWaitMs + this.config.itlWeight * itlImpactMs;
    row.latency = prediction;
    return prediction;
  }

  /** The chosen row was booked: remember its prediction until the request reports back. */
  admitted(requestId: string, row: CostRow, nowMs: number): void {
    const p = row.latency;
    if (p === undefined) return;
    // rawTtftMs undefined: waited for KV, no TTFT sample (see the header).
    this.pending.set(requestId, { workerId: row.instanceId, rawTtftMs: p.kvWaitMs > 0 ? undefined : p.ttftMs / p.ttftRatio, rawItlMs: p.itlMs / p.itlRatio, admittedAtMs: nowMs });
  }

  /** First token: calibrates the worker's TTFT; returns the prediction next to the measurement. */
  firstToken(requestId: string, nowMs: number): LatencyObservation | undefined {
    const p = this.pending.get(requestId);
    if (p === undefined || p.firstTokenAtMs !== undefined) return undefined;
    p.firstTokenAtMs = nowMs;
    const measured = nowMs - p.admittedAtMs;
    if (p.rawTtftMs === undefined) return undefined;
    const predicted = p.rawTtftMs * this.calibration.of(p.workerId, nowMs).ttftRatio;
    this.calibration.observe(p.workerId, 'ttft', p.rawTtftMs, measured, nowMs);
    return { requestId, workerId: p.workerId, predictedTtftMs: predicted, measuredTtftMs: measured };
  }

  /** End of the stream: calibrates the worker's ITL when the output length is known. */
  finished(requestId: string, nowMs: number, outputTokens?: number): void {
    const p = this.pending.get(requestId);
    if (p === undefined) return;
    this.pending.delete(requestId);
    if (outputTokens !== undefined && outputTokens > 0) this.estimator = { ...this.estimator, meanOutputTokens: 0.9 * this.meanOutputTokens + 0.1 * outputTokens };
    if (p.firstTokenAtMs === undefined || outputTokens === undefined || outputTokens < 2) return;
    this.calibration.observe(p.workerId, 'itl', p.rawItlMs, (nowMs - p.firstTokenAtMs) / (outputTokens - 1), nowMs);
  }

  /** Forget predictions older than `maxAgeMs` (requests whose end was never reported). */
  expire(nowMs: number, maxAgeMs: number): void {
    for (const [id, p] of this.pending) {
      if (p.admittedAtMs + maxAgeMs > nowMs) break; // insertion order = admission order
      this.pending.delete(id);
    }
  }

  removeWorker(workerId: InstanceId): void {
    this.calibration.removeWorker(workerId);
  }

  get pendingCount(): number {
    return this.pending.size;
  }
}
