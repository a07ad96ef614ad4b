/** Public surface of runtime/discovery. Everything else in this folder is internal. */
export type { Discovery, DiscoveryEvent, DiscoveryKind, DiscoveryOptions, DiscoveryRecord, WatchHandle } from './discovery.js';
export {
  DEFAULT_NAMESPACE,
  formatInstanceId,
  instanceKey,
  instancePrefix,
  modelKey,
  modelPrefix,
  parseInstanceId,
  parseModelKey,
  type ModelKeyParts,
} from './keys.js';
export { ModelCardFeed, type CardEvent, type CardFilter, type CardListener, type CardView, type LiveCard } from './model-card-feed.js';
export { createDiscovery, type CreateDiscoveryOptions } from './create-discovery.js';
export { MemoryDiscovery, MemoryDiscoveryStore, type MemoryDiscoveryOptions } from './memory-discovery.js';
export { FileDiscovery, DEFAULT_FILE_DIRECTORY, type FileDiscoveryOptions } from './file-discovery.js';
export { EtcdDiscovery, DEFAULT_ETCD_ENDPOINT, endpointsFromEnv, type EtcdDiscoveryOptions } from './etcd-discovery.js';
export { DiscoveryClosedError, LeaseLostError } from './errors.js';
export { randomInstanceId } from './instance-id.js';
