/** Public surface of perf-model/: the step-time model the mocker and the planner share. */
export { DECODE_FLOOR_MS, clamp01, stepTimeMs, type PerfModel, type StepShape } from './perf-model.js';
export { PolynomialPerfModel } from './polynomial.js';
export { InterpolatedPerfModel, interp } from './interpolated.js';
export { PERF_PROFILE_VERSION, parsePerfProfile, perfModelFromProfile, type DecodeProfile, type PerfProfile } from './profile.js';
export { loadPerfProfile } from './profile-file.js';
export { PerfProfileError } from './errors.js';
export { NATIVE_CPU_LORA_COST, loraStepFactor, type LoraCost } from './lora-cost.js';
export { activeParamsPerfModel, activeShare, decodeShare, stepTimeModel, type ParameterCounts } from './active-params.js';
export { verifyStepMs } from './speculative.js';
