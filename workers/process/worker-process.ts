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
 *
 * startWorker builds in phases, each from what the earlier ones finished (README.md):
 *   1 config     model directory, vocabulary, names, context length
 *   2 engine     engine (+ transfer agent, layer streaming)               worker-engine.ts
 *   3 loop deps  grammar, KV tiers, LoRA registry, decode importer         disagg-side.ts
 *   4 loop       EngineLoop, its sinks attached                             loop-sinks.ts
 *   5 prefill    pins and the prefill handler, over the loop                disagg-side.ts
 *   6 endpoints  generate, kv_events (+ kv_release, kv_stage, kv_prefetch)  worker-endpoints.ts
 *   7 card       the model card goes up (routable), then lora_admin         workers/lora/lora-admin.ts
 */
import { basename, resolve } from 'node:path';
import type { ModelCard } from '../../proto/wire.js';
import { GENERATE_ENDPOINT, KV_EVENTS_ENDPOINT, LORA_ADMIN_ENDPOINT } from '../../proto/wire.js';
import { modelKey } from '../../runtime/index.js';
import type { DistributedRuntime } from '../../runtime/index.js';
import type { Logger } from '../../runtime/index.js';
import { EngineLoop } from '../engine-loop/index.js';
import { isDeviceKvSetup, kvCardFields, type KvImportService, type KvTransferSetup, type PinnedBlocks } from '../disagg/index.js';
import type { NativeEngine } from '../engines/native/index.js';
import { kvBytesPerToken, parameterCounts, readModelConfig, type ModelConfig } from '../models/index.js';
import { DEFAULT_COMPILE_LIMITS, GrammarCache, GrammarCompiler } from '../../grammar/index.js';
import type { Vocabulary } from '../../grammar/index.js';
import { cardLoras, loadStartupAdapters, loraAdminHandler, LoraRegistry } from '../lora/index.js';
import { WorkerMetrics } from './worker-metrics.js';
import { workerGrammarProvider } from './grammar-provider.js';
import { loadWorkerVocabulary } from './vocabulary-loader.js';
import { setupWorkerKvTiers } from './kv-tiers-setup.js';
import { KvTierMetrics } from './kv-tier-metrics.js';
import { SpecMetrics } from './spec-metrics.js';
import { COMPONENT_FOR_ROLE, type WorkerOptions } from './worker-options.js';
import { buildWorkerEngine, speculatorConfig } from './worker-engine.js';
import { startDecodeSide, startPrefillSide } from './disagg-side.js';
import { stagingBlocksFor } from '../disagg/device-kv-prefetch.js';
import { WorkerLoopSinks } from './loop-sinks.js';
import { serveWorkerEndpoints } from './worker-endpoints.js';

export { COMPONENT_FOR_ROLE, type WorkerOptions } from './worker-options.js';
export { loadMockerProfile } from './worker-engine.js';
/** Wire names, defined in proto/ and re-exported for the worker's callers. */
export { GENERATE_ENDPOINT, KV_EVENTS_ENDPOINT };

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

/** Phase 1: what the model directory and the flags say. */
interface WorkerConfig {
  modelDir: string;
  /** The model's config; a mocker's vocabulary widened to the tokenizer's. */
  config: ModelConfig;
  vocab: Vocabulary | undefined;
  modelName: string;
  componentName: string;
  contextLength: number;
}

async function readWorkerConfig(options: WorkerOptions): Promise<WorkerConfig> {
  const modelDir = resolve(options.modelDir);
  const modelConfig = await readModelConfig(modelDir);
  // Structured output masks over the tokenizer's vocabulary; a mocker samples from at least
  // that many ids so every token the grammar allows is one it can pick.
  const vocab = await loadWorkerVocabulary(modelDir, { eosTokenIds: modelConfig.eosTokenIds, vocabSize: modelConfig.vocabSize });
  const config = vocab !== undefined && vocab.size > modelConfig.vocabSize ? { ...modelConfig, vocabSize: vocab.size } : modelConfig;
  return {
    modelDir,
    config,
    vocab,
    modelName: options.modelName ?? basename(modelDir),
    componentName: options.component ?? COMPONENT_FOR_ROLE[options.mode],
    contextLength: Math.min(options.contextLength ?? config.contextLength, config.contextLength),
  };
}

/** Structured output over the vocabulary: the warmed cache and the off-thread compiler. */
function buildGrammar(vocab: Vocabulary | undefined, options: WorkerOptions, metrics: WorkerMetrics, modelName: string, log: Logger) {
  if (vocab === undefined) return undefined;
  const cache = new GrammarCache();
  const compiler = new GrammarCompiler({
    limits: options.grammarLimits ?? DEFAULT_COMPILE_LIMITS,
    target: { vocab, cache },
    log,
    onOutcome: (outcome) => metrics.grammarCompiles.inc({ model_name: modelName, outcome }),
  });
  const ms = cache.warm(vocab);
  log.debug({ vocabSize: vocab.size, ms: Math.round(ms) }, 'structured output: vocabulary prepared');
  return { provider: workerGrammarProvider(vocab, cache, compiler), compiler };
}

