/** Public surface of planner/: predictors, the pure policy core, the simulator, the command. */
export * from './predictors/index.js';
export * from './policy/index.js';
export * from './simulator/index.js';
export { buildConfig, loadPlannerPerf, loadPlannerProfile, plannerPerf, plannerPerfSource, readPlannerConfigFile, registerPlannerCommand, type PlannerProfile } from './command.js';
export * from './connectors/index.js';
export * from './live/index.js';
export { registerProfileCommand, buildProfile, planSweep, renderProfileHtml, type ProfileDeps, type ProfileReport } from './profiler/index.js';
