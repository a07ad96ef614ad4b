/**
 * The worker's engine phase: the engine for `--engine mocker | native`, and for
 * `--mode prefill | decode` the UCX transfer agent with the KV pool registered
 * (workers/disagg/). A native engine is loaded straight into the agent's allocated pool, so
 * peers read it with one memcpy over shared memory and the pool never exists twice.
 *
 *   agg                      engine
 *   native on a device       setupDeviceKvTransfer: CUDA IPC (SIMT: shared memory) to same-node peers, staged otherwise
 *   native on the CPU        setupNativeKvTransfer: the engine loads into the agent's pool
 *   mocker                   setupKvTransfer over the mocker's host pool
 *
 * Layer-wise streaming on a prefill worker (host pool, or a device pool: its engine's live
 * layer counter) wraps the engine so each step publishes per-layer readiness (LayerPublisher)
 * into a region peers poll (LayerProgressRegion).
 */
import { ConfigError } from '../../runtime/errors.js';
import {
  DEFAULT_MOCKER_KV_BYTES_PER_TOKEN,
  setupDeviceKvTransfer,
  setupKvTransfer,
  setupNativeKvTransfer,
  type KvTransferSetup,
} from '../disagg/index.js';
import { LayerPublisher, MOCKER_STREAM_LAYERS } from '../disagg/layer-publisher.js';
import { LayerProgressRegion } from '../disagg/layer-progress-region.js';
import type { Engine } from '../engines/engine.js';
import type { NativeEngine } from '../engines/native/index.js';
import { MockerEngine } from '../engines/mocker/index.js';
import { loadPerfProfile, PerfProfileError, stepTimeModel, type PerfModel } from '../../perf-model/index.js';
import { kvBytesPerToken, parameterCounts, type ModelConfig } from '../models/index.js';
import type { WorkerOptions } from './worker-options.js';
import { MeasuredStepCost, PerfModelStepCost, nativeSpeculative, type SpeculatorConfig } from '../speculative/index.js';

const DEFAULT_MOCKER_BLOCKS = 16384;

/** What the engine phase built. */
export interface WorkerEngine {
  engine: Engine;
  /** prefill/decode: the transfer agent and the pool it serves. */
  kv?: KvTransferSetup;
  /** Layer-wise streaming (prefill): readiness per layer, and the region peers read it from. */
  layers?: LayerPublisher;
  region?: LayerProgressRegion;
  /** What the loop steps: the engine, or the engine wrapped to publish layer readiness. */
  loopEngine: Engine;
}

export async function buildWorkerEngine(options: WorkerOptions, config: ModelConfig): Promise<WorkerEngine> {
  const layers =
    options.kvLayerStreaming === true && options.mode === 'prefill' && (options.engine === 'mocker' || options.engine === 'native')
      ? new LayerPublisher(options.engine === 'mocker' ? MOCKER_STREAM_LAYERS : config.numLayers)
      : undefined;
  const { engine, kv } = await createEngineWithTransfer(options, config, layers);
  if (layers === undefined) return { engine, ...(kv !== undefined ? { kv } : {}), loopEngine: engine };
  const region = kv !== undefined ? new LayerProgressRegion(kv.agent, 256) : undefined;
  const progress = options.engine === 'native' ? () => (engine as NativeEngine).layerProgress() : undefined;
  return {
    engine,
    ...(kv !== undefined ? { kv } : {}),
    layers,
    ...(region !== undefined ? { region } : {}),
    loopEngine: layers.wrap(engine, progress),
  };
}

async function createEngine(options: WorkerOptions, config: ModelConfig, layers?: LayerPublisher): Promise<Engine> {
  if (options.engine === 'mocker') {
    return new MockerEngine({
      ...(layers !== undefined ? { numLayers: layers.numLayers, onLayers: layers.onLayers } : {}),
      numBlocks: mockerNumBlocks(options, config),
      blockSize: options.blockSize,
      vocabSize: config.vocabSize,
      speedupRatio: options.speedupRatio,
      eosTokenIds: config.eosTokenIds,
      perfModel: await mockerPerfModel(options, config),
      ...(options.speculative !== undefined ? { speculative: { acceptance: options.speculative.mockerAcceptance } } : {}),
    });
  }
  // Loaded lazily so a machine without the native addon can still run the mocker.
  const { createNativeEngine } = await import('../engines/native/index.js');
  return createNativeEngine(nativeEngineOptions(options));
}

/**
 * The mocker's pool: --num-gpu-blocks, else --kv-cache-memory over the bytes a block of this model
 * takes in a GPU pool (bf16, or e4m3 with --kv-cache-dtype fp8: twice the blocks), else 16384.
 */
