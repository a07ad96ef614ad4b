/** Public surface of workers/: what other folders may import. */
export { registerModelCommand, resolveModel } from './models/index.js';
export { registerWorkerCommand } from './process/worker-command.js';
export { registerBackendsCommand } from './process/backends-command.js';
