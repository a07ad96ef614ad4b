export { BlockManager, NO_HIT } from './block-manager.js';
export type { BlockManagerConfig, PrefixHit } from './block-manager.js';
export { KvEventLog } from './kv-event-log.js';
export type { KvDump, KvEventLogConfig, KvReplayResult } from './kv-event-log.js';
export { FreeBlockQueue } from './free-block-queue.js';
export { TierIndex } from './tier-index.js';
export type { TierBlock, TierInsert } from './tier-index.js';
export { KvTierPolicy, onboardCount } from './kv-tier-policy.js';
export type { EvictedBlock, KvTierCounters, KvTierName, KvTierPolicyConfig, OnboardCosts, OnboardSource, TierOp } from './kv-tier-policy.js';
