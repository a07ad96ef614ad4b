/** Public surface of planner/: predictors, the pure policy core, the simulator, the command. */
export * from './predictors/index.js';
export * from './policy/index.js';
export * from './simulator/index.js';
export { LIVE_NOT_BUILT, buildConfig, registerPlannerCommand } from './command.js';
