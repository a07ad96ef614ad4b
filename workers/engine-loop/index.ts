export { EngineLoop, seedFromRequestId } from './engine-loop.js';
export type { EngineLoopConfig, EngineLoopSinks, EngineLoopStats, GenerateOptions, KvImporter, KvImportJob } from './engine-loop.js';
export { OutputQueue } from './output-queue.js';
