/**
 * Mean of the last `window` values. Smooths noise, but lags a trend by (window − 1) / 2
 * intervals: on a ramp it always forecasts low.
 */
import type { Predictor } from './predictor.js';

export class MovingWindowPredictor implements Predictor {
  readonly name = 'moving-window' as const;
  private readonly values: number[] = [];
  private sum = 0;

  constructor(readonly window = 6) {}

  observe(value: number): void {
    this.values.push(value);
    this.sum += value;
    if (this.values.length > this.window) this.sum -= this.values.shift()!;
  }

  predict(): number | undefined {
    return this.values.length === 0 ? undefined : this.sum / this.values.length;
  }
}
