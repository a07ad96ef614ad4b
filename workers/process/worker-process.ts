/**
 * The worker process: one engine behind the shared scheduler and block manager (EngineLoop),
 * served on the request plane as `{ns}/{component}/generate`, announced by a model card, and
 * reporting KV events and load metrics on the event plane.
 *
 *   gRPC generate ──▶ EngineLoop.generate ──▶ TokenDelta stream
 *   EngineLoop sinks ──▶ component.publish('kv_events' | 'load_metrics')
 *   gRPC kv_events ──▶ replay a range of the KV event log, or dump the block set (router recovery)
 *
 * --mode prefill | decode adds a UCX transfer agent with the KV pool registered (workers/disagg):
 *   prefill: generate = PrefillHandler (pin + kvTransfer), plus `kv_release`
 *   decode:  generate = DecodeHandler (pull via KvImportService, release, continue)
 */
import { basename, resolve } from 'node:path';
import type {
  KvDumpResponse,
  KvEvent,
  KvRecoveryRequest,
  KvReleaseRequest,
  KvReleaseResponse,
  KvReplayResponse,
  KvTransferParams,
  LoadMetrics,
  ModelCard,
  PreprocessedRequest,
  TokenDelta,
  WorkerRole,
} from '../../proto/wire.js';
import { GENERATE_ENDPOINT, KV_EVENTS_ENDPOINT, KV_RELEASE_ENDPOINT, LOAD_REPORT_HEARTBEAT_MS, TOPICS } from '../../proto/wire.js';
import { modelKey } from '../../runtime/index.js';
import type { DistributedRuntime } from '../../runtime/index.js';
import { ConfigError, TandemError } from '../../runtime/errors.js';
import type { RequestContext } from '../../runtime/index.js';
import type { EndpointClient } from '../../runtime/index.js';
import { EngineLoop, type KvImportJob } from '../engine-loop/index.js';
import {
  DecodeHandler,
  DEFAULT_KV_RELEASE_TIMEOUT_MS,
  DEFAULT_MOCKER_KV_BYTES_PER_TOKEN,
  DEFAULT_PULL_TIMEOUT_MS,
  KvImportService,
  PinnedBlocks,
  PrefillHandler,
  setupKvTransfer,
  setupNativeKvTransfer,
  kvCardFields,
  type KvTransferSetup,
} from '../disagg/index.js';
import { TRANSFER_SECONDS_BUCKETS } from '../kv-transfer/index.js';
import { DeviceKvImporter, isDeviceKvSetup, setupDeviceKvTransfer } from '../disagg/index.js';
import { KV_STAGE_ENDPOINT, type KvStageRequest, type KvStageResponse } from '../../proto/wire.js';
import { KV_PREFETCH_ENDPOINT, type KvPrefetchRequest, type KvPrefetchResponse } from '../../proto/wire.js';
import { LayerPublisher, MOCKER_STREAM_LAYERS } from '../disagg/layer-publisher.js';
import { LayerProgressRegion } from '../disagg/layer-progress-region.js';
import { KvPrefetcher } from '../disagg/kv-prefetch.js';
import type { Engine } from '../engines/engine.js';
import type { NativeEngine } from '../engines/native/index.js';
import { MockerEngine } from '../engines/mocker/index.js';
import { loadPerfProfile, PerfProfileError, PolynomialPerfModel, type PerfModel } from '../../perf-model/index.js';
import { readModelConfig, type ModelConfig } from '../models/index.js';
import { DisaggMetrics, WorkerMetrics } from './worker-metrics.js';
import { DEFAULT_COMPILE_LIMITS, GrammarCache, GrammarCompiler, type CompileLimits } from '../../grammar/index.js';
import { workerGrammarProvider } from './grammar-provider.js';
import { loadWorkerVocabulary } from './vocabulary-loader.js';
import { LoadPublisher } from './load-publisher.js';
import { setupWorkerKvTiers, type WorkerKvTierOptions } from './kv-tiers-setup.js';
import { KvTierMetrics } from './kv-tier-metrics.js';
import { LoraRegistry } from '../lora/index.js';
import { LORA_ADMIN_ENDPOINT, type LoraAdminRequest, type LoraAdminResponse } from '../../proto/wire.js';
import { MeasuredStepCost, PerfModelStepCost, nativeSpeculative, type SpeculativeOptions, type SpeculatorConfig } from '../speculative/index.js';

