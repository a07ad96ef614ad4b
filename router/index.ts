/** Public surface of the router core. Adapters import from here only. */
export * from './hashing.js';
export { BlockHasher } from './block-hasher.js';
export * from './indexer.js';
export { WorkerSlots } from './worker-slots.js';
export { RadixIndexer, type IndexAnomalies } from './radix-indexer.js';
export { ApproxIndexer, type ApproxIndexerOptions } from './approx-indexer.js';
export * from './recovery-protocol.js';
export * from './event-sequencer.js';
export * from './active-sequences.js';
export * from './router-sync.js';
export * from './cost.js';
export * from './overload.js';
export * from './selector.js';
export type { Rng } from '../runtime/random.js';
export * from './kv-router.js';
export * from './errors.js';
export * from './tier-index.js';
