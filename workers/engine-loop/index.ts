export { EngineLoop, seedFromRequestId } from './engine-loop.js';
export type { EngineLoopConfig, EngineLoopSinks, EngineLoopStats } from './engine-loop.js';
export { OutputQueue } from './output-queue.js';