export const COMPONENT_FOR_ROLE: Record<WorkerRole, string> = { agg: 'backend', prefill: 'prefill', decode: 'decode' };
/** Wire names, defined in proto/ and re-exported for the worker's callers. */
export { GENERATE_ENDPOINT, KV_EVENTS_ENDPOINT };

export interface WorkerOptions {
  engine: 'mocker' | 'native';
  modelDir: string;
  modelName?: string;
  mode: WorkerRole;
  namespace: string;
  component?: string;
  blockSize: number;
  numGpuBlocks?: number;
  maxNumBatchedTokens: number;
  maxNumSeqs: number;
  contextLength?: number;
  /** mocker */
  speedupRatio: number;
  perfProfile?: string;
  /** native: cpu, cuda, cuda:N (or simt, the CUDA backend's kernels on the host, for tests) */
  device: string;
  threads?: number;
  kvCacheMemoryBytes?: number;
  /** native on a GPU: share of device memory the worker may fill (default 0.9). */
  gpuMemoryUtilization?: number;
  /** native on a GPU: replay decode steps from CUDA graphs (default true). */
  cudaGraphs?: boolean;
  /** Publish load metrics at most this often (ms); 0 publishes after every step. */
  loadMetricsIntervalMs: number;
  /** Each new grammar's compile budget (`--grammar-compile-timeout-ms`, `--grammar-compile-memory-mb`). */
  grammarLimits?: CompileLimits;
  /** prefill/decode, mocker: bytes of KV per token in the host pool (default 1024). */
  kvBytesPerToken?: number;
  /** prefill: free pinned blocks no decode worker released after this long (default 30 s). */
  kvReleaseTimeoutMs?: number;
  /** decode: give up a pull (and recompute) after this long (default 10 s). */
  kvPullTimeoutMs?: number;
  /**
   * Layer-wise streaming (--kv-layer-streaming, docs/disaggregation.md): a prefill worker
   * publishes per-layer readiness of each hand-off and announces it before its first token; a
   * decode worker serves `kv_prefetch`. Host KV pools only (mocker, native CPU).
   */
  kvLayerStreaming?: boolean;
  /** KV tiers below the engine pool (`--kv-host-cache-gb`, `--kv-disk-cache-*`); docs/kv-tiers.md. */
  kvTiers?: WorkerKvTierOptions;
  /** prefill/decode: UCX config overrides without the UCX_ prefix; UCX_* env applies otherwise. */
  ucxConfig?: Record<string, string>;
  /** Multi-LoRA: adapters loaded at start (`name=DIR`) and the limits (`--max-loras`, `--max-cpu-loras`, `--max-lora-rank`). */
  lora?: { adapters: string[]; maxLoras?: number; maxCpuLoras?: number; maxLoraRank?: number };
  /** Speculative decoding (`--speculative`, docs/speculative.md); undefined = off. */
  speculative?: SpeculativeOptions;
}

/** What a prefill or decode worker adds; for tests and the process's own shutdown. */
export interface DisaggParts {
  kv: KvTransferSetup;
  pinned?: PinnedBlocks;
  importer?: KvImportService;
}

export interface RunningWorker {
  card: ModelCard;
  loop: EngineLoop;
  disagg?: DisaggParts;
  close(): Promise<void>;
}

const DEFAULT_MOCKER_BLOCKS = 16384;

