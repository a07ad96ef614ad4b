/** Public surface of workers/models: tiny model generation and model-directory reading. */
export { makeTinyModel, type MakeTinyModelOptions, type TinyModelInfo } from './make-tiny.js';
export { resolveModel, tinyModelDir } from './resolve-model.js';
export { registerModelCommand } from './command.js';
export { TINY_ARCHS, TINY_VOCAB_SIZE, type TinyArch } from './tiny-tokenizer.js';
export { TINY_DIMS, type TinyDims } from './tiny-arch.js';
export {
  readModelConfig,
  parseModelConfig,
  kvBytesPerToken,
  parameterCounts,
  DEFAULT_KV_BLOCK_SIZE,
  type ModelConfig,
  type MoeShape,
  type RopeScaling,
} from './model-config.js';
export {
  encodeSafetensors,
  parseSafetensorsHeader,
  readSafetensorsHeader,
  SafetensorsFile,
  numel,
  type TensorData,
  type TensorInfo,
  type SafetensorsHeader,
} from './safetensors.js';
export {
  f32ToBf16Bits,
  bf16BitsToF32,
  encodeBf16,
  encodeWeights,
  WEIGHT_DTYPE_INFO,
  type WeightDtype,
  type SafetensorsDtype,
} from './dtype.js';
export { ModelFormatError } from './errors.js';
export { FP8_FORMATS, e4m3ToF32, f32ToE4m3, fp8QuantizationConfig, quantizeWeight, type Fp8Format } from './fp8.js';
export { readEmbeddingConfig, writeSentenceTransformersFiles, type EmbeddingConfig } from './embedding-config.js';
