/** Public surface of the load generator. Everything else in this folder is internal. */
export { runBench, writeReportFiles, type BenchResult } from './bench.js';
export { registerBenchCommand, parseGoodput } from './command.js';
export { compareReports, readReport, renderComparison, type CompareRow } from './compare.js';
export { renderConsoleReport } from './console-table.js';
export { renderHtmlReport } from './html-report.js';
export { DEFAULT_SYNTHETIC_TRACE, formatTrace, makeSyntheticTrace, writeSyntheticTrace, type SyntheticTraceOptions } from './mooncake-trace.js';
export { resolveBenchOptions, WORKLOAD_DEFAULTS, type BenchOptions, type ProgressMode } from './options.js';
export { REPORT_SCHEMA, REPORT_VERSION, type BenchReport } from './report.js';
export type { GoodputSlo, Summary, Timeline, Cdf } from './aggregate.js';
export type { Stats } from './stats.js';
export { loadTokenSpace, BuiltinTokenSpace, type TokenSpace } from './token-space.js';