async function createEngine(options: WorkerOptions, config: ModelConfig, layers?: LayerPublisher): Promise<Engine> {
  if (options.engine === 'mocker') {
    return new MockerEngine({
      ...(layers !== undefined ? { numLayers: layers.numLayers, onLayers: layers.onLayers } : {}),
      numBlocks: options.numGpuBlocks ?? DEFAULT_MOCKER_BLOCKS,
      blockSize: options.blockSize,
      vocabSize: config.vocabSize,
      speedupRatio: options.speedupRatio,
      eosTokenIds: config.eosTokenIds,
      ...(options.perfProfile ? { perfModel: await loadMockerProfile(options.perfProfile) } : {}),
      ...(options.speculative !== undefined ? { speculative: { acceptance: options.speculative.mockerAcceptance } } : {}),
    });
  }
  // Loaded lazily so a machine without the native addon can still run the mocker.
  const { createNativeEngine } = await import('../engines/native/index.js');
  return createNativeEngine(nativeEngineOptions(options));
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
    ...(options.speculative !== undefined ? { speculative: nativeSpeculative(options.speculative) } : {}),
  };
}

/** The speculator's config: the mocker's step cost is its perf model's; a native engine's is measured. */
async function speculatorConfig(options: WorkerOptions): Promise<SpeculatorConfig | undefined> {
  // A prefill worker returns one token per request: nothing to speculate.
  if (options.speculative === undefined || options.mode === 'prefill') return undefined;
  const cost =
    options.engine === 'mocker'
      ? new PerfModelStepCost(options.perfProfile ? await loadMockerProfile(options.perfProfile) : new PolynomialPerfModel())
      : new MeasuredStepCost();
  return { maxDraftTokens: options.speculative.numSpeculativeTokens, cost };
}

/**
 * The engine, plus for prefill/decode workers the transfer agent with the KV pool registered.
 * A native engine is loaded straight into the agent's allocated pool (peers then read it with
 * one memcpy over shared memory, and the pool never exists twice).
 */
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

