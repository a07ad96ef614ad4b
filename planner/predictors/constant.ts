/** The naive forecast: next interval = last interval. The baseline every other one must beat. */
import type { Predictor } from './predictor.js';

export class ConstantPredictor implements Predictor {
  readonly name = 'constant' as const;
  private last: number | undefined;

  observe(value: number): void {
    this.last = value;
  }

  predict(): number | undefined {
    return this.last;
  }
}
