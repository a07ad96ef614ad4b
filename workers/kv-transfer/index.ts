/** Public surface of workers/kv-transfer: the transfer agent, its descriptor and counters. */
export type { KvTransferAgent, KvPool, PoolSpec, PullOptions, PullResult } from './transfer-agent.js';
export { UcxTransferAgent, type UcxTransferAgentOptions } from './ucx-transfer-agent.js';
export { checkDescriptor, type KvTransferDescriptor } from './descriptor.js';
export { blockRanges, blockSliceRanges, rangeBytes, rangeCount, RANGE_STRIDE } from './ranges.js';
export {
  KvTransferCounters,
  TRANSFER_SECONDS_BUCKETS,
  type KvTransferCountersSnapshot,
  type TransferEvent,
} from './metrics.js';
export { KvTransferError, UcxUnavailableError, fromAddonError } from './errors.js';
export { isUcxBuilt, loadUcxAddon, ucxAddonCandidates, type RawAgentStats } from './addon.js';
export {
  BLOCK_MAJOR_V1,
  BLOCK_MAJOR_V1_NAME,
  KV_DTYPES,
  blockBytes as layoutBlockBytes,
  bytesPerToken as layoutBytesPerToken,
  compareLayouts,
  dtypeBytes,
  formatLayoutName,
  layerBytes,
  layoutFromName,
  parseLayoutDescriptor,
  peerLayout,
  requireConvertible,
  tokenElems,
  type KvDtype,
  type KvLayoutDescriptor,
  type LayoutCompatibility,
  type LayoutParse,
} from './layout-descriptor.js';
export { bf16BitsToF32, blocksCovering, convertTokens, f32BitsToBf16, type BlockSpan } from './block-convert.js';
export { KV_TRANSPORTS, chooseTransport, legacyPlacement, parsePlacement, sameNode, servableTransports, type KvPlacement, type KvTransport, type TransportChoice } from './transport-choice.js';
export { localPlacement, readBootId, type PlacementInput } from './placement.js';
