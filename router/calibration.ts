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
 * Each router replica calibrates on its own, from the requests it routed (docs/router.md says
 * why). Pure: the caller passes every sample; nothing here reads a clock.
 */
import type { InstanceId } from '../proto/wire.js';

export interface CalibrationOptions {
  /** Weight of the newest sample, 0..1. */
  alpha: number;
  minRatio: number;
  maxRatio: number;
}

export const DEFAULT_CALIBRATION: CalibrationOptions = { alpha: 0.2, minRatio: 0.125, maxRatio: 8 };

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
}

const NEUTRAL: WorkerCalibration = Object.freeze({ ttftRatio: 1, itlRatio: 1, ttftSamples: 0, itlSamples: 0 });

export class LatencyCalibration {
  private readonly workers = new Map<InstanceId, State>();
  readonly options: CalibrationOptions;

  constructor(options: Partial<CalibrationOptions> = {}) {
    this.options = { ...DEFAULT_CALIBRATION, ...options };
    if (!(this.options.alpha > 0 && this.options.alpha <= 1)) throw new RangeError('calibration alpha must be in (0, 1]');
    if (!(this.options.minRatio > 0 && this.options.minRatio <= 1 && this.options.maxRatio >= 1)) throw new RangeError('calibration bounds must satisfy 0 < min ≤ 1 ≤ max');
  }

  /** One finished measurement; ignored when either value is not a positive finite number. */
  observe(workerId: InstanceId, metric: LatencyMetric, predictedMs: number, measuredMs: number): void {
    if (!(predictedMs > 0 && measuredMs > 0 && Number.isFinite(predictedMs) && Number.isFinite(measuredMs))) return;
    const { alpha, minRatio, maxRatio } = this.options;
    const sample = Math.log(Math.min(maxRatio, Math.max(minRatio, measuredMs / predictedMs)));
    let s = this.workers.get(workerId);
    if (s === undefined) this.workers.set(workerId, (s = { logTtft: 0, logItl: 0, ttftSamples: 0, itlSamples: 0 }));
    if (metric === 'ttft') {
      s.logTtft = (1 - alpha) * s.logTtft + alpha * sample;
      s.ttftSamples++;
    } else {
      s.logItl = (1 - alpha) * s.logItl + alpha * sample;
      s.itlSamples++;
    }
  }

  of(workerId: InstanceId): WorkerCalibration {
    const s = this.workers.get(workerId);
    if (s === undefined) return NEUTRAL;
    return { ttftRatio: Math.exp(s.logTtft), itlRatio: Math.exp(s.logItl), ttftSamples: s.ttftSamples, itlSamples: s.itlSamples };
  }

  removeWorker(workerId: InstanceId): void {
    this.workers.delete(workerId);
  }
}
