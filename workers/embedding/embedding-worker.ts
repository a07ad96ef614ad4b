/**
 * `runtime worker --task embed`: an embedding worker. No scheduler, KV events or load
 * metrics: the engine's whole KV pool is the pooling step's scratch (Engine::embed), requests
 * are batched by EmbedBatcher, and the worker serves `{ns}/{component}/embed` (proto/embedding.ts)
 * under a model card with `task: 'embed'` and its `embedding` capability.
 *
 *   gRPC embed(EmbedRequest) ─▶ check tokens ─▶ EmbedBatcher ─▶ Embedder (native pooling │ mocker hash)
 *                             ◀─ EmbedResponse {dimensions, f32 LE vectors}
 */
import { basename, resolve } from 'node:path';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { EmbeddingCapability, EmbeddingPooling, EmbedRequest, EmbedResponse, ModelCard } from '../../proto/wire.js';
import { EMBED_ENDPOINT, EMBEDDING_COMPONENT } from '../../proto/wire.js';
import { modelKey, type DistributedRuntime, type RequestContext } from '../../runtime/index.js';
import { TandemError } from '../../runtime/errors.js';
import { ModelFormatError, readModelConfig } from '../models/index.js';
import { readEmbeddingConfig } from '../models/embedding-config.js';
import { EmbedBatcher } from './embed-batcher.js';
import { PolynomialPerfModel } from '../../perf-model/index.js';
import { loadMockerProfile } from '../process/worker-process.js';
import { MockEmbedder, NativeEmbedder, type Embedder } from './embedder.js';

export interface EmbeddingWorkerOptions {
  engine: 'mocker' | 'native';
  modelDir: string;
  modelName?: string;
  /** On the card (the dashboard shows it): `--worker-name`. */
  workerName?: string;
  namespace: string;
  component?: string;
  /** Overrides the model's sentence-transformers pooling; default there, else 'last'. */
  pooling?: EmbeddingPooling;
  /** Tokens per forward pass: the KV pool is sized for it, and no input may be longer. */
  maxNumBatchedTokens: number;
  /** native: KV blocks instead of one pass's worth (ceil(maxNumBatchedTokens / blockSize) + 64). */
  numGpuBlocks?: number;
  blockSize: number;
  contextLength?: number;
  device: string;
  threads?: number;
  /** mocker: divide the simulated time by this; and a measured profile instead of the polynomial model. */
  speedupRatio: number;
  perfProfile?: string;
}

export interface RunningEmbeddingWorker {
  card: ModelCard;
  batcher: EmbedBatcher;
  close(): Promise<void>;
}

export async function startEmbeddingWorker(runtime: DistributedRuntime, options: EmbeddingWorkerOptions): Promise<RunningEmbeddingWorker> {
  const modelDir = resolve(options.modelDir);
  const config = await readModelConfig(modelDir);
  // Refused at load, like the engine's other refusals (one line, exit 2): the native engine
  // cannot pool a mixture of experts (Engine::embed); the mocker, its stand-in, refuses it too.
  if (config.moe) {
    throw new ModelFormatError(`--task embed: embeddings from a mixture-of-experts model (${config.architecture}) are not supported`);
  }
  const st = await readEmbeddingConfig(modelDir);
  const pooling = options.pooling ?? st.pooling ?? 'last';
  const modelName = options.modelName ?? basename(modelDir);
  const componentName = options.component ?? EMBEDDING_COMPONENT;
  // One input runs in one forward pass, so it may not be longer than a pass: the frontend then
  // refuses it with context_length_exceeded (the pool of a 32k-context model stays pass-sized).
  const contextLength = Math.min(options.contextLength ?? config.contextLength, config.contextLength, options.maxNumBatchedTokens);
  const log = runtime.logger.child({ component: componentName, model: modelName });
  const embedder = await createEmbedder(options, config.hiddenSize, pooling, st.normalize);
  const batcher = new EmbedBatcher(embedder, options.maxNumBatchedTokens);
  const metrics = new EmbeddingMetrics(runtime.metrics, modelName, batcher);

  async function* embed(request: EmbedRequest, ctx: RequestContext): AsyncGenerator<EmbedResponse> {
    const inputs = request?.inputs;
    if (!Array.isArray(inputs) || inputs.length === 0) throw new TandemError('invalid_argument', 'embed: no inputs');
    inputs.forEach((tokens, i) => {
      if (!Array.isArray(tokens) || tokens.length === 0) throw new TandemError('invalid_argument', `input ${i} has no tokens`);
      if (tokens.length > contextLength) throw new TandemError('invalid_argument', `input ${i} has ${tokens.length} tokens, more than the context length ${contextLength}`);
      for (const t of tokens) {
        if (!Number.isInteger(t) || t < 0 || t >= config.vocabSize) throw new TandemError('invalid_argument', `input ${i}: token id ${t} is outside the vocabulary (0..${config.vocabSize - 1})`);
      }
    });
    if (ctx.signal.aborted) return;
    // The caller's cancel (a client that went away, a deadline) drops the request's waiting
    // inputs and, when nobody else shares it, the engine call running them.
    const vectors = await batcher.submit(inputs, ctx.signal);
    metrics.requests.inc(metrics.labels);
    metrics.inputs.inc(metrics.labels, inputs.length);
    yield { dimensions: embedder.dimensions, vectors: new Uint8Array(vectors.buffer, vectors.byteOffset, vectors.byteLength) };
  }

  const component = runtime.namespace(options.namespace).component(componentName);
  const served = await component.endpoint(EMBED_ENDPOINT).serve(embed, { metadata: { model: modelName, role: 'agg', task: 'embed' } });
  const capability: EmbeddingCapability = {
    dimensions: embedder.dimensions,
    pooling,
    normalize: st.normalize,
    matryoshka: st.matryoshka,
    ...(st.matryoshkaDimensions ? { matryoshkaDimensions: st.matryoshkaDimensions } : {}),
  };
  const card: ModelCard = {
    name: modelName,
    modelPath: modelDir,
    tokenizerSource: modelDir,
    chatTemplateSource: modelDir,
    contextLength,
    kvBlockSize: options.blockSize,
    totalKvBlocks: 0,
    maxNumBatchedTokens: options.maxNumBatchedTokens,
    role: 'agg',
    engine: options.engine,
    component: componentName,
    endpoint: EMBED_ENDPOINT,
    instanceId: runtime.instanceId,
    eosTokenIds: config.eosTokenIds,
    task: 'embed',
    embedding: capability,
    ...(options.workerName !== undefined ? { workerName: options.workerName } : {}),
  };
  const cardKey = modelKey(options.namespace, modelName, runtime.instanceId);
  await runtime.discovery.put(cardKey, card);
  runtime.trackRegistration(cardKey, true);
  runtime.onShutdown(() => embedder.close());
  log.info(
    { instanceId: runtime.instanceId, address: served.record.address, engine: options.engine, task: 'embed', pooling, poolingFrom: options.pooling ? 'flag' : st.source, dimensions: embedder.dimensions },
    'worker ready',
  );
  return {
    card,
    batcher,
    close: async () => {
      await runtime.discovery.delete(cardKey).catch(() => undefined);
      await served.stop().catch(() => undefined);
      await embedder.close();
    },
  };
}