export async function startWorker(runtime: DistributedRuntime, options: WorkerOptions): Promise<RunningWorker> {
  const modelDir = resolve(options.modelDir);
  const modelConfig = await readModelConfig(modelDir);
  // Structured output masks over the tokenizer's vocabulary; a mocker samples from at least
  // that many ids so every token the grammar allows is one it can pick.
  const vocab = await loadWorkerVocabulary(modelDir, { eosTokenIds: modelConfig.eosTokenIds, vocabSize: modelConfig.vocabSize });
  const config = vocab !== undefined && vocab.size > modelConfig.vocabSize ? { ...modelConfig, vocabSize: vocab.size } : modelConfig;
  const modelName = options.modelName ?? basename(modelDir);
  const componentName = options.component ?? COMPONENT_FOR_ROLE[options.mode];
  const contextLength = Math.min(options.contextLength ?? config.contextLength, config.contextLength);
  // Layer-wise streaming on a host-pool prefill worker: per-layer readiness of its hand-offs.
  const layers =
    options.kvLayerStreaming === true && options.mode === 'prefill' && (options.engine === 'mocker' || options.device === 'cpu')
      ? new LayerPublisher(options.engine === 'mocker' ? MOCKER_STREAM_LAYERS : config.numLayers)
      : undefined;
  const { engine, kv } = await createEngineWithTransfer(options, config, layers);
  const component = runtime.namespace(options.namespace).component(componentName);
  const metrics = new WorkerMetrics(runtime.metrics, modelName);
  const log = runtime.logger.child({ component: componentName, model: modelName });
  const grammarCache = new GrammarCache();
  const grammarCompiler =
    vocab !== undefined
      ? new GrammarCompiler({
          limits: options.grammarLimits ?? DEFAULT_COMPILE_LIMITS,
          target: { vocab, cache: grammarCache },
          log,
          onOutcome: (outcome) => metrics.grammarCompiles.inc({ model_name: modelName, outcome }),
        })
      : undefined;
  if (vocab !== undefined) {
    const ms = grammarCache.warm(vocab);
    log.debug({ vocabSize: vocab.size, ms: Math.round(ms) }, 'structured output: vocabulary prepared');
  }

  const disagg = kv === undefined ? undefined : await startDisagg(runtime, options, kv, modelName, log, () => loop, (id) => prefillHandler?.pinEnded(id));
  const region = layers !== undefined && kv !== undefined ? new LayerProgressRegion(kv.agent, 256) : undefined;
  const loopEngine =
    layers !== undefined ? layers.wrap(engine, options.engine === 'native' ? () => (engine as NativeEngine).layerProgress() : undefined) : engine;

  const kvTiers = options.kvTiers !== undefined ? await setupWorkerKvTiers(engine, options.kvTiers, modelName) : undefined;
  if (kvTiers !== undefined) new KvTierMetrics(runtime.metrics, modelName, kvTiers, engine.info.blockSize);
  // Set once the card exists: every change of the resident adapters re-publishes it.
  let onLorasChanged = (): void => undefined;
  const loras = new LoraRegistry(engine, {
    onChange: () => onLorasChanged(),
    ...(options.lora?.maxCpuLoras !== undefined ? { maxCpuLoras: options.lora.maxCpuLoras } : {}),
    ...(options.lora?.maxLoraRank !== undefined ? { maxLoraRank: options.lora.maxLoraRank } : {}),
  });
  for (const arg of options.lora?.adapters ?? []) {
    const eq = arg.indexOf('=');
    await loras.load(arg.slice(0, eq), resolve(arg.slice(eq + 1)));
  }
  // After the start-up adapter loads: its heartbeat samples `loop`, and loading many adapters
  // outlasts the first beat (a ReferenceError before `loop` exists killed the worker).
  const loadPublisher = new LoadPublisher({
    minIntervalMs: options.loadMetricsIntervalMs,
    heartbeatMs: LOAD_REPORT_HEARTBEAT_MS,
    sample: () => loop.loadMetrics(),
    publish: (m) => void component.publish(TOPICS.loadMetrics, m).catch((err: unknown) => log.debug({ err }, 'load metrics publish failed')),
  });
  const speculative = await speculatorConfig(options);
  const loop: EngineLoop = new EngineLoop({
    engine: loopEngine,
    loras,
    workerId: runtime.instanceId,
    ...(kvTiers !== undefined ? { kvTiers } : {}),
    ...(disagg?.importer !== undefined ? { kvImporter: disagg.importer } : {}),
    scheduler: { maxNumBatchedTokens: options.maxNumBatchedTokens, maxNumSeqs: options.maxNumSeqs, ...(options.lora?.maxLoras !== undefined ? { maxLoras: options.lora.maxLoras } : {}) },
    ...(speculative !== undefined ? { speculative } : {}),
    ...(vocab !== undefined ? { grammar: workerGrammarProvider(vocab, grammarCache, grammarCompiler) } : {}),
    sinks: {
      onKvEvents: (events: KvEvent[]) => {
        void component.publish(TOPICS.kvEvents, events).catch((err: unknown) => log.debug({ err }, 'kv event publish failed'));
      },
      onLoadMetrics: (m: LoadMetrics) => {
        metrics.steps.inc({ model_name: modelName });
        metrics.update(loop.stats(m));
        loadPublisher.offer(m);
      },
    },
  });

  async function* generate(request: PreprocessedRequest, ctx: RequestContext): AsyncGenerator<TokenDelta> {
    if (!Array.isArray(request?.tokenIds) || request.tokenIds.length === 0) throw new TandemError('invalid_argument', 'request has no prompt tokens');
    if (request.tokenIds.length + (request.stop?.maxTokens ?? 0) > contextLength) {
      throw new TandemError('invalid_argument', `prompt (${request.tokenIds.length} tokens) plus max_tokens (${request.stop?.maxTokens}) exceeds the context length ${contextLength}`);
    }
    metrics.requests.inc({ model_name: modelName });
    for await (const delta of run(request, ctx)) {
      metrics.generatedTokens.inc({ model_name: modelName }, delta.tokenIds.length);
      yield { ...delta, instanceId: runtime.instanceId };
    }
    metrics.update(loop.stats());
  }

  const prefillHandler = disagg?.pinned ? new PrefillHandler({ loop, agent: kv!.agent, pool: kv!.pool, pinned: disagg.pinned, instanceId: runtime.instanceId, ...(kv!.layout ? { layout: kv!.layout } : {}), placement: kv!.placement, ...deviceHandoff(kv!), ...(layers !== undefined && region !== undefined ? { streaming: { publisher: layers, region } } : {}) }) : undefined;
  const decodeHandler = disagg?.importer ? new DecodeHandler({ loop, importer: disagg.importer, instanceId: runtime.instanceId }) : undefined;
  const run = (request: PreprocessedRequest, ctx: RequestContext): AsyncIterable<TokenDelta> =>
    prefillHandler?.generate(request, ctx) ?? decodeHandler?.generate(request, ctx) ?? loop.generate(request, ctx.signal);

  // Router recovery: answers a replay of an event range or a dump of the whole block set, in
  // the shapes of proto/kv-recovery.ts.
  async function* kvEvents(request: KvRecoveryRequest): AsyncGenerator<KvReplayResponse | KvDumpResponse> {
    const workerId = runtime.instanceId;
    if (request.type === 'dump') {
      yield { workerId, ...loop.kvEventLog.dump() };
      return;
    }
    const replay = loop.kvEventLog.replay(request.fromEventId, request.toEventId);
    yield replay.type === 'events'
      ? { type: 'events', workerId, events: replay.events }
      : { type: 'too_old', workerId, oldestEventId: replay.oldestEventId };
  }

  const served = await component.endpoint(GENERATE_ENDPOINT).serve(generate, { metadata: { model: modelName, role: options.mode } });
  await component.endpoint(KV_EVENTS_ENDPOINT).serve(kvEvents);
  const releaseServed = prefillHandler
    ? await component.endpoint(KV_RELEASE_ENDPOINT).serve<KvReleaseRequest, KvReleaseResponse>((req) => prefillHandler.release(req))
    : undefined;
  // A device-pool prefill copies a hand-off to host memory only when a decode worker asks.
  const prefetcher = disagg?.prefetcher;
  const prefetchServed = prefetcher
    ? await component.endpoint(KV_PREFETCH_ENDPOINT).serve<KvPrefetchRequest, KvPrefetchResponse>(async function* (req) {
        const started = req?.kvTransfer !== undefined && prefetcher.start(req.kvTransfer);
        if (started) log.info({ transferId: req.kvTransfer.transferId, blocks: req.kvTransfer.blockIds.length }, 'KV layer prefetch started');
        yield { started };
      })
    : undefined;
  const stageServed = prefillHandler && isDeviceKvSetup(kv!)
    ? await component.endpoint(KV_STAGE_ENDPOINT).serve<KvStageRequest, KvStageResponse>((req) => prefillHandler.stageBlocks(req))
    : undefined;

  const card: ModelCard = {
    name: modelName,
    modelPath: modelDir,
    tokenizerSource: modelDir,
    chatTemplateSource: modelDir,
    contextLength,
    kvBlockSize: engine.info.blockSize,
    totalKvBlocks: engine.info.numBlocks,
    maxNumBatchedTokens: options.maxNumBatchedTokens,
    role: options.mode,
    engine: options.engine,
    component: componentName,
    endpoint: GENERATE_ENDPOINT,
    instanceId: runtime.instanceId,
    kvBytesPerToken: engine.info.kvBytesPerToken,
    eosTokenIds: config.eosTokenIds,
    ...(kv !== undefined ? { ucxWorkerAddress: kv.agent.workerAddress } : {}),
    ...(kv !== undefined ? kvCardFields(kv) : {}),
    ...((layers !== undefined && options.mode === 'prefill') || prefetcher !== undefined ? { kvLayerStreaming: true } : {}),
  };
  const cardKey = modelKey(options.namespace, modelName, runtime.instanceId);
  // Resident adapters on the card: the frontend lists them and routes requests naming them here.
  const publishLoras = async (): Promise<void> => {
    card.loras = loras.list().map(({ name, loraId, path }) => ({ name, loraId, path }));
    await runtime.discovery.put(cardKey, card);
  };
  card.loras = loras.list().map(({ name, loraId, path }) => ({ name, loraId, path }));
  await runtime.discovery.put(cardKey, card);
  onLorasChanged = () => void publishLoras().catch((err: unknown) => log.warn({ err }, 'model card update after a LoRA change failed'));
  const loraServed = await component.endpoint(LORA_ADMIN_ENDPOINT).serve(async function* (req: LoraAdminRequest): AsyncGenerator<LoraAdminResponse> {
    if (req?.op === 'load' && typeof req.name === 'string' && typeof req.path === 'string') {
      const l = await loras.load(req.name, resolve(req.path));
      await publishLoras();
      log.info({ lora: l.name, loraId: l.loraId, rank: l.rank }, 'LoRA adapter loaded');
      yield { ok: true, loras: loras.list() };
    } else if (req?.op === 'unload' && typeof req.name === 'string') {
      if (!loras.has(req.name)) throw new TandemError('not_found', `adapter '${req.name}' is not loaded`);
      // The name goes at once (new requests get not_found); the slot empties after running ones finish.
      const name = req.name;
      void loras.unload(name).then(
        () => log.info({ lora: name }, 'LoRA adapter unloaded'),
        (err: unknown) => log.warn({ err, lora: name }, 'LoRA adapter unload failed'),
      );
      await publishLoras();
      yield { ok: true, loras: loras.list() };
    } else if (req?.op === 'list') {
      yield { ok: true, loras: loras.list() };
    } else {
      throw new TandemError('invalid_argument', 'lora admin: {op: load, name, path} | {op: unload, name} | {op: list}');
    }
  });
  runtime.trackRegistration(cardKey, true);
  metrics.update(loop.stats());
  const shutdownKv = async (): Promise<void> => {
    loadPublisher.close();
    disagg?.pinned?.releaseAll();
    await loop.close();
    region?.release();
    disagg?.close();
    await grammarCompiler?.close();
  };
  runtime.onShutdown(shutdownKv);
  const device = (engine as Partial<NativeEngine>).deviceDescription;
  log.info(
    {
      instanceId: runtime.instanceId,
      address: served.record.address,
      blocks: engine.info.numBlocks,
      engine: options.engine,
      mode: options.mode,
      kvBytesPerToken: engine.info.kvBytesPerToken,
      ...(device !== undefined ? { device } : {}),
      ...(kv !== undefined ? { kvPool: kv.placement.pool, kvTransports: card.kvTransports, kvLayout: kv.pool.layout } : {}),
    },
    'worker ready',
  );

  return {
    card,
    loop,
    ...(disagg !== undefined ? { disagg: disagg.parts } : {}),
    close: async () => {
      await runtime.discovery.delete(cardKey).catch(() => undefined);
      await served.stop().catch(() => undefined);
      await releaseServed?.stop().catch(() => undefined);
      await stageServed?.stop().catch(() => undefined);
      await prefetchServed?.stop().catch(() => undefined);
      await loraServed.stop().catch(() => undefined);
      await shutdownKv();
    },
  };
}

