export { MockerEngine, MOCKER_EOS_SEED_BASE } from './mocker-engine.js';
export type { MockerConfig } from './mocker-engine.js';
export {
  DECODE_FLOOR_MS,
  InterpolatedPerfModel,
  PolynomialPerfModel,
  interp,
  perfModelFromProfile,
  stepTimeMs,
} from './perf-model.js';
export type { PerfModel, PerfProfile, StepShape } from './perf-model.js';
export { loadPerfProfile } from './profile-file.js';
export { mockLogprob, mockTokenAt, tokenHash } from './tokens.js';
