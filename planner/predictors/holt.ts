/**
 * Holt's linear exponential smoothing: a level and a trend, each an exponentially weighted
 * average. Forecast = level + trend, so a ramp is followed without lag once the trend is learnt.
 *
 *   level' = α·x + (1 − α)·(level + trend)
 *   trend' = β·(level' − level) + (1 − β)·trend
 *
 * Worked: α = 0.5, β = 0.3, after 10 → level 10, trend 0; observe 20 → level 15, trend 1.5,
 * forecast 16.5.
 */
import type { Predictor } from './predictor.js';

export class HoltPredictor implements Predictor {
  readonly name = 'holt' as const;
  private level: number | undefined;
  private trend = 0;

  constructor(
    readonly alpha = 0.5,
    readonly beta = 0.3,
  ) {}

  observe(value: number): void {
    if (this.level === undefined) {
      this.level = value;
      return;
    }
    const prev = this.level;
    this.level = this.alpha * value + (1 - this.alpha) * (prev + this.trend);
    this.trend = this.beta * (this.level - prev) + (1 - this.beta) * this.trend;
  }

  predict(): number | undefined {
    return this.level === undefined ? undefined : this.level + this.trend;
  }
}
