/**
 * `runtime frontend`: the OpenAI HTTP server as a process. Runtime flags (--namespace,
 * --discovery, --event-plane, --host, ...) come from addRuntimeOptions; `--host` is also the
 * interface the HTTP server binds.
 */
import { Option, type Command } from 'commander';
import { intInRange, nonNegativeInt, numberInRange, oneOf, parsePort, positiveInt } from '../runtime/index.js';
import { addKvRouterOptions, type KvRouterFlags } from '../router/adapters/index.js';
import { addRuntimeOptions, createRuntimeFromOptions, type RuntimeFlags } from '../runtime/index.js';
import { DEFAULT_DISAGG_POLICY } from './disagg/policy.js';
import { METRICS_AUTH_MODES, parseKeyList, type MetricsAuth } from './http/auth.js';
import { FRONTEND_DEFAULTS, startFrontend } from './frontend.js';
import { DEFAULT_MODEL_GRACE_MS } from './model-watcher.js';
import { DEFAULT_CONNECTION_LIMITS } from './http/connection-limits.js';
import { ROUTER_MODES, type RouterMode } from './routing.js';
import { DEFAULT_MODEL_PARSERS, REASONING_PARSERS, TOOL_CALL_PARSERS, type ReasoningParserOption, type ToolCallParserOption } from './openai/structured.js';
import { RESPONSE_STORE_DEFAULTS } from './api/responses/response-store.js';
import { DEFAULT_COMPILE_MEMORY_MB, DEFAULT_COMPILE_TIMEOUT_MS, compileLimits } from '../grammar/index.js';

export interface FrontendFlags extends RuntimeFlags, KvRouterFlags {
  routerEndpoint?: string;
  httpPort: number;
  routerMode: RouterMode;
  migrationLimit: number;
  migrationWait: number;
  modelGracePeriod: number;
  maxInflightRequests: number;
  maxBodyBytes: number;
  retryAfter: number;
  preprocessThreads?: number;
  grammarCompileTimeoutMs: number;
  grammarCompileMemoryMb: number;
  disaggMinPrefillTokens: number;
  enforceDisagg: boolean;
  kvLayerStreaming?: boolean;
  apiKey?: string[];
  apiKeyFile?: string;
  adminApiKey?: string[];
  metricsAuth?: MetricsAuth;
  corsOrigins?: string[];
  httpHeaderTimeout: number;
  httpRequestTimeout: number;
  httpIdleTimeout: number;
  maxConnections: number;
  maxProbeConnections: number;
  maxHeaderBytes: number;
  toolCallParser: ToolCallParserOption;
  reasoningParser: ReasoningParserOption;
  responsesStoreSize: number;
  responsesStoreTtl: number;
}

const DAY_SECONDS = 86_400;
const toMs = (seconds: number) => Math.round(seconds * 1000);

