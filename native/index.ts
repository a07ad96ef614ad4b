/** Public surface of native/: the addon loader, its flat step layout, and typed errors. */
export {
  loadAddon,
  isNativeBuilt,
  addonCandidates,
  SEQ_META_STRIDE,
  SeqMeta,
  SAMPLING_STRIDE,
  SamplingField,
  SPEC_META_STRIDE,
  SpecMeta,
  type LoadSpeculativeOptions,
  type NativeAddon,
  type RawEngineHandle,
  type RawEngineInfo,
  type RawKvLayout,
  type RawKvCopyLayout,
  type RawStepResult,
  type LoadEngineOptions,
  type BackendStatus,
  type KvPoolDtype,
} from './lib/binding.js';
export { NativeEngineError, NativeUnavailableError, fromNativeError } from './lib/errors.js';
