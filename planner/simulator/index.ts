/** The fleet simulator: binned traces, the fluid pool model, the replay loop and the comparison. */
export { compareProvisioning, formatComparison, plannerLabel, type Comparison } from './compare.js';
export { FleetModel, type TickInput, type TickOutput } from './fleet-model.js';
export { simulate, slaSizing, type SimOptions, type SimPolicy, type SimReport, type TimelinePoint } from './simulate.js';
export { DEFAULT_SYNTHETIC, SYNTHETIC_SHAPES, syntheticTrace, type SyntheticShape, type SyntheticTraceOptions } from './synthetic.js';
export { readMooncakeTrace, readTraceBins } from './trace-file.js';
export { binTrace, emptyBins, parseMooncakeTrace, summarizeTrace, type TraceBins, type TraceEntry, type TraceSummary } from './trace.js';
