export { Scheduler } from './scheduler.js';
export { SCHEDULER_DEFAULTS } from './types.js';
export { MAX_DEFERRED_PER_STEP, SharedPrefillGate } from './shared-prefill.js';
export type {
  AddSequenceResult,
  CompleteTransferResult,
  KvImportStart,
  KvOnboardStart,
  FinishedSequence,
  SchedulePlan,
  SchedulerConfig,
  SchedulerLoad,
  SequenceOutput,
  StepOutcome,
  Usage,
} from './types.js';
