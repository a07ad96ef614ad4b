/**
 * A Kalman filter on level + trend (the local linear trend model) with noise that adapts to the
 * series and a robust update for bursts. Chosen over Holt-Winters because a live planner ticks
 * every 10–60 s, so a daily season is 1,440–8,640 intervals: Holt-Winters would need a day of
 * history before it helped, and a fixed period breaks on weekends and holidays. The trend state
 * already follows the slow diurnal swing; what Holt cannot do is tell a one-interval burst from
 * a real shift, and that is what the filter adds:
 *
 *   state x = [level, trend], x⁻ = F·x with F = [[1, 1], [0, 1]], P⁻ = F·P·Fᵀ + Q, Q = R·diag(qLevel, qTrend)
 *   innovation y = z − level⁻, S = P⁻₀₀ + R, normalized nis = y² / S
 *   - nis ≤ k² (k = 3): ordinary update with gain K = P⁻·Hᵀ / S; R learns from y² − P⁻₀₀.
 *   - an isolated outlier (nis > k²): the update uses R·nis/k², so the gain shrinks and a
 *     one-interval spike moves the level only as much as a 3σ value would (Huber weighting).
 *   - `confirm` outliers in a row on the same side: a level shift. P⁻₀₀ grows by y², the gain
 *     goes to ~1 and the filter jumps to the new level instead of crawling towards it.
 *
 * Q is proportional to R, so the filter is scale-free: a series in req/s and one in tokens get
 * the same gains. Forecast = level + trend.
 */
import type { Predictor } from './predictor.js';

export interface KalmanOptions {
  /** Process noise of the level, as a fraction of measurement noise. */
  qLevel: number;
  /** Process noise of the trend, as a fraction of measurement noise. */
  qTrend: number;
  /** Outlier gate in standard deviations of the innovation. */
  gate: number;
  /** Consecutive same-side outliers that count as a level shift. */
  confirm: number;
  /** Learning rate of the measurement noise R. */
  noiseRate: number;
}

export const DEFAULT_KALMAN: KalmanOptions = { qLevel: 0.3, qTrend: 0.02, gate: 3, confirm: 2, noiseRate: 0.1 };

export class KalmanPredictor implements Predictor {
  readonly name = 'kalman' as const;
  private readonly o: KalmanOptions;
  private level: number | undefined;
  private trend = 0;
  // covariance P = [[p00, p01], [p01, p11]]
  private p00 = 0;
  private p01 = 0;
  private p11 = 0;
  private r = 0;
  private outliers = 0;
  private outlierSign = 0;

  constructor(options: Partial<KalmanOptions> = {}) {
    this.o = { ...DEFAULT_KALMAN, ...options };
  }

  observe(z: number): void {
    if (this.level === undefined) {
      this.level = z;
      // Until the series shows its noise, assume 10% of the first value (plus a floor for 0).
      this.r = (0.1 * Math.abs(z)) ** 2 + 1e-6;
      this.p00 = this.r;
      this.p11 = this.r;
      return;
    }
    const { qLevel, qTrend, gate, confirm, noiseRate } = this.o;
    // predict
    const l = this.level + this.trend;
    let a = this.p00 + 2 * this.p01 + this.p11 + this.r * qLevel;
    const c = this.p01 + this.p11;
    const d = this.p11 + this.r * qTrend;
    // gate
    const y = z - l;
    const nis = (y * y) / (a + this.r);
    let rEff = this.r;
    if (nis > gate * gate) {
      const sign = Math.sign(y);
      this.outliers = sign === this.outlierSign ? this.outliers + 1 : 1;
      this.outlierSign = sign;
      if (this.outliers >= confirm) {
        a += y * y; // level shift: trust the measurement
        this.outliers = 0;
      } else {
        rEff = (this.r * nis) / (gate * gate); // burst: down-weight
      }
    } else {
      this.outliers = 0;
      this.outlierSign = 0;
      const floor = 1e-12 * (1 + z * z);
      this.r = Math.max(floor, (1 - noiseRate) * this.r + noiseRate * Math.max(y * y - a, 0.1 * this.r));
    }
    // update
    const s = a + rEff;
    const k0 = a / s;
    const k1 = c / s;
    this.level = l + k0 * y;
    this.trend = this.trend + k1 * y;
    this.p00 = (1 - k0) * a;
    this.p01 = (1 - k0) * c;
    this.p11 = d - k1 * c;
  }

  predict(): number | undefined {
    return this.level === undefined ? undefined : this.level + this.trend;
  }
}