async function createEmbedder(options: EmbeddingWorkerOptions, hiddenSize: number, pooling: EmbeddingPooling, normalize: boolean): Promise<Embedder> {
  if (options.engine === 'mocker') {
    const perfModel = options.perfProfile !== undefined ? await loadMockerProfile(options.perfProfile) : new PolynomialPerfModel();
    return new MockEmbedder(hiddenSize, pooling, normalize, { perfModel, speedupRatio: options.speedupRatio });
  }
  const { createNativeEngine } = await import('../engines/native/index.js');
  // The pool is the pooling step's scratch: one pass of maxNumBatchedTokens (+ slack for the
  // partial last block of each packed sequence; Engine::embed starts a new pass when it is full).
  const tokens = options.maxNumBatchedTokens;
  const numBlocks = options.numGpuBlocks ?? Math.ceil(tokens / options.blockSize) + 64;
  const engine = await createNativeEngine({
    modelDir: options.modelDir,
    device: options.device,
    blockSize: options.blockSize,
    numBlocks,
    // A GPU sizes its activations for the largest pass (Engine::embed packs up to this many tokens).
    maxBatchTokens: tokens,
    ...(options.threads !== undefined ? { threads: options.threads } : {}),
  });
  return new NativeEmbedder(engine, pooling, normalize);
}

class EmbeddingMetrics {
  readonly labels: { model_name: string };
  readonly requests: Counter;
  readonly inputs: Counter;

  constructor(registry: Registry, model: string, batcher: EmbedBatcher) {
    const labels = { model_name: model };
    this.labels = labels;
    const counter = (name: string, help: string) => new Counter({ name, help, labelNames: ['model_name'], registers: [registry] });
    this.requests = counter('tandem_worker_embedding_requests_total', 'Embedding calls answered');
    this.inputs = counter('tandem_worker_embedding_inputs_total', 'Inputs embedded');
    this.requests.inc(labels, 0);
    this.inputs.inc(labels, 0);
    new Gauge({
      name: 'tandem_worker_embedding_inflight_requests',
      help: 'Embedding calls queued or running',
      labelNames: ['model_name'],
      registers: [registry],
      collect() {
        this.set(labels, batcher.inflight);
      },
    });
    // The batcher's own counters, read at scrape time (they only grow).
    const fromStats = (name: string, help: string, read: () => number) => {
      let seen = 0;
      new Counter({
        name,
        help,
        labelNames: ['model_name'],
        registers: [registry],
        collect() {
          const now = read();
          this.inc(labels, now - seen);
          seen = now;
        },
      });
    };
    fromStats('tandem_worker_embedding_batches_total', 'Engine calls run for embeddings (each within --max-num-batched-tokens, inputs taken round-robin over the requests waiting)', () => batcher.stats.batches);
    fromStats('tandem_worker_embedding_cancelled_requests_total', 'Embedding calls whose caller went away before the answer', () => batcher.stats.cancelledRequests);
    fromStats('tandem_worker_embedding_cancelled_inputs_total', 'Inputs of cancelled embedding calls that were never computed', () => batcher.stats.cancelledInputs);
  }
}