interface StartedDisagg {
  parts: DisaggParts;
  pinned?: PinnedBlocks;
  importer?: KvImportService;
  prefetcher?: KvPrefetcher;
  close(): void;
}

/**
 * The prefill side (pins with a release timeout) or the decode side (imports, with the
 * `kv_release` client), plus their metrics. `getLoop` is read lazily: the loop is built after
 * this, with the importer in it.
 */
async function startDisagg(
  runtime: DistributedRuntime,
  options: WorkerOptions,
  kv: KvTransferSetup,
  modelName: string,
  log: DistributedRuntime['logger'],
  getLoop: () => EngineLoop,
  onPinEnd: (transferId: string) => void,
): Promise<StartedDisagg> {
  let pinned: PinnedBlocks | undefined;
  let importer: KvImportService | undefined;
  let prefetcher: KvPrefetcher | undefined;
  let releaseClient: EndpointClient | undefined;
  let stageClient: EndpointClient | undefined;
  const dm = new DisaggMetrics(runtime.metrics, modelName, TRANSFER_SECONDS_BUCKETS, {
    inflight: () => kv.agent.counters.inflight,
    pins: () => ({ transfers: pinned?.size ?? 0, blocks: pinned?.numBlocks ?? 0 }),
  });
  const unsubscribe = kv.agent.counters.onTransfer((e) => dm.transfer(e));
  dm.describeTransport({ pool: kv.placement.pool, transports: kvCardFields(kv).kvTransports ?? [], layout: kv.pool.layout });

  if (options.mode === 'prefill') {
    pinned = new PinnedBlocks({
      free: (seqId) => getLoop().releasePinned(seqId),
      releaseTimeoutMs: options.kvReleaseTimeoutMs ?? DEFAULT_KV_RELEASE_TIMEOUT_MS,
      onEnd: (e) => {
        onPinEnd(e.transferId);
        if (e.reason !== 'timeout') return;
        dm.releaseTimeout();
        log.warn({ transferId: e.transferId, blocks: e.numBlocks, heldMs: e.heldMs }, 'pinned KV blocks were never released: freed by timeout');
      },
    });
  } else {
    const client = await runtime.namespace(options.namespace).component(COMPONENT_FOR_ROLE.prefill).endpoint(KV_RELEASE_ENDPOINT).client();
    releaseClient = client;
    const stager = await runtime.namespace(options.namespace).component(COMPONENT_FOR_ROLE.prefill).endpoint(KV_STAGE_ENDPOINT).client();
    stageClient = stager;
    const stamps = kv.stamps;
    const device = isDeviceKvSetup(kv) ? kv : undefined;
    const pullTimeoutMs = options.kvPullTimeoutMs ?? DEFAULT_PULL_TIMEOUT_MS;
    if (options.kvLayerStreaming === true && device === undefined) {
      prefetcher = new KvPrefetcher({
        agent: kv.agent,
        pool: kv.pool,
        expireMs: pullTimeoutMs,
        pullTimeoutMs,
        onStreamed: (source, { copies, readyAtIssue, report }) => {
          dm.streamed(report.hiddenFraction);
          log.info(
            { transferId: source.transferId, numLayers: source.kvLayerProgress?.numLayers, copies: copies.length, layersReadyAtFirstCopy: readyAtIssue[0], copyMs: report.copyMs, hiddenMs: report.hiddenMs, exposedMs: report.exposedMs, hiddenFraction: report.hiddenFraction },
            'KV streamed layer by layer',
          );
        },
        onFailed: (source, err, open) => log.info({ transferId: source.transferId, err, open }, 'KV layer stream failed: the decode request pulls or recomputes'),
      });
    }
    importer = new (device !== undefined ? DeviceKvImporter : KvImportService)({
      ...(device !== undefined ? { engine: device.engine } : {}),
      agent: kv.agent,
      pool: kv.pool,
      pullTimeoutMs: options.kvPullTimeoutMs ?? DEFAULT_PULL_TIMEOUT_MS,
      release: (source) => callRelease(client, source),
      stage: (source) => callStage(stager, source, options.kvPullTimeoutMs ?? DEFAULT_PULL_TIMEOUT_MS),
      ...(stamps !== undefined
        ? { verify: (job: KvImportJob) => stamps.firstMismatch(job.localBlockIds, job.tokenIds, job.firstBlock * stamps.blockSize, job.numTokens, job.firstBlock) }
        : {}),
      ...(kv.layout !== undefined ? { layout: kv.layout } : {}),
      placement: kv.placement,
      ...(prefetcher !== undefined ? { prefetcher } : {}),
      onOutcome: (job, outcome) => {
        if (outcome.blocks > 0 || !outcome.ok) dm.imported(outcome);
        if (outcome.streamed === true) log.info({ requestId: job.requestId, transferId: job.source.transferId, blocks: outcome.blocks, waitMs: outcome.seconds * 1000 }, 'KV adopted from the layer stream');
        if (outcome.ok) return;
        dm.fallback();
        log.warn({ requestId: job.requestId, err: outcome.error }, 'KV import failed: computing the prompt here');
      },
      onReleaseError: (source, err) => log.debug({ transferId: source.transferId, err }, 'kv_release call failed (the prefill worker frees by timeout)'),
    });
  }
  // A device importer maps each prefill pool once; unmap those whose worker left discovery.
  const unwatchPeers = importer instanceof DeviceKvImporter && releaseClient !== undefined ? releaseClient.onChange((ids) => (importer as DeviceKvImporter).retainPeers(ids)) : undefined;
  return {
    parts: { kv, ...(pinned ? { pinned } : {}), ...(importer ? { importer } : {}) },
    ...(pinned ? { pinned } : {}),
    ...(importer ? { importer } : {}),
    ...(prefetcher ? { prefetcher } : {}),
    close: () => {
      prefetcher?.close();
      unsubscribe();
      unwatchPeers?.();
      if (importer instanceof DeviceKvImporter) importer.close();
      releaseClient?.close();
      stageClient?.close();
      kv.close();
    },
  };
}

