/** Public surface of the native engine adapter. */
export {
  NativeEngine,
  createNativeEngine,
  DEFAULT_KV_MEMORY_BYTES,
  type NativeEngineOptions,
  type NativeModelInfo,
  type StepTiming,
} from './native-engine.js';
export { BatchMarshal, type MarshalledBatch } from './batch-marshal.js';
