/** Public surface of workers/: what other folders may import. */
export { parameterCounts, readModelConfig, registerModelCommand, resolveModel } from './models/index.js';
export { registerWorkerCommand } from './process/worker-command.js';
export { checkWorkerFlags, WORKER_FLAG_RULES, type WorkerRuleFlags } from './process/worker-flag-rules.js';
export { registerBackendsCommand } from './process/backends-command.js';