/** Direct call to the prefill instance's kv_release; waits briefly for discovery to list it. */
async function callRelease(client: EndpointClient, source: KvTransferParams): Promise<void> {
  const id = source.prefillInstanceId;
  for (let i = 0; i < 10 && client.instance(id) === undefined; i++) await new Promise((r) => setTimeout(r, 100));
  const stream = client.generate<KvReleaseRequest, KvReleaseResponse>(
    { transferId: source.transferId },
    { routing: { mode: 'direct', instanceId: id }, timeoutMs: 5_000 },
  );
  for await (const _ of stream) {
    // one answer; draining it completes the call
  }
}

/** Asks a device-pool prefill worker for the host copy of a hand-off; rejects unless it made it. */
async function callStage(client: EndpointClient, source: KvTransferParams, timeoutMs: number): Promise<void> {
  const id = source.prefillInstanceId;
  for (let i = 0; i < 10 && client.instance(id) === undefined; i++) await new Promise((r) => setTimeout(r, 100));
  let staged = false;
  for await (const r of client.generate<KvStageRequest, KvStageResponse>({ transferId: source.transferId }, { routing: { mode: 'direct', instanceId: id }, timeoutMs })) {
    staged ||= r.staged;
  }
  if (!staged) throw new Error(`prefill ${id} did not stage transfer ${source.transferId} (released or timed out)`);
}

/** A prefill worker on a device pool stages hand-offs into its host pool and names its export handle. */
function deviceHandoff(kv: KvTransferSetup): { stage?: (blockIds: number[]) => Promise<void>; deviceHandle?: string } {
  if (!isDeviceKvSetup(kv)) return {};
  return { ...(kv.stage !== undefined ? { stage: kv.stage } : {}), ...(kv.deviceHandle !== undefined ? { deviceHandle: kv.deviceHandle } : {}) };
}
