/**
 * The worker process: one engine behind the shared scheduler and block manager (EngineLoop),
 * served on the request plane as `{ns}/{component}/generate`, announced by a model card, and
 * reporting KV events and load metrics on the event plane.
 *
 *   gRPC generate ──▶ EngineLoop.generate ──▶ TokenDelta stream
 *   EngineLoop sinks ──▶ component.publish('kv_events' | 'load_metrics')
 *   gRPC kv_events ──▶ replay a range of the KV event log, or dump the block set (router recovery)
 */
import { basename, resolve } from 'node:path';
import type { KvEvent, LoadMetrics, ModelCard, PreprocessedRequest, TokenDelta, WorkerRole } from '../../proto/wire.js';
import { TOPICS } from '../../proto/wire.js';
import { modelKey } from '../../runtime/discovery/keys.js';
import type { DistributedRuntime } from '../../runtime/distributed-runtime.js';
import { TandemError } from '../../runtime/errors.js';
import type { RequestContext } from '../../runtime/request-plane/types.js';
import type { KvDumpResponse, KvReplayResponse } from '../../router/recovery-protocol.js';
import { EngineLoop } from '../engine-loop/index.js';
import type { Engine } from '../engines/engine.js';
import { MockerEngine, loadPerfProfile } from '../engines/mocker/index.js';
import { readModelConfig, type ModelConfig } from '../models/index.js';
import { WorkerMetrics } from './worker-metrics.js';

export const COMPONENT_FOR_ROLE: Record<WorkerRole, string> = { agg: 'backend', prefill: 'prefill', decode: 'decode' };
export const GENERATE_ENDPOINT = 'generate';
export const KV_EVENTS_ENDPOINT = 'kv_events';

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
  /** native */
  device: string;
  threads?: number;
  kvCacheMemoryBytes?: number;
  /** Publish load metrics at most this often (ms); 0 publishes after every step. */
  loadMetricsIntervalMs: number;
}

/** A request for the `kv_events` endpoint: replay a range, or dump the full block set. */
export type KvEventsRequest = { type: 'replay'; fromEventId: number; toEventId: number } | { type: 'dump' };

export interface RunningWorker {
  card: ModelCard;
  loop: EngineLoop;
  close(): Promise<void>;
}

const DEFAULT_MOCKER_BLOCKS = 16384;

async function createEngine(options: WorkerOptions, config: ModelConfig): Promise<Engine> {
  if (options.engine === 'mocker') {
    return new MockerEngine({
      numBlocks: options.numGpuBlocks ?? DEFAULT_MOCKER_BLOCKS,
      blockSize: options.blockSize,
      vocabSize: config.vocabSize,
      speedupRatio: options.speedupRatio,
      eosTokenIds: config.eosTokenIds,
      ...(options.perfProfile ? { perfModel: await loadPerfProfile(options.perfProfile) } : {}),
    });
  }
  // Loaded lazily so a machine without the native addon can still run the mocker.
  const { createNativeEngine } = await import('../engines/native/index.js');
  return createNativeEngine({
    modelDir: options.modelDir,
    device: options.device,
    blockSize: options.blockSize,
    ...(options.numGpuBlocks !== undefined ? { numBlocks: options.numGpuBlocks } : {}),
    ...(options.kvCacheMemoryBytes !== undefined ? { memoryBudgetBytes: options.kvCacheMemoryBytes } : {}),
    ...(options.threads !== undefined ? { threads: options.threads } : {}),
  });
}

export async function startWorker(runtime: DistributedRuntime, options: WorkerOptions): Promise<RunningWorker> {
  const modelDir = resolve(options.modelDir);
  const config = await readModelConfig(modelDir);
  const modelName = options.modelName ?? basename(modelDir);
  const componentName = options.component ?? COMPONENT_FOR_ROLE[options.mode];
  const contextLength = Math.min(options.contextLength ?? config.contextLength, config.contextLength);
  const engine = await createEngine(options, config);
  const component = runtime.namespace(options.namespace).component(componentName);
  const metrics = new WorkerMetrics(runtime.metrics, modelName);
  const log = runtime.logger.child({ component: componentName, model: modelName });

  let lastLoadPublish = 0;
  const loop: EngineLoop = new EngineLoop({
    engine,
    workerId: runtime.instanceId,
    scheduler: { maxNumBatchedTokens: options.maxNumBatchedTokens, maxNumSeqs: options.maxNumSeqs },
    sinks: {
      onKvEvents: (events: KvEvent[]) => {
        void component.publish(TOPICS.kvEvents, events).catch((err: unknown) => log.debug({ err }, 'kv event publish failed'));
      },
      onLoadMetrics: (m: LoadMetrics) => {
        metrics.steps.inc({ model_name: modelName });
        metrics.update(loop.stats());
        const now = Date.now();
        if (now - lastLoadPublish < options.loadMetricsIntervalMs) return;
        lastLoadPublish = now;
        void component.publish(TOPICS.loadMetrics, m).catch((err: unknown) => log.debug({ err }, 'load metrics publish failed'));
      },
    },
  });

  async function* generate(request: PreprocessedRequest, ctx: RequestContext): AsyncGenerator<TokenDelta> {
    if (!Array.isArray(request?.tokenIds) || request.tokenIds.length === 0) throw new TandemError('invalid_argument', 'request has no prompt tokens');
    if (request.tokenIds.length + (request.stop?.maxTokens ?? 0) > contextLength) {
      throw new TandemError('invalid_argument', `prompt (${request.tokenIds.length} tokens) plus max_tokens (${request.stop?.maxTokens}) exceeds the context length ${contextLength}`);
    }
    metrics.requests.inc({ model_name: modelName });
    for await (const delta of loop.generate(request, ctx.signal)) {
      metrics.generatedTokens.inc({ model_name: modelName }, delta.tokenIds.length);
      yield { ...delta, instanceId: runtime.instanceId };
    }
    metrics.update(loop.stats());
  }

  // Router recovery: answers a replay of an event range or a dump of the whole block set, in
  // the shapes of router/recovery-protocol.ts.
  async function* kvEvents(request: KvEventsRequest): AsyncGenerator<KvReplayResponse | KvDumpResponse> {
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
  };
  const cardKey = modelKey(options.namespace, modelName, runtime.instanceId);
  await runtime.discovery.put(cardKey, card);
  runtime.trackRegistration(cardKey, true);
  metrics.update(loop.stats());
  runtime.onShutdown(() => loop.close());
  log.info({ instanceId: runtime.instanceId, address: served.record.address, blocks: engine.info.numBlocks, engine: options.engine }, 'worker ready');

  return {
    card,
    loop,
    close: async () => {
      await runtime.discovery.delete(cardKey).catch(() => undefined);
      await served.stop().catch(() => undefined);
      await loop.close();
    },
  };
}
