/**
 * A one-step-ahead forecaster of one series (request rate, ISL or OSL), fed once per planner
 * interval. Pure: no clock; the caller decides what an interval is.
 */
export interface Predictor {
  readonly name: PredictorName;
  /** Feed the value measured over the interval that just ended. */
  observe(value: number): void;
  /** Forecast for the next interval; undefined until the first observation. */
  predict(): number | undefined;
}

export const PREDICTOR_NAMES = ['constant', 'moving-window', 'holt', 'kalman'] as const;
export type PredictorName = (typeof PREDICTOR_NAMES)[number];

export function isPredictorName(v: unknown): v is PredictorName {
  return typeof v === 'string' && (PREDICTOR_NAMES as readonly string[]).includes(v);
}