/**
 * The model card in discovery: put once the worker serves (it becomes routable), and put again
 * whenever its resident adapters change. A change before the first put needs nothing: that put
 * lists the adapters of its moment.
 */
class ModelCardPublisher {
  private published: { card: ModelCard; loras: LoraRegistry } | undefined;

  constructor(
    private readonly runtime: DistributedRuntime,
    readonly key: string,
    private readonly log: Logger,
  ) {}

  async publish(card: ModelCard, loras: LoraRegistry): Promise<void> {
    this.published = { card, loras };
    await this.put();
  }

  /** LoraRegistry's onChange: re-put in the background (a failure is logged). */
  lorasChanged(): void {
    if (this.published === undefined) return;
    void this.put().catch((err: unknown) => this.log.warn({ err }, 'model card update after a LoRA change failed'));
  }

  /** Re-puts the card with the adapters resident now. */
  async put(): Promise<void> {
    const p = this.published;
    if (p === undefined) return;
    p.card.loras = cardLoras(p.loras);
    await this.runtime.discovery.put(this.key, p.card);
  }

  async delete(): Promise<void> {
    await this.runtime.discovery.delete(this.key);
  }
}

export async function startWorker(runtime: DistributedRuntime, options: WorkerOptions): Promise<RunningWorker> {
  // 1. config
  const cfg = await readWorkerConfig(options);
  const { modelName, componentName, config } = cfg;

  // 2. engine (before the runtime is touched: a bad --perf-profile is a ConfigError with nothing to undo)
  const { engine, kv, layers, region, loopEngine } = await buildWorkerEngine(options, config);

  // 3. what the loop is built from
  const component = runtime.namespace(options.namespace).component(componentName);
  const metrics = new WorkerMetrics(runtime.metrics, modelName);
  const log = runtime.logger.child({ component: componentName, model: modelName });
  const grammar = buildGrammar(cfg.vocab, options, metrics, modelName, log);
  const kvTiers = options.kvTiers !== undefined ? await setupWorkerKvTiers(engine, { ...options.kvTiers, modelKvBytesPerToken: kvBytesPerToken(config, 2) }, modelName) : undefined;
  if (kvTiers !== undefined) new KvTierMetrics(runtime.metrics, modelName, kvTiers, engine.info.blockSize);
  const cardPublisher = new ModelCardPublisher(runtime, modelKey(options.namespace, modelName, runtime.instanceId), log);
  const loras = new LoraRegistry(engine, {
    onChange: () => cardPublisher.lorasChanged(),
    log,
    // Every adapter is checked against the model's shapes before its tensor bytes are read.
    dims: { hiddenSize: config.hiddenSize, intermediateSize: config.intermediateSize, numLayers: config.numLayers, numHeads: config.numAttentionHeads, numKvHeads: config.numKvHeads, headDim: config.headDim },
    ...(options.lora?.maxCpuLoras !== undefined ? { maxCpuLoras: options.lora.maxCpuLoras } : {}),
    ...(options.lora?.maxLoraRank !== undefined ? { maxLoraRank: options.lora.maxLoraRank } : {}),
    ...(options.lora?.maxLoraBytes !== undefined ? { maxLoraBytes: options.lora.maxLoraBytes } : {}),
    ...(options.lora?.maxLoraLoads !== undefined ? { maxLoraLoads: options.lora.maxLoraLoads } : {}),
    ...(options.lora?.roots !== undefined ? { roots: options.lora.roots } : {}),
  });
  await loadStartupAdapters(loras, options.lora?.adapters ?? []);
  // A device-pool decode worker that streams keeps the tail of its pool out of the scheduler:
  // staging blocks for layer-wise prefetches (workers/disagg/device-kv-prefetch.ts).
  const stagingBlocks =
    options.kvLayerStreaming === true && options.mode === 'decode' && kv !== undefined && isDeviceKvSetup(kv)
      ? stagingBlocksFor(engine.info.numBlocks, cfg.contextLength, engine.info.blockSize)
      : 0;
  const disaggCtx = kv !== undefined ? { runtime, options, kv, modelName, log } : undefined;
  const decode = disaggCtx !== undefined && options.mode === 'decode' ? await startDecodeSide({ ...disaggCtx, stagingBlocks }) : undefined;

  // 4. the loop
  const sinks = new WorkerLoopSinks({ component, metrics, modelName, log, loadMetricsIntervalMs: options.loadMetricsIntervalMs });
  const speculative = await speculatorConfig(options, config);
  const loop = new EngineLoop({
    engine: loopEngine,
    loras,
    workerId: runtime.instanceId,
    ...(kvTiers !== undefined ? { kvTiers } : {}),
    ...(decode !== undefined ? { kvImporter: decode.importer } : {}),
    scheduler: {
      maxNumBatchedTokens: options.maxNumBatchedTokens,
      maxNumSeqs: options.maxNumSeqs,
      ...(options.lora?.maxLoras !== undefined ? { maxLoras: options.lora.maxLoras } : {}),
      ...(stagingBlocks > 0 ? { numBlocks: engine.info.numBlocks - stagingBlocks } : {}),
    },
    ...(speculative !== undefined ? { speculative } : {}),
    ...(grammar !== undefined ? { grammar: grammar.provider } : {}),
    // The mocker's steps run at its speedup ratio: its adapter loads are reported in model time.
    ...(options.engine === 'mocker' ? { modelTimeScale: options.speedupRatio ?? 1 } : {}),
    sinks,
  });
  sinks.attach(loop);
  if (speculative !== undefined) new SpecMetrics(runtime.metrics, modelName, () => loop.scheduler.speculator?.counters);

  // 5. the prefill side, over the loop
  const prefill =
    disaggCtx !== undefined && options.mode === 'prefill'
      ? startPrefillSide({ ...disaggCtx, loop, ...(layers !== undefined && region !== undefined ? { streaming: { publisher: layers, region } } : {}) })
      : undefined;
  const prefetcher = decode?.prefetcher;

  // 6. endpoints
  const endpoints = await serveWorkerEndpoints({
    component,
    loop,
    metrics,
    modelName,
    role: options.mode,
    instanceId: runtime.instanceId,
    contextLength: cfg.contextLength,
    log,
    ...(prefill !== undefined ? { prefill: { handler: prefill.handler, stage: kv !== undefined && isDeviceKvSetup(kv) } } : {}),
    ...(decode !== undefined ? { decode: { importer: decode.importer, ...(prefetcher !== undefined ? { prefetcher } : {}) } } : {}),
  });

  // 7. the card (routable from here), then LoRA administration
  const card: ModelCard = {
    name: modelName,
    modelPath: cfg.modelDir,
    tokenizerSource: cfg.modelDir,
    chatTemplateSource: cfg.modelDir,
    contextLength: cfg.contextLength,
    kvBlockSize: engine.info.blockSize,
    totalKvBlocks: engine.info.numBlocks - stagingBlocks,
    maxNumBatchedTokens: options.maxNumBatchedTokens,
    role: options.mode,
    engine: options.engine,
    component: componentName,
    endpoint: GENERATE_ENDPOINT,
    instanceId: runtime.instanceId,
    kvBytesPerToken: engine.info.kvBytesPerToken,
    eosTokenIds: config.eosTokenIds,
    architecture: config.architecture,
    parameters: parameterCounts(config),
    ...(kv !== undefined ? { ucxWorkerAddress: kv.agent.workerAddress } : {}),
    ...(kv !== undefined ? kvCardFields(kv) : {}),
    ...((layers !== undefined && options.mode === 'prefill') || prefetcher !== undefined ? { kvLayerStreaming: true } : {}),
    ...(options.workerName !== undefined ? { workerName: options.workerName } : {}),
    // The router sends adapter requests and loads only to workers whose engine runs adapters.
    supportsLora: engine.info.supportsLora ?? engine.loadLora !== undefined,
  };
  await cardPublisher.publish(card, loras);
  const loraServed = await component.endpoint(LORA_ADMIN_ENDPOINT).serve(loraAdminHandler({ registry: loras, publishCard: () => cardPublisher.put(), log }));
  runtime.trackRegistration(cardPublisher.key, true);

  const shutdownKv = async (): Promise<void> => {
    sinks.close();
    prefill?.pinned.releaseAll();
    await loop.close();
    region?.release();
    prefill?.close();
    decode?.close();
    await grammar?.compiler.close();
  };
  runtime.onShutdown(shutdownKv);
  const device = (engine as Partial<NativeEngine>).deviceDescription;
  const native = (engine as Partial<NativeEngine>).model;
  log.info(
    {
      instanceId: runtime.instanceId,
      address: endpoints.address,
      blocks: engine.info.numBlocks,
      engine: options.engine,
      mode: options.mode,
      kvBytesPerToken: engine.info.kvBytesPerToken,
      ...(device !== undefined ? { device } : {}),
      ...(native !== undefined ? { quantization: native.quantization, kvDtype: native.kvDtype } : {}),
      ...(speculative !== undefined && options.speculative !== undefined ? { speculative: `${options.speculative.method}, up to ${speculative.maxDraftTokens} draft tokens` } : {}),
      ...(kv !== undefined ? { kvPool: kv.placement.pool, kvTransports: card.kvTransports, kvLayout: kv.pool.layout } : {}),
    },
    'worker ready',
  );

  return {
    card,
    loop,
    ...(kv !== undefined ? { disagg: { kv, ...(prefill ? { pinned: prefill.pinned } : {}), ...(decode ? { importer: decode.importer } : {}) } } : {}),
    close: async () => {
      await cardPublisher.delete().catch(() => undefined);
      await endpoints.stop();
      await loraServed.stop().catch(() => undefined);
      await shutdownKv();
    },
  };
}
