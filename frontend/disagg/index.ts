/** Public surface of the frontend's prefill router (disaggregated prefill/decode). */
export { decideDisagg, uncachedTokens, DEFAULT_DISAGG_POLICY, type DisaggDecision, type DisaggInputs, type DisaggPolicyConfig, type DisaggReason } from './policy.js';
export { PrefillPool, type PrefillWorkers } from './prefill-pool.js';
export { PrefillRouter, hasOverlapSource, type DisaggRoute, type PrefillRouterOptions, type PrefixOverlapSource, type RouteOutcome } from './prefill-router.js';
export { streamDisaggregated, type DisaggStreamPlan, type DisaggTrace } from './disagg-stream.js';
export { Disaggregator, type DisaggPrepared, type DisaggStreamArgs } from './disaggregator.js';
export { DisaggMetrics, DISAGG_PATHS, type DisaggPath } from './metrics.js';
export { KvPrefillSelector } from './kv-prefill-selector.js';
export { DECODE_WORKER_HEADER, PREFILL_WORKER_HEADER, disaggHeaders, disaggNvext, type DisaggNvext } from './response.js';
export { startDisaggregation, type DisaggDeps, type DisaggHandle, type DisaggOptions } from './start-disaggregation.js';
