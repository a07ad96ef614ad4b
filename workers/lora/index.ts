/** Public surface of workers/lora: PEFT adapters as data, tiny random adapters, merging (tests). */
export {
  readPeftAdapter,
  LoraAdapterError,
  LORA_TARGET_MODULES,
  DEFAULT_MAX_LORA_RANK,
  type LoraAdapterSpec,
  type LoraTargetModule,
} from './peft-adapter.js';
export { makeTinyLora, loraTargetDims, loraTensorName, type MakeTinyLoraOptions, type LoraModelDims } from './make-tiny-lora.js';
export { mergeLoraIntoModel } from './merge-adapter.js';
export { LoraRegistry, DEFAULT_MAX_CPU_LORAS, DEFAULT_MAX_LORAS, type LoraEngine, type LoraRegistryOptions, type ResidentLora, type AcquiredLora } from './lora-registry.js';
export { cardLoras, loadStartupAdapters, loraAdminHandler, type LoraAdminDeps } from './lora-admin.js';
