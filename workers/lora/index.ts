/** Public surface of workers/lora: PEFT adapters as data, tiny random adapters, merging (tests). */
export {
  readPeftAdapter,
  LoraAdapterError,
  LORA_TARGET_MODULES,
  DEFAULT_MAX_LORA_RANK,
  DEFAULT_MAX_LORA_BYTES,
  type LoraAdapterSpec,
  type LoraTargetModule,
  type LoraRefusal,
  type ReadPeftAdapterOptions,
} from './peft-adapter.js';
export { UNREADABLE_ADAPTER, OUTSIDE_ROOT } from './adapter-files.js';
export { loraTargetDims, loraTensorName, type LoraModelDims } from './lora-dims.js';
export { makeTinyLora, reshapeModelConfig, type MakeTinyLoraOptions } from './make-tiny-lora.js';
export { mergeLoraIntoModel } from './merge-adapter.js';
export {
  LoraRegistry,
  DEFAULT_MAX_CPU_LORAS,
  DEFAULT_MAX_LORAS,
  DEFAULT_MAX_LORA_LOADS,
  type LoraEngine,
  type LoraRegistryOptions,
  type ResidentLora,
  type AcquiredLora,
} from './lora-registry.js';
export { cardLoras, loadStartupAdapters, loraAdminHandler, type LoraAdminDeps } from './lora-admin.js';
