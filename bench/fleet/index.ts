/** Public surface of the bench fleet helpers: start and stop a local fleet for a benchmark. */
export { startFleet, RUNTIME_BIN, type Fleet, type FleetOptions, type FleetWorker, type FleetMode, type WorkerRoleName } from './fleet.js';
export { machineLoad, type MachineLoad } from './machine.js';
export { scrapeWorker, snapshotWorkers, spreadOf, type WorkerCounters } from './worker-counters.js';
export { sourceLauncher } from './source-launcher.js';
