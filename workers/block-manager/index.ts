export { BlockManager, NO_HIT } from './block-manager.js';
export type { BlockManagerConfig, PrefixHit } from './block-manager.js';
export { KvEventLog } from './kv-event-log.js';
export type { KvDump, KvEventLogConfig, KvReplayResult } from './kv-event-log.js';
export { FreeBlockQueue } from './free-block-queue.js';
