/**
 * startFrontend: wires discovery (model watcher), worker clients, codecs, the routing selector,
 * admission and metrics into the HTTP server, and returns {url, port, drain(), close()}.
 */
import type { AddressInfo } from 'node:net';
import pino, { type Logger } from 'pino';
import { Registry } from 'prom-client';
import type { Discovery } from '../runtime/index.js';
import { DEFAULT_NAMESPACE } from '../runtime/index.js';
import { ModelCardFeed } from '../runtime/index.js';
import { DistributedRuntime } from '../runtime/index.js';
import { ConfigError } from '../runtime/errors.js';
import { listenOn } from '../runtime/index.js';
import { AdmissionGate } from './admission.js';
import { CodecCache, type CodecLoader } from './codec.js';
import { startDisaggregation, type DisaggOptions } from './disagg/index.js';
import { ApiKeyFile, ApiKeySet, keySource, type MetricsAuth } from './http/auth.js';
import { DEFAULT_CONNECTION_LIMITS, type ConnectionLimits } from './http/connection-limits.js';
import { createHttpServer, createMemoryHandle, type HttpServerContext } from './http/server.js';
import type { MemoryRequest, MemoryResponse } from './http/in-memory.js';
import { RESPONSE_STORE_DEFAULTS, ResponseStore, type ResponseStoreOptions } from './api/responses/response-store.js';
import { startDashboard, type Dashboard, type DashboardOptions } from './dashboard/index.js';
import { LocalKvBackend } from '../router/adapters/index.js';
import { FrontendMetrics } from './metrics.js';
import { DEFAULT_MODEL_GRACE_MS, ModelWatcher } from './model-watcher.js';
import { GenerationPipeline } from './pipeline/generation.js';
import { DEFAULT_MODEL_PARSERS, type ReasoningParserOption, type ToolCallParserOption } from './openai/structured.js';
import { createKvSelector, type KvSelector, type KvSelectorConfig } from './kv-selector.js';
import { createSelector, type RouterMode, type WorkerSelector } from './routing.js';
import { WorkerHealth } from './worker-health.js';
import { runtimeConnector, type RuntimeLike, type WorkerConnector } from './worker-client.js';
import { WorkerClients } from './worker-clients.js';
import { EmbeddingsService } from './embeddings/index.js';
import { LoraAdmin } from './lora/lora-admin.js';
import { DEFAULT_COMPILE_LIMITS, GrammarCompiler, type CompileLimits } from '../grammar/index.js';

export interface FrontendRuntime extends RuntimeLike {
  readonly discovery: Discovery;
  readonly metrics?: Registry;
  readonly logger?: Logger;
}

export interface FrontendOptions {
  /** The process runtime; supplies discovery, worker clients, metrics registry and logger. */
  runtime?: FrontendRuntime;
  /** Overrides (tests): where model cards are watched, and how workers are reached. */
  discovery?: Discovery;
  connector?: WorkerConnector;
  namespace?: string;
  host?: string;
  /** 0 = any free port. */
  httpPort?: number;
  routerMode?: RouterMode;
  /** A selector to use instead of the built-in modes (the KV router plugs in here). */
  selector?: WorkerSelector;
  /** `--router-mode kv` without `selector`: the KV router's flags (needs a DistributedRuntime). */
  kvRouter?: KvSelectorConfig;
  /** The prefill router (disaggregated prefill/decode when prefill workers exist); false = off. */
  disagg?: DisaggOptions | false;
  migrationLimit?: number;
  /**
   * How long a request waits for a worker when none of its pool is up and no prefill worker can
   * run it (a lone worker died and is being restarted), before the first byte and on migration
   * (ms); 0 = fail at once.
   */
  migrationWaitMs?: number;
  /**
   * How long a model stays known once its last worker's card is gone (ms): its requests get
   * 503 no_instances meanwhile, not 404 (default DEFAULT_MODEL_GRACE_MS); 0 = removed at once.
   */
  modelGraceMs?: number;
  maxInflightRequests?: number;
  maxBodyBytes?: number;
  retryAfterSeconds?: number;
  /** How long a worker that failed with 'unavailable' is kept out of routing (ms). */
  unavailableCooldownMs?: number;
  /** How tokenizers and chat templates are loaded; default: frontend/preprocess (Hugging Face). */
  codecLoader?: CodecLoader;
  /** Threads that render and tokenize large prompts (default codec only); default: the cores. */
  preprocessThreads?: number;
  /** Budget of each new output grammar's check (`--grammar-compile-timeout-ms`, `--grammar-compile-memory-mb`). */
  grammarLimits?: CompileLimits;
  /** HTTP timeouts, connection cap and header size; unset fields keep DEFAULT_CONNECTION_LIMITS. */
  limits?: Partial<ConnectionLimits>;
  registry?: Registry;
  logger?: Logger;
  /** Accepted API keys; with none (and no apiKeyFile) every route is open. */
  apiKeys?: string[];
  /** A file of API keys, one per line, re-read on change; missing or empty at start: ConfigError. */
  apiKeyFile?: string;
  /** Keys of the admin routes (LoRA load/unload; http/auth.ts ADMIN_PATHS), also accepted everywhere else. */
  adminApiKeys?: string[];
  /** Whether /metrics needs a key when keys are set; default 'required'. */
  metricsAuth?: MetricsAuth;
  /** Origins allowed by CORS ('*' = any); default none: CORS off. */
  corsOrigins?: string[];
  /** `/dashboard` (frontend/dashboard/); on by default, false = off. */
  dashboard?: DashboardOptions | false;
  /** Tool-call format of the served models' output; default 'auto' (from each chat template). */
  toolCallParser?: ToolCallParserOption;
  /** 'think': split `<think>…</think>` into `reasoning_content`; default 'none'. */
  reasoningParser?: ReasoningParserOption;
  /** The Responses API's stored responses (`--responses-store-size`, `--responses-store-ttl`); default RESPONSE_STORE_DEFAULTS. */
  responsesStore?: ResponseStoreOptions;
}