export function mockerNumBlocks(options: Pick<WorkerOptions, 'numGpuBlocks' | 'kvCacheMemoryBytes' | 'kvCacheDtype' | 'blockSize'>, config: ModelConfig): number {
  if (options.numGpuBlocks !== undefined) return options.numGpuBlocks;
  if (options.kvCacheMemoryBytes === undefined) return DEFAULT_MOCKER_BLOCKS;
  const blockBytes = options.blockSize * kvBytesPerToken(config, options.kvCacheDtype === 'fp8' ? 1 : 2);
  const blocks = Math.floor(options.kvCacheMemoryBytes / blockBytes);
  if (blocks < 1) throw new ConfigError(`--kv-cache-memory ${options.kvCacheMemoryBytes} holds no KV block of ${blockBytes} bytes`);
  return blocks;
}

/**
 * The mocker's step times. A measured profile is the model's own; the default fit stands for a
 * dense model of the whole size, so a mixture of experts is charged its active share
 * (perf-model/active-params.ts).
 */
async function mockerPerfModel(options: WorkerOptions, config: ModelConfig): Promise<PerfModel> {
  return stepTimeModel(parameterCounts(config), options.perfProfile ? await loadMockerProfile(options.perfProfile) : undefined);
}

/** perf-model imports no runtime: its error becomes the ConfigError that exits the CLI with 2. */
export async function loadMockerProfile(path: string): Promise<PerfModel> {
  try {
    return await loadPerfProfile(path);
  } catch (err) {
    if (err instanceof PerfProfileError) throw new ConfigError(err.message);
    throw err;
  }
}

function nativeEngineOptions(options: WorkerOptions) {
  return {
    modelDir: options.modelDir,
    device: options.device,
    blockSize: options.blockSize,
    // A GPU sizes its activations and decode graphs for the scheduler's limits.
    maxBatchTokens: options.maxNumBatchedTokens,
    maxSeqs: options.maxNumSeqs,
    ...(options.numGpuBlocks !== undefined ? { numBlocks: options.numGpuBlocks } : {}),
    ...(options.kvCacheMemoryBytes !== undefined ? { memoryBudgetBytes: options.kvCacheMemoryBytes } : {}),
    ...(options.threads !== undefined ? { threads: options.threads } : {}),
    ...(options.gpuMemoryUtilization !== undefined ? { gpuMemoryUtilization: options.gpuMemoryUtilization } : {}),
    ...(options.cudaGraphs !== undefined ? { cudaGraphs: options.cudaGraphs } : {}),
    ...(options.quantization !== undefined ? { quantization: options.quantization } : {}),
    ...(options.kvCacheDtype !== undefined ? { kvCacheDtype: options.kvCacheDtype } : {}),
    ...(options.speculative !== undefined ? { speculative: nativeSpeculative(options.speculative) } : {}),
  };
}

/** The speculator's config: the mocker's step cost is its perf model's; a native engine's is measured. */
export async function speculatorConfig(options: WorkerOptions, config: ModelConfig): Promise<SpeculatorConfig | undefined> {
  // A prefill worker returns one token per request: nothing to speculate.
  if (options.speculative === undefined || options.mode === 'prefill') return undefined;
  const cost =
    options.engine === 'mocker'
      ? new PerfModelStepCost(await mockerPerfModel(options, config))
      : new MeasuredStepCost();
  return { maxDraftTokens: options.speculative.numSpeculativeTokens, cost };
}

async function createEngineWithTransfer(options: WorkerOptions, config: ModelConfig, layers?: LayerPublisher): Promise<{ engine: Engine; kv?: KvTransferSetup }> {
  const ucx = options.ucxConfig !== undefined ? { ucxConfig: options.ucxConfig } : {};
  if (options.mode === 'agg') return { engine: await createEngine(options, config) };
  if (options.engine === 'native' && options.device !== undefined && options.device !== 'cpu') {
    // A device KV pool: CUDA IPC (SIMT: shared memory) to same-node peers, staged otherwise.
    const kv = await setupDeviceKvTransfer(nativeEngineOptions(options), options.mode, ucx);
    return { engine: kv.engine, kv };
  }
  if (options.engine === 'native') {
    const kv = await setupNativeKvTransfer(nativeEngineOptions(options), ucx);
    return { engine: kv.engine, kv };
  }
  const engine = await createEngine(options, config, layers);
  try {
    const kv = setupKvTransfer(engine, { kvBytesPerToken: options.kvBytesPerToken ?? DEFAULT_MOCKER_KV_BYTES_PER_TOKEN, ...ucx });
    return { engine: kv.engine, kv };
  } catch (err) {
    await engine.close();
    throw err;
  }
}
