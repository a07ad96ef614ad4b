/**
 * `runtime frontend`: the OpenAI HTTP server as a process. Runtime flags (--namespace,
 * --discovery, --event-plane, --host, ...) come from addRuntimeOptions; `--host` is also the
 * interface the HTTP server binds.
 */
import { Option, type Command } from 'commander';
import { intInRange, nonNegativeInt, oneOf, parsePort, positiveInt } from '../runtime/config.js';
import { addKvRouterOptions, type KvRouterFlags } from '../router/adapters/kv-router-options.js';
import { addRuntimeOptions, createRuntimeFromOptions, type RuntimeFlags } from '../runtime/runtime-options.js';
import { DEFAULT_DISAGG_POLICY } from './disagg/policy.js';
import { FRONTEND_DEFAULTS, startFrontend } from './frontend.js';
import { ROUTER_MODES, type RouterMode } from './routing.js';

export interface FrontendFlags extends RuntimeFlags, KvRouterFlags {
  routerEndpoint?: string;
  httpPort: number;
  routerMode: RouterMode;
  migrationLimit: number;
  maxInflightRequests: number;
  maxBodyBytes: number;
  retryAfter: number;
  preprocessThreads?: number;
  disaggMinPrefillTokens: number;
  enforceDisagg: boolean;
}

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
    .addOption(new Option('--max-inflight-requests <n>', 'generation requests in flight before answering 503').argParser(positiveInt).default(FRONTEND_DEFAULTS.maxInflightRequests))
    .addOption(new Option('--max-body-bytes <n>', 'largest accepted request body').argParser(intInRange(1024)).default(FRONTEND_DEFAULTS.maxBodyBytes))
    .addOption(new Option('--retry-after <seconds>', 'Retry-After sent with overload answers').argParser(intInRange(0, 3600)).default(FRONTEND_DEFAULTS.retryAfterSeconds))
    .addOption(new Option('--preprocess-threads <n>', 'threads that render chat templates and tokenize large prompts (default: the number of cores)').argParser(positiveInt));
  cmd.option('--router-endpoint <component[/endpoint]>', "kv: delegate routing to standalone `runtime router` replicas (e.g. 'router')");
  addKvRouterOptions(cmd);
  cmd
    .addOption(
      new Option('--disagg-min-prefill-tokens <n>', 'disaggregate when a prefill pool exists and at least this many prompt tokens are uncached')
        .argParser(nonNegativeInt)
        .default(DEFAULT_DISAGG_POLICY.minPrefillTokens),
    )
    .option('--enforce-disagg', 'with no prefill workers answer 503 (Retry-After) instead of running aggregated', false);
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
        ...(flags.routerEndpoint !== undefined ? { routerEndpoint: flags.routerEndpoint } : {}),
      },
      disagg: { minPrefillTokens: flags.disaggMinPrefillTokens, enforce: flags.enforceDisagg },
      migrationLimit: flags.migrationLimit,
      maxInflightRequests: flags.maxInflightRequests,
      maxBodyBytes: flags.maxBodyBytes,
      retryAfterSeconds: flags.retryAfter,
      ...(flags.preprocessThreads !== undefined ? { preprocessThreads: flags.preprocessThreads } : {}),
    });
    runtime.onShutdown(() => frontend.close());
    runtime.markReady();
    process.stdout.write(`frontend listening on ${frontend.url}\n`);
  });
  return cmd;
}
