/** Public surface of workers/kv-transfer: the transfer agent, its descriptor and counters. */
export type { KvTransferAgent, KvPool, PoolSpec, PullOptions, PullResult } from './transfer-agent.js';
export { UcxTransferAgent, type UcxTransferAgentOptions } from './ucx-transfer-agent.js';
export { checkDescriptor, type KvTransferDescriptor } from './descriptor.js';
export { blockRanges, rangeBytes, rangeCount, RANGE_STRIDE } from './ranges.js';
export {
  KvTransferCounters,
  TRANSFER_SECONDS_BUCKETS,
  type KvTransferCountersSnapshot,
  type TransferEvent,
} from './metrics.js';
export { KvTransferError, UcxUnavailableError, fromAddonError } from './errors.js';
export { isUcxBuilt, loadUcxAddon, ucxAddonCandidates, type RawAgentStats } from './addon.js';