export function registerFrontendCommand(program: Command): Command {
  const cmd = program
    .command('frontend')
    .description('OpenAI-compatible HTTP frontend: preprocess, route and stream to workers')
    .addOption(new Option('--http-port <port>', 'HTTP port (0 = any free port)').argParser(parsePort).default(FRONTEND_DEFAULTS.httpPort))
    .addOption(
      new Option('--router-mode <mode>', `worker selection: ${ROUTER_MODES.join(' | ')}`)
        .argParser(oneOf(ROUTER_MODES))
        .default(FRONTEND_DEFAULTS.routerMode),
    )
    .addOption(new Option('--migration-limit <n>', 'times a stream may move to another worker after a worker failure').argParser(nonNegativeInt).default(FRONTEND_DEFAULTS.migrationLimit))
    .addOption(
      new Option('--migration-wait <seconds>', 'how long a request waits for a worker when none of its pool is up and no prefill worker can run it (a lone worker died and is restarting); 0 = fail at once')
        .argParser(numberInRange(0, DAY_SECONDS))
        .default(FRONTEND_DEFAULTS.migrationWaitMs / 1000),
    )
    .addOption(
      new Option('--model-grace-period <seconds>', 'how long a model stays listed once all its workers are gone (a crash loop): its requests get 503 no_instances with Retry-After meanwhile, not 404; 0 = forget it at once')
        .argParser(numberInRange(0, DAY_SECONDS))
        .default(DEFAULT_MODEL_GRACE_MS / 1000),
    )
    .addOption(new Option('--max-inflight-requests <n>', 'generation requests in flight before answering 503').argParser(positiveInt).default(FRONTEND_DEFAULTS.maxInflightRequests))
    .addOption(new Option('--max-body-bytes <n>', 'largest accepted request body').argParser(intInRange(1024)).default(FRONTEND_DEFAULTS.maxBodyBytes))
    .addOption(new Option('--retry-after <seconds>', 'Retry-After sent with overload answers').argParser(intInRange(0, 3600)).default(FRONTEND_DEFAULTS.retryAfterSeconds))
    .addOption(new Option('--preprocess-threads <n>', 'threads that render chat templates and tokenize large prompts (default: the number of cores)').argParser(positiveInt))
    .addOption(new Option('--grammar-compile-timeout-ms <ms>', 'structured output: most wall time the check of one new grammar may take (then 400)').argParser(intInRange(1, 3_600_000)).default(DEFAULT_COMPILE_TIMEOUT_MS))
    .addOption(new Option('--grammar-compile-memory-mb <mb>', 'structured output: most memory the automaton of one new grammar may need (then 400)').argParser(numberInRange(0.001)).default(DEFAULT_COMPILE_MEMORY_MB));
  cmd.option('--router-endpoint <component[/endpoint]>', "kv: delegate routing to standalone `runtime router` replicas (e.g. 'router')");
  addKvRouterOptions(cmd);
  cmd
    .addOption(
      new Option('--disagg-min-prefill-tokens <n>', 'disaggregate when a prefill pool exists and at least this many prompt tokens are uncached')
        .argParser(nonNegativeInt)
        .default(DEFAULT_DISAGG_POLICY.minPrefillTokens),
    )
    .option('--enforce-disagg', 'with no prefill workers answer 503 (Retry-After) instead of running aggregated', false)
    .option('--kv-layer-streaming', 'disaggregated: decode workers started with --kv-layer-streaming copy each hand-off layer by layer while the prefill computes (docs/disaggregation.md)');
  cmd
    .addOption(new Option('--api-key <key>', 'accept this API key (repeatable; a comma-separated list also works, as in TANDEM_API_KEY); every route but /health and /live then needs it').argParser(parseKeyList))
    .addOption(new Option('--api-key-file <path>', 'accept the keys in this file, one per line (# comments); re-read when it changes'))
    .addOption(
      new Option('--admin-api-key <key>', 'the key of the admin routes (LoRA load/unload), which refuse inference keys once any key is set (repeatable or comma-separated); also accepted on every other route').argParser(parseKeyList),
    )
    .addOption(new Option('--metrics-auth <mode>', `with API keys set, whether /metrics needs one: ${METRICS_AUTH_MODES.join(' | ')} (default: required)`).argParser(oneOf(METRICS_AUTH_MODES)))
    .addOption(new Option('--cors-origins <origins>', "comma-separated origins allowed by CORS ('*' = any); default: CORS off").argParser((v: string) => v.split(',').map((o) => o.trim()).filter((o) => o.length > 0)));
  const limits = DEFAULT_CONNECTION_LIMITS;
  cmd
    .addOption(new Option('--http-header-timeout <seconds>', 'time a client has to send its request headers').argParser(numberInRange(0.001, DAY_SECONDS)).default(limits.headerTimeoutMs / 1000))
    .addOption(
      new Option('--http-request-timeout <seconds>', 'time a client has to send its whole request (headers and body; 0 = no limit); never limits the response, so long streams are unaffected')
        .argParser(numberInRange(0, DAY_SECONDS))
        .default(limits.requestTimeoutMs / 1000),
    )
    .addOption(new Option('--http-idle-timeout <seconds>', 'how long an idle keep-alive connection stays open between requests').argParser(numberInRange(0.001, DAY_SECONDS)).default(limits.idleTimeoutMs / 1000))
    .addOption(new Option('--max-connections <n>', 'HTTP connections held at once; past it only --max-probe-connections more, for /live and /health (0 = no cap)').argParser(nonNegativeInt).default(limits.maxConnections))
    .addOption(
      new Option('--max-probe-connections <n>', 'connections past --max-connections kept for GET /live and /health alone (each must send its request within 2 s; any other request gets 503)')
        .argParser(nonNegativeInt)
        .default(limits.maxProbeConnections),
    )
    .addOption(new Option('--max-header-bytes <n>', 'largest request head (request line and headers); more gets 431').argParser(intInRange(1024, 1024 * 1024)).default(limits.maxHeaderBytes));
  cmd
    .addOption(
      new Option('--tool-call-parser <format>', `how tool calls are read from (and forced into) model output: ${TOOL_CALL_PARSERS.join(' | ')} (auto: from each model's chat template)`)
        .argParser(oneOf(TOOL_CALL_PARSERS))
        .default(DEFAULT_MODEL_PARSERS.toolCallParser),
    )
    .addOption(
      new Option('--reasoning-parser <parser>', `${REASONING_PARSERS.join(' | ')}; think: <think>…</think> in the output becomes reasoning_content (DeepSeek-R1, Qwen3)`)
        .argParser(oneOf(REASONING_PARSERS))
        .default(DEFAULT_MODEL_PARSERS.reasoningParser),
    )
    .addOption(
      new Option('--responses-store-size <n>', 'Responses API: most stored responses kept for GET and previous_response_id (least recently used go first)')
        .argParser(positiveInt)
        .default(RESPONSE_STORE_DEFAULTS.maxEntries),
    )
    .addOption(
      new Option('--responses-store-ttl <seconds>', 'Responses API: how long a stored response is kept after it was written')
        .argParser(numberInRange(1, 30 * DAY_SECONDS))
        .default(RESPONSE_STORE_DEFAULTS.ttlMs / 1000),
    );
  addRuntimeOptions(cmd);
  cmd.action(async (flags: FrontendFlags) => {
    const runtime = await createRuntimeFromOptions(flags, 'frontend');
    const frontend = await startFrontend({
      runtime,
      namespace: flags.namespace,
      host: flags.host,
      httpPort: flags.httpPort,
      routerMode: flags.routerMode,
      kvRouter: {
        kvOverlapScoreCredit: flags.kvOverlapScoreCredit,
        routerPrefillLoadScale: flags.routerPrefillLoadScale,
        routerTemperature: flags.routerTemperature,
        routerMaxKvUsage: flags.routerMaxKvUsage,
        routerReplicaSync: flags.routerReplicaSync,
        kvEvents: flags.kvEvents,
        ...(flags.routerCost !== undefined ? { routerCost: flags.routerCost } : {}),
        ...(flags.routerItlWeight !== undefined ? { routerItlWeight: flags.routerItlWeight } : {}),
        ...(flags.routerTtftTargetMs !== undefined ? { routerTtftTargetMs: flags.routerTtftTargetMs } : {}),
        ...(flags.routerItlTargetMs !== undefined ? { routerItlTargetMs: flags.routerItlTargetMs } : {}),
        ...(flags.routerPerfProfile !== undefined ? { routerPerfProfile: flags.routerPerfProfile } : {}),
        ...(flags.routerEndpoint !== undefined ? { routerEndpoint: flags.routerEndpoint } : {}),
        ...(flags.routerHostHitWeight !== undefined ? { routerHostHitWeight: flags.routerHostHitWeight } : {}),
        ...(flags.routerDiskHitWeight !== undefined ? { routerDiskHitWeight: flags.routerDiskHitWeight } : {}),
      },
      disagg: { minPrefillTokens: flags.disaggMinPrefillTokens, enforce: flags.enforceDisagg, ...(flags.kvLayerStreaming === true ? { layerStreaming: true } : {}) },
      migrationLimit: flags.migrationLimit,
      migrationWaitMs: toMs(flags.migrationWait),
      modelGraceMs: toMs(flags.modelGracePeriod),
      maxInflightRequests: flags.maxInflightRequests,
      maxBodyBytes: flags.maxBodyBytes,
      retryAfterSeconds: flags.retryAfter,
      ...(flags.preprocessThreads !== undefined ? { preprocessThreads: flags.preprocessThreads } : {}),
      grammarLimits: compileLimits(flags.grammarCompileTimeoutMs, flags.grammarCompileMemoryMb),
      ...(flags.apiKey !== undefined ? { apiKeys: flags.apiKey } : {}),
      ...(flags.apiKeyFile !== undefined ? { apiKeyFile: flags.apiKeyFile } : {}),
      ...(flags.adminApiKey !== undefined ? { adminApiKeys: flags.adminApiKey } : {}),
      ...(flags.metricsAuth !== undefined ? { metricsAuth: flags.metricsAuth } : {}),
      ...(flags.corsOrigins !== undefined ? { corsOrigins: flags.corsOrigins } : {}),
      toolCallParser: flags.toolCallParser,
      reasoningParser: flags.reasoningParser,
      responsesStore: { maxEntries: flags.responsesStoreSize, ttlMs: toMs(flags.responsesStoreTtl) },
      limits: {
        headerTimeoutMs: toMs(flags.httpHeaderTimeout),
        requestTimeoutMs: toMs(flags.httpRequestTimeout),
        idleTimeoutMs: toMs(flags.httpIdleTimeout),
        maxConnections: flags.maxConnections,
        maxProbeConnections: flags.maxProbeConnections,
        maxHeaderBytes: flags.maxHeaderBytes,
      },
    }).catch(async (err: unknown) => {
      // Leave no lease or connection behind; the CLI prints the error (cli/main.ts).
      await runtime.shutdown('start-up failed');
      throw err;
    });
    // SIGTERM: stop admitting and let streams finish (--drain-timeout), then close.
    runtime.onDrain((timeoutMs) => frontend.drain(timeoutMs));
    runtime.onShutdown(() => frontend.close());
    runtime.markReady();
    process.stdout.write(`frontend listening on ${frontend.url}\n`);
  });
  return cmd;
}