export interface FrontendHandle {
  url: string;
  port: number;
  models: ModelWatcher;
  metrics: FrontendMetrics;
  admission: AdmissionGate;
  /** The live dashboard, unless turned off. */
  dashboard?: Dashboard;
  /** One request through the HTTP routes without a socket (http/in-memory.ts): tests of a route. */
  handle(request: MemoryRequest): Promise<MemoryResponse>;
  /**
   * Graceful stop (SIGTERM): refuse new generation requests (503 + Retry-After, /health 503),
   * let admitted ones finish for up to `timeoutMs`, then end the rest with an error (an SSE
   * error frame, or an error response). Resolves when nothing is in flight. Idempotent.
   */
  drain(timeoutMs: number): Promise<void>;
  /** Stop listening and release everything; whatever is still in flight is cut as by `drain(0)`. */
  close(): Promise<void>;
}

/** After a drain cut, how long handlers get to write their error frames. */
const CUT_GRACE_MS = 2_000;
/** After the last request, how long finished responses get to flush before sockets are closed. */
const CLOSE_GRACE_MS = 1_000;

export const FRONTEND_DEFAULTS = {
  httpPort: 8000,
  host: '0.0.0.0',
  routerMode: 'round-robin' as RouterMode,
  migrationLimit: 3,
  migrationWaitMs: 30_000,
  maxInflightRequests: 2048,
  maxBodyBytes: 16 * 1024 * 1024,
  retryAfterSeconds: 1,
  unavailableCooldownMs: 5000,
};

