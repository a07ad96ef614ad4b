export { EngineLoop, seedFromRequestId } from './engine-loop.js';
export type { EngineLoopConfig, EngineLoopSinks, EngineLoopStats, GenerateOptions, KvImporter, KvImportJob } from './types.js';
export { OutputQueue } from './output-queue.js';
export { StructuredDecoding } from './structured-decoding.js';
export type { AdvanceOutcome, GrammarProvider, StructuredStats } from './structured-decoding.js';
