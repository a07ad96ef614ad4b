/** Public surface of workers/embedding: the embedding worker (`--task embed`) and its parts. */
export { startEmbeddingWorker, type EmbeddingWorkerOptions, type RunningEmbeddingWorker } from './embedding-worker.js';
export { EmbedBatcher, type EmbedBatcherStats } from './embed-batcher.js';
export { MockEmbedder, NativeEmbedder, type Embedder } from './embedder.js';
