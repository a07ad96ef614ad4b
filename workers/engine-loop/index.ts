export { EngineLoop, seedFromRequestId } from './engine-loop.js';
export type { EngineLoopConfig, EngineLoopSinks, EngineLoopStats, GenerateOptions, KvImporter, KvImportJob } from './engine-loop.js';
export { OutputQueue } from './output-queue.js';
export { StructuredDecoding } from './structured-decoding.js';
export type { AdvanceOutcome, GrammarProvider, StructuredStats } from './structured-decoding.js';
