/** Public surface of the mocker engine. The step-time model it uses lives in perf-model/. */
export { MockerEngine, MOCKER_EOS_SEED_BASE } from './mocker-engine.js';
export type { MockerConfig } from './mocker-engine.js';
export { mockLogprob, mockTokenAt, tokenHash } from './tokens.js';
