/** Public surface of workers/disagg: prefill and decode worker modes with real KV transfer. */
export { PrefillHandler, type PrefillHandlerDeps } from './prefill-handler.js';
export { DecodeHandler, type DecodeHandlerDeps } from './decode-handler.js';
export { KvImportService, DEFAULT_PULL_TIMEOUT_MS, type KvImportServiceOptions, type KvImportOutcome, type KvConversion } from './kv-importer.js';
export { PinnedBlocks, DEFAULT_KV_RELEASE_TIMEOUT_MS, type PinnedBlocksOptions, type PinEndReason } from './pinned-blocks.js';
export { StampedKvPool, StampingEngine, stampedLayoutName, STAMP_MAGIC } from './stamped-kv.js';
export { setupKvTransfer, setupNativeKvTransfer, kvCardFields, DEFAULT_MOCKER_KV_BYTES_PER_TOKEN, type KvTransferSetup, type KvTransferSetupOptions } from './kv-pool-setup.js';
export { DeviceKvImporter, type DeviceKvEngine, type DeviceKvImporterOptions } from './device-kv-importer.js';
export { setupDeviceKvTransfer, isDeviceKvSetup, type DeviceKvTransferSetup } from './device-kv-setup.js';
export { pullConverted, type ConvertingPull } from './converting-pull.js';
export { LayerCopyPlanner, hiddenCopyReport, type LayerRange, type LayerPlanOptions, type TimedCopy, type HiddenCopyReport } from './layer-stream.js';
export { LayerProgressBoard, PolledLayerSource, layersReadyForPass, mockerLayerHook, streamLayers, type LayerReadySource, type LayerStreamResult } from './layer-ready.js';
export { LayerProgressRegion, remoteLayerSource, LAYER_PROGRESS_LAYOUT, type RemoteLayerProgress } from './layer-progress-region.js';
