/** The pure policy core: config, observations in, decisions out. */
export { DEFAULT_POOL, LATENCY_THRESHOLDS, THROUGHPUT_THRESHOLDS, defaultPlannerConfig, parsePlannerConfig, validatePlannerConfig, type LoadThresholds, type PlannerConfig, type PoolBounds } from './config.js';
export type { ObservationSource, PoolConnector } from './connector.js';
export { applyBudget, constrainPool, freshPoolState, type BudgetEntry, type Constrained, type PoolState } from './constraints.js';
export { CORRECTION_BOUNDS, CorrectionFactors } from './corrections.js';
export { RULES, type Decision, type Limit, type Prediction, type Rule } from './decision.js';
export { loadDecision, prefillQueueLoad, type LoadDecision } from './load-policy.js';
export { POOL_NAMES, isPoolName, type Observation, type PoolName, type PoolObservation, type TrafficObservation } from './observation.js';
export { Planner, backlogReplicas } from './planner.js';
export * from './sla-sizing.js';
