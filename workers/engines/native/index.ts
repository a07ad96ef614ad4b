/** Public surface of the native engine adapter. */
export {
  NativeEngine,
  createNativeEngine,
  describeNativeKvLayout,
  nativeKvLayoutName,
  DEFAULT_KV_MEMORY_BYTES,
  isGpuDevice,
  type NativeEngineOptions,
  type NativeModelInfo,
  type NativeKvLayout,
  type StepTiming,
} from './native-engine.js';
export { BatchMarshal, type MarshalledBatch } from './batch-marshal.js';
