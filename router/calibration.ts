/**
 * Online calibration of the latency estimate, per worker: the ratio measured / predicted of
 * each finished request's TTFT and ITL, smoothed exponentially in log space and bounded.
 *
 *   log r ← (1 − α) · log r + α · log(clamp(measured / predicted))      r ∈ [minRatio, maxRatio]
 *
 * Log space makes 2× slow and 2× fast symmetric and keeps one outlier from dominating; the
 * bound keeps a stalled request (or a clock hiccup) from writing a worker off for good. With
 * α = 0.2 a worker that turns 2× slow reads 1.5× after 4 samples and 1.97× after 20: a slowed
 * or throttled worker is seen as slow within 20 requests. A worker with no samples reads 1.
 *
 * Evidence ages: without new samples a worker's log ratio halves every `halfLifeMs` (toward 1).
 * A worker the router stopped sending to (it looked slow) gets no new samples, so without this
 * one bad patch (a cold start, a GC pause) would keep it out of rotation for as long as the
 * others have room; with it the worker is tried again after a while, and re-measured.
 *
 * Each router replica calibrates on its own, from the requests it routed (docs/router.md says
 * why). Pure: the caller passes every sample; nothing here reads a clock.
 */
import type { InstanceId } from '../proto/wire.js';

export interface CalibrationOptions {
  /** Weight of the newest sample, 0..1. */
  alpha: number;
  minRatio: number;
  maxRatio: number;
  /** Without samples, the log ratio halves every this many ms (Infinity: never). */
  halfLifeMs: number;
}

export const DEFAULT_CALIBRATION: CalibrationOptions = { alpha: 0.2, minRatio: 0.125, maxRatio: 8, halfLifeMs: 30_000 };

export type LatencyMetric = 'ttft' | 'itl';

export interface WorkerCalibration {
  ttftRatio: number;
  itlRatio: number;
  ttftSamples: number;
  itlSamples: number;
}

interface State {
  logTtft: number;
  logItl: number;
  ttftSamples: number;
  itlSamples: number;
  /** When the last sample came (either metric). */
  atMs: number;
}

const NEUTRAL: WorkerCalibration = Object.freeze({ ttftRatio: 1, itlRatio: 1, ttftSamples: 0, itlSamples: 0 });

export class LatencyCalibration {
  private readonly workers = new Map<InstanceId, State>();
  readonly options: CalibrationOptions;

  constructor(options: Partial<CalibrationOptions> = {}) {
    this.options = { ...DEFAULT_CALIBRATION, ...options };
    if (!(this.options.alpha > 0 && this.options.alpha <= 1)) throw new RangeError('calibration alpha must be in (0, 1]');
    if (!(this.options.halfLifeMs > 0)) throw new RangeError('calibration halfLifeMs must be > 0');
    if (!(this.options.minRatio > 0 && this.options.minRatio <= 1 && this.options.maxRatio >= 1)) throw new RangeError('calibration bounds must satisfy 0 < min ≤ 1 ≤ max');
  }

  /** One finished measurement at `nowMs`; ignored when either value is not a positive finite number. */
  observe(workerId: InstanceId, metric: LatencyMetric, predictedMs: number, measuredMs: number, nowMs: number): void {
    if (!(predictedMs > 0 && measuredMs > 0 && Number.isFinite(predictedMs) && Number.isFinite(measuredMs))) return;
    const { alpha, minRatio, maxRatio } = this.options;
    const sample = Math.log(Math.min(maxRatio, Math.max(minRatio, measuredMs / predictedMs)));
    let s = this.workers.get(workerId);
    if (s === undefined) this.workers.set(workerId, (s = { logTtft: 0, logItl: 0, ttftSamples: 0, itlSamples: 0, atMs: nowMs }));
    this.age(s, nowMs);
    if (metric === 'ttft') {
      s.logTtft = (1 - alpha) * s.logTtft + alpha * sample;
      s.ttftSamples++;
    } else {
      s.logItl = (1 - alpha) * s.logItl + alpha * sample;
      s.itlSamples++;
    }
  }

  /** The worker's ratios as of `nowMs` (aged since its last sample). */
  of(workerId: InstanceId, nowMs: number): WorkerCalibration {
    const s = this.workers.get(workerId);
    if (s === undefined) return NEUTRAL;
    const keep = this.keep(s, nowMs);
    return { ttftRatio: Math.exp(s.logTtft * keep), itlRatio: Math.exp(s.logItl * keep), ttftSamples: s.ttftSamples, itlSamples: s.itlSamples };
  }

  private age(s: State, nowMs: number): void {
    const keep = this.keep(s, nowMs);
    s.logTtft *= keep;
    s.logItl *= keep;
    s.atMs = Math.max(s.atMs, nowMs);
  }

  /** The share of the log ratio left after the time since the last sample. */
  private keep(s: State, nowMs: number): number {
    const idle = nowMs - s.atMs;
    return idle > 0 ? 0.5 ** (idle / this.options.halfLifeMs) : 1;
  }

  removeWorker(workerId: InstanceId): void {
    this.workers.delete(workerId);
  }
}