export async function startFrontend(options: FrontendOptions): Promise<FrontendHandle> {
  const namespace = options.namespace ?? DEFAULT_NAMESPACE;
  const discovery = options.discovery ?? options.runtime?.discovery;
  if (!discovery) throw new Error('startFrontend needs a runtime or a discovery');
  const connector = options.connector ?? (options.runtime ? runtimeConnector(options.runtime, namespace) : undefined);
  if (!connector) throw new Error('startFrontend needs a runtime or a worker connector');
  const log = options.logger ?? options.runtime?.logger ?? pino({ level: 'silent' });
  const registry = options.registry ?? options.runtime?.metrics ?? new Registry();
  // First, so a bad key file fails start-up before anything is opened.
  const keyFile = options.apiKeyFile !== undefined ? ApiKeyFile.open(options.apiKeyFile, { extraKeys: options.apiKeys ?? [], log }) : undefined;
  const keys = keySource(options.apiKeys ?? [], keyFile);
  const adminKeys = (options.adminApiKeys ?? []).length > 0 ? new ApiKeySet(options.adminApiKeys!) : undefined;
  const routerMode = options.routerMode ?? FRONTEND_DEFAULTS.routerMode;
  // The one watch of model cards and the one client cache; every card reader below shares them.
  const cards = await ModelCardFeed.start(discovery, namespace, log);
  const clients = new WorkerClients(cards, connector, log);
  let ownedSelector: KvSelector | undefined;
  if (options.selector === undefined && routerMode === 'kv') {
    if (!(options.runtime instanceof DistributedRuntime)) throw new ConfigError("router mode 'kv' needs the distributed runtime (or pass `selector`)");
    ownedSelector = await createKvSelector(options.runtime, namespace, options.kvRouter, { cards });
  }
  const selector = options.selector ?? ownedSelector ?? createSelector(routerMode);
  const preprocess = options.codecLoader ? undefined : await defaultCodecLoader(options.preprocessThreads);
  const codecLoader = options.codecLoader ?? preprocess!.loader;

  const models = new ModelWatcher(cards, clients, log, { graceMs: options.modelGraceMs ?? DEFAULT_MODEL_GRACE_MS });
  const created = new Map<string, number>();
  const codecs = new CodecCache(codecLoader);
  models.onChange((change) => {
    if (change.type !== 'model_added') return;
    if (!created.has(change.name)) created.set(change.name, Math.floor(Date.now() / 1000));
    // Warm the tokenizer so the first request does not pay for loading it.
    const card = models.model(change.name)?.primaryCard();
    if (card) codecs.get(card).catch((err: unknown) => log.warn({ err, model: change.name }, 'could not load tokenizer'));
  });
  for (const name of models.names()) {
    created.set(name, Math.floor(Date.now() / 1000));
    const card = models.model(name)?.primaryCard();
    if (card) codecs.get(card).catch((err: unknown) => log.warn({ err, model: name }, 'could not load tokenizer'));
  }

  const metrics = new FrontendMetrics(registry);
  const admission = new AdmissionGate(options.maxInflightRequests ?? FRONTEND_DEFAULTS.maxInflightRequests);
  const health = new WorkerHealth(options.unavailableCooldownMs ?? FRONTEND_DEFAULTS.unavailableCooldownMs);
  const disagg =
    options.disagg === false
      ? undefined
      : await startDisaggregation({ cards, clients, connector, registry, log, health }, { ...(ownedSelector ? { kvBackend: ownedSelector.backend } : {}), ...options.disagg });
  const routerComponent = options.kvRouter?.routerEndpoint ? options.kvRouter.routerEndpoint.split('/', 1)[0] : undefined;
  const hub = ownedSelector?.backend instanceof LocalKvBackend ? ownedSelector.backend.hub : undefined;
  const dashboard =
    options.dashboard === false
      ? undefined
      : startDashboard(
          {
            info: {
              instanceId: options.runtime instanceof DistributedRuntime ? options.runtime.instanceId : '0000000000000000',
              startedAt: Date.now(),
              routerMode: selector.mode,
              draining: () => admission.draining,
              inflight: () => admission.inflight,
              ...(hub ? { routerStats: () => hub.indexStats() } : {}),
            },
            cards,
            namespace,
            ...(options.runtime instanceof DistributedRuntime ? { runtime: options.runtime } : {}),
            ...(hub ? { hub } : {}),
            ...(routerComponent ? { routerComponent } : {}),
            keysOn: () => keys() !== undefined,
            log,
          },
          options.dashboard ?? {},
        );
  // Output grammars are compiled off the event loop: two threads, so one slow grammar does not hold up the rest.
  const grammar = new GrammarCompiler({ limits: options.grammarLimits ?? DEFAULT_COMPILE_LIMITS, threads: 2, log });
  const pipeline = new GenerationPipeline({
    grammar,
    models,
    codecs,
    selector,
    migrationLimit: options.migrationLimit ?? FRONTEND_DEFAULTS.migrationLimit,
    migrationWaitMs: options.migrationWaitMs ?? FRONTEND_DEFAULTS.migrationWaitMs,
    health,
    ...(disagg ? { disagg: disagg.disaggregator } : {}),
    parsers: {
      toolCallParser: options.toolCallParser ?? DEFAULT_MODEL_PARSERS.toolCallParser,
      reasoningParser: options.reasoningParser ?? DEFAULT_MODEL_PARSERS.reasoningParser,
    },
    onMigrate: (model, from, generated, cause) => {
      metrics.migrations.inc({ model });
      dashboard?.state.migrated();
      log.warn({ model, from, generated, err: cause }, 'worker failed mid-stream: migrating request');
    },
  });
  const loraAdmin = new LoraAdmin(models, connector, log);
  const httpContext: HttpServerContext = {
    loraAdmin,
    pipeline,
    gate: admission,
    metrics,
    models,
    registry,
    log,
    maxBodyBytes: options.maxBodyBytes ?? FRONTEND_DEFAULTS.maxBodyBytes,
    retryAfterSeconds: options.retryAfterSeconds ?? FRONTEND_DEFAULTS.retryAfterSeconds,
    modelCreated: (name) => created.get(name) ?? Math.floor(Date.now() / 1000),
    ...(keys() !== undefined || adminKeys !== undefined ? { access: { keys, metricsAuth: options.metricsAuth ?? 'required', ...(adminKeys !== undefined ? { adminKeys } : {}) } } : {}),
    corsOrigins: new Set(options.corsOrigins ?? []),
    limits: { ...DEFAULT_CONNECTION_LIMITS, ...options.limits },
    ...(dashboard ? { dashboard: dashboard.state, dashboardRoutes: dashboard } : {}),
    responses: new ResponseStore(options.responsesStore ?? RESPONSE_STORE_DEFAULTS),
    embeddings: new EmbeddingsService(cards, clients, codecs, health, (name) => models.isIdle(name)),
  };
  const server = createHttpServer(httpContext);
  const handle = createMemoryHandle(httpContext);
  const closeParts = async () => {
    loraAdmin.close();
    keyFile?.close();
    await dashboard?.close();
    models.close();
    disagg?.close();
    await ownedSelector?.close();
    clients.close();
    cards.close();
    await preprocess?.pool.close();
    await grammar.close();
  };
  const host = options.host ?? FRONTEND_DEFAULTS.host;
  try {
    await listenOn(server, options.httpPort ?? FRONTEND_DEFAULTS.httpPort, host, '--http-port');
  } catch (err) {
    await closeParts();
    throw err;
  }
  const port = (server.address() as AddressInfo).port;
  const urlHost = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host.includes(':') ? `[${host}]` : host;
  const url = `http://${urlHost}:${port}`;
  log.info({ url, routerMode: selector.mode, namespace }, 'frontend listening');

  let draining: Promise<void> | undefined;
  const drain = (timeoutMs: number): Promise<void> =>
    (draining ??= (async () => {
      // The listener stays open while draining: a request that still arrives gets a 503 it can
      // retry elsewhere, not a refused connection.
      admission.beginDrain();
      if (admission.inflight > 0) log.info({ inflight: admission.inflight, timeoutMs }, 'draining: refusing new requests, waiting for in-flight ones');
      if (await admission.whenIdle(timeoutMs)) return;
      log.warn({ inflight: admission.inflight }, 'drain timeout: ending in-flight requests with an error');
      admission.cutInflight();
      await admission.whenIdle(CUT_GRACE_MS);
    })());
  let closing: Promise<void> | undefined;
  return {
    url,
    port,
    models,
    metrics,
    admission,
    ...(dashboard ? { dashboard } : {}),
    handle,
    drain,
    close() {
      closing ??= (async () => {
        await drain(0);
        // Dashboard streams never end on their own: end them so the server can close now.
        dashboard?.stream.close();
        await new Promise<void>((resolve) => {
          server.close(() => resolve());
          server.closeIdleConnections();
          // Every response has ended; give the last bytes a moment to leave, then close.
          setTimeout(() => server.closeAllConnections(), CLOSE_GRACE_MS).unref();
        });
        await closeParts();
      })();
      return closing;
    },
  };
}

/**
 * frontend/preprocess is loaded lazily so the frontend core does not depend on it at import time.
 * Its thread pool starts threads on first use and is closed with the frontend.
 */
async function defaultCodecLoader(threads: number | undefined): Promise<{ loader: CodecLoader; pool: { close(): Promise<void> } }> {
  const [{ createHfCodecLoader }, { PreprocessPool }] = await Promise.all([import('./hf-codec.js'), import('./preprocess/pool.js')]);
  const pool = new PreprocessPool(threads !== undefined ? { threads } : {});
  return { loader: createHfCodecLoader({ pool }), pool };
}
