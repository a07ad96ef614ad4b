/** Public surface of the distributed runtime. */
export * from './config.js';
export * from './distributed-runtime.js';
export * from './endpoint-client.js';
export * from './errors.js';
export { SeededRandom, type Rng } from './random.js';
export * from './logging.js';
export * from './runtime-options.js';
export * from './status-server.js';
export * from './prom-text.js';
export * from './discovery/discovery.js';
export * from './discovery/keys.js';
export * from './discovery/model-card-feed.js';
export * from './event-plane/event-plane.js';
export * from './request-plane/types.js';
export { listenOn } from './listen.js';
export { checkFlagRules, type FlagRule } from './flag-rules.js';
export { DEFAULT_RESTART_POLICY, type RestartPolicy, StopSignals, Supervisor, recordWithMsg, runtimeCommand, watchParentLink } from './supervisor/index.js';
export { EXIT_CODES, type ExitCode } from './exit-codes.js';
// For tools that talk to one worker directly (runtime profile --endpoint).
export { createDiscovery, type CreateDiscoveryOptions } from './discovery/create-discovery.js';
export { GrpcRequestPlaneClient, type GrpcClientOptions } from './request-plane/grpc-client.js';
export { threadEntry, type ThreadEntry } from './thread-entry.js';
export { LruMap, type LruOptions } from './lru.js';
export { Semaphore, type Release } from './semaphore.js';
