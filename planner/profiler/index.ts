/** Public surface of planner/profiler/: `runtime profile` and its pure parts. */
export { registerProfileCommand, formatSummary, type ProfileDeps, type ProfileFlags } from './command.js';
export { planSweep, planSize, KV_FILL, type SweepPlan, type SweepOptions, type WorkerLimits, type PrefillPoint, type DecodePoint } from './sweep.js';
export { WorkerProber, decodeItl, median, type ProfileTarget, type PrefillMeasurement, type DecodeMeasurement } from './measure.js';
export { buildProfile, decodeGrid, type ProfileReport, type ProfiledWorker } from './profile-build.js';
export { renderProfileHtml, renderChart, type ChartSpec, type Series } from './html-report.js';
export { ProgressBar, progressLine, type ProgressSink } from './progress.js';
export { launchWorker, connectWorker, type ResolvedWorker } from './target.js';
