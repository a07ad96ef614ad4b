/** Predictors by name: one per series, chosen per run (`--predictor`). */
import { ConstantPredictor } from './constant.js';
import { HoltPredictor } from './holt.js';
import { KalmanPredictor } from './kalman.js';
import { MovingWindowPredictor } from './moving-window.js';
import type { Predictor, PredictorName } from './predictor.js';

export { ConstantPredictor, HoltPredictor, KalmanPredictor, MovingWindowPredictor };
export { DEFAULT_KALMAN, type KalmanOptions } from './kalman.js';
export { PREDICTOR_NAMES, isPredictorName, type Predictor, type PredictorName } from './predictor.js';

export function makePredictor(name: PredictorName): Predictor {
  switch (name) {
    case 'constant':
      return new ConstantPredictor();
    case 'moving-window':
      return new MovingWindowPredictor();
    case 'holt':
      return new HoltPredictor();
    case 'kalman':
      return new KalmanPredictor();
  }
}
