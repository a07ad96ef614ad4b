/** Public surface of workers/speculative/: the draft policy, its inputs, and the worker's flags. */
export { planDrafts, draftsCanPay, type DraftOffer, type DraftPlan, type DraftPlanInput } from './draft-policy.js';
export { AcceptanceModel, ACCEPTANCE_DEFAULTS, type AcceptanceOptions, type SequenceRecord } from './acceptance.js';
export { MeasuredStepCost, PerfModelStepCost, costBucket, type StepCostModel } from './step-cost.js';
export { Speculator, type SpeculatorConfig, type DraftingSequence } from './speculator.js';
export { SpecCounters, type SpecTotals } from './spec-counters.js';
export {
  SPECULATIVE_METHODS,
  MAX_SPECULATIVE_TOKENS,
  DEFAULT_SPECULATIVE_TOKENS,
  DEFAULT_PROMPT_LOOKUP,
  DEFAULT_MOCKER_SPEC_ACCEPTANCE,
  speculativeOptions,
  nativeSpeculative,
  type SpeculativeMethod,
  type SpeculativeOptions,
  type SpeculativeFlags,
} from './spec-options.js';
