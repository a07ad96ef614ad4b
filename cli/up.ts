/**
 * `runtime up`: everything on this machine. It starts the frontend and the workers as child
 * processes that find each other through file discovery and direct events (or etcd + NATS when
 * asked), prints the URL and a curl line, restarts a child that crashes (with backoff), and stops
 * everything on Ctrl-C, SIGTERM or SIGHUP: the frontend first (it drains), then the workers.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Option, type Command } from 'commander';
import { checkFlagRules, nonNegativeInt, oneOf, parsePort, type FlagRule } from '../runtime/index.js';
import { DistributedRuntime, DEFAULT_NAMESPACE, etcdEndpointsFromEnv, natsServerFromEnv } from '../runtime/index.js';
import { LocalConnector, buildConfig, loadPlannerPerf, loadPlannerProfile, plannerPerf, plannerPerfSource, readPlannerConfigFile, startLivePlanner, type LivePlanner, type LocalWorker, type PlannerConfig, type PlannerProfile, type PoolName } from '../planner/index.js';
import { DEFAULT_RESTART_POLICY, EXIT_CODES, StopSignals, Supervisor, recordWithMsg, runtimeCommand, type RestartPolicy } from '../runtime/index.js';
import { checkWorkerFlags, parameterCounts, readModelConfig, resolveModel, type WorkerRuleFlags } from '../workers/index.js';
import { checkChildArgs } from './child-args.js';
import { upBanner } from './up-banner.js';
import { childArgs, ownDiskTier, shownLevel, type UpFlags } from './up-children.js';

export { gpuMemoryShare } from './up-children.js';

/**
 * `--planner`: the pools the workers were started in, bounded by --min-workers / --max-workers,
 * with `up`'s own pacing (a config file, when given, sets everything else). Validated before any
 * process starts, so a bad value is exit 2 with nothing to clean up.
 */
async function upPlannerConfig(flags: UpFlags, profileKvCapacityTokens: number | undefined): Promise<PlannerConfig | undefined> {
  if (flags.planner === undefined || flags.maxWorkers === undefined) return undefined; // UP_FLAG_RULES refused the second
  const disagg = flags.prefill + flags.decode > 0;
  const raw = flags.plannerConfig !== undefined ? await readPlannerConfigFile(flags.plannerConfig) : undefined;
  const c = buildConfig({ mode: flags.planner, interval: flags.plannerInterval, minWorkers: flags.minWorkers, maxWorkers: flags.maxWorkers, topology: disagg ? 'disagg' : 'agg' }, raw, { kvCapacityTokens: profileKvCapacityTokens });
  if (flags.plannerConfig === undefined) {
    // One machine: react within a few intervals (the cluster defaults wait minutes).
    c.cooldownDownS = 5 * c.intervalS;
    c.scaleDownIntervals = 3;
    c.pendingTimeoutS = Math.max(60, 10 * c.intervalS);
  }
  return c;
}

/**
 * The combinations of `up`'s own flags that cannot run, checked before anything starts (exit 2,
 * one line). Flags `up` passes on are checked by their child's own rules too (checkForwardedFlags).
 */
const UP_FLAG_RULES: readonly FlagRule<UpFlags>[] = [
  {
    broken: (f) => (f.workers ?? 0) + f.prefill + f.decode + f.embeddingWorkers === 0,
    message: 'runtime up needs at least one worker (--workers, --prefill with --decode, or --embedding-workers)',
  },
  { broken: (f) => f.prefill > 0 && f.decode === 0, message: '--prefill needs --decode workers too' },
  { broken: (f) => f.perfProfile !== undefined && f.engine !== 'mocker', message: '--perf-profile is for the mocker engine' },
  { broken: (f) => f.planner !== undefined && f.maxWorkers === undefined, message: '--planner needs --max-workers N (the total worker budget)' },
  {
    // up passes --speculative to generation workers only
    broken: (f) => (f.speculative ?? 'off') !== 'off' && (f.workers ?? 0) + f.prefill + f.decode === 0,
    message: '--speculative is for generation workers; this fleet has only embedding workers',
  },
];

/** Restart a crashed child after 0.5 s, 1 s, 2 s, … at most 30 s; a 30 s run resets the backoff. */
const UP_RESTART_POLICY: RestartPolicy = DEFAULT_RESTART_POLICY;
/** Beyond the children's own drain timeout, before SIGKILL. */
const STOP_SLACK_MS = 5_000;

/** The `--drain-timeout` passed through to the frontend (seconds), else the runtime default. */
function drainTimeoutMs(frontendExtra: string[]): number {
  const at = frontendExtra.findIndex((a) => a === '--drain-timeout' || a.startsWith('--drain-timeout='));
  const raw = at < 0 ? undefined : frontendExtra[at]!.includes('=') ? frontendExtra[at]!.split('=')[1] : frontendExtra[at + 1];
  const seconds = Number(raw ?? process.env.TANDEM_DRAIN_TIMEOUT ?? 30);
  return (Number.isFinite(seconds) && seconds >= 0 ? seconds : 30) * 1000;
}

async function waitForModel(urlOf: () => string, timeoutMs: number, failed: () => Error | undefined, routable: number): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const err = failed();
    if (err) throw err;
    try {
      // /health lists routable (agg + decode) instances per model; prefill workers never are.
      const res = await fetch(`${urlOf()}/health`);
      const body = (await res.json()) as { models?: Array<{ name: string; instances: number }> };
      const model = body.models?.find((m) => m.instances >= routable);
      if (model) return model.name;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`the frontend did not list a model within ${timeoutMs / 1000} s`);
}

export function registerUpCommand(program: Command): void {
  program
    .command('up')
    .description('all-in-one on this machine: frontend + workers, embedded discovery and events')
    .addOption(new Option('--engine <engine>', 'worker engine: mocker | native').argParser(oneOf(['mocker', 'native'] as const)).default('mocker'))
    .addOption(new Option('--model <dir>', "model directory, or 'tiny' for a generated tiny Llama").default('tiny'))
    .addOption(new Option('--workers <n>', 'aggregated workers (default 2, or 1 on a GPU; 0 with --prefill/--decode or --embedding-workers)').argParser(nonNegativeInt))
    .addOption(new Option('--prefill <n>', 'prefill workers (disaggregated mode)').argParser(nonNegativeInt).default(0))
    .addOption(new Option('--decode <n>', 'decode workers (disaggregated mode)').argParser(nonNegativeInt).default(0))
    .addOption(new Option('--http-port <port>', 'frontend HTTP port').argParser(parsePort).default(8000))
    .addOption(new Option('--host <host>', 'frontend bind host').default('127.0.0.1'))
    .addOption(new Option('--discovery <kind>', "file | etcd (not memory: that works within one process, and up's children are separate processes)").argParser(oneOf(['file', 'etcd'] as const)).default('file'))
    .addOption(new Option('--event-plane <kind>', 'direct | nats').argParser(oneOf(['direct', 'nats'] as const)).default('direct'))
    .option('--speedup-ratio <x>', 'mocker: divide simulated time by this')
    .option('--num-gpu-blocks <n>', 'KV blocks per worker')
    .option('--block-size <n>', 'tokens per KV block')
    .option('--max-num-seqs <n>', 'running sequences per worker')
    .option('--max-num-batched-tokens <n>', 'token budget per step')
    .option('--device <device>', 'native engine device: cpu | cuda | cuda:N')
    .option('--gpu-memory-utilization <share>', 'native on a GPU: share of device memory per GPU (default 0.9, split between the workers on it)')
    .option('--enforce-eager', 'native on a GPU: no CUDA graphs')
    .option('--threads <n>', 'native engine compute threads per worker')
    .option('--kv-bytes-per-token <bytes>', 'prefill/decode with the mocker: KV bytes per token of its host pool (131072 = 8B-shaped)')
    .option('--kv-release-timeout <seconds>', 'prefill: free pinned KV blocks no decode worker released after this long')
    .option('--kv-layer-streaming', 'disaggregated, host KV pools and device pools on one node: decode workers copy each hand-off layer by layer while the prefill computes (frontend and workers)')
    .option('--context-length <n>', 'cap the model context length of every worker')
    .option('--kv-cache-memory <bytes>', 'native: KV pool budget in bytes per worker when --num-gpu-blocks is not set')
    .option('--kv-cache-dtype <dtype>', 'KV cache element type per worker: auto | bf16 | fp8 (e4m3: twice the tokens in the same memory)')
    .option('--quantization <method>', 'native weights: fp8 (quantize at load) | none (dequantize an FP8 checkpoint); default: the checkpoint\'s own')
    .option('--grammar-compile-timeout-ms <ms>', 'structured output: most wall time one new grammar may take to compile, in the frontend\'s check and in each worker (then 400)')
    .option('--grammar-compile-memory-mb <mb>', 'structured output: most memory one new grammar may need, in the frontend\'s check and in each worker (then 400)')
    .option('--lora <name=dir>', 'serve this PEFT LoRA adapter on every worker (repeatable)', (v: string, prev: string[] = []) => [...prev, v])
    .option('--max-loras <n>', 'most distinct LoRA adapters in one step, per worker')
    .option('--max-cpu-loras <n>', 'most LoRA adapters resident per worker')
    .option('--max-lora-rank <r>', 'refuse LoRA adapters of a higher rank')
    .option('--max-lora-bytes <bytes>', 'refuse LoRA adapters whose weight files are larger (default 2 GiB)')
    .option('--max-lora-loads <n>', 'LoRA adapter loads reading files at once, per worker (default 2)')
    .option('--lora-root <dir>', 'run-time LoRA loads must name a directory under this one (repeatable)', (v: string, prev: string[] = []) => [...prev, v])
    .option('--perf-profile <file>', 'mocker: every worker runs this perf profile (`runtime profile --out`); also the planner\'s unless --planner-profile')
    .option('--kv-host-cache-gb <gib>', 'KV tier G2: host memory per worker for blocks evicted from its pool')
    .option('--kv-disk-cache-dir <dir>', 'KV tier G3: directory for blocks pushed out of the host tier (each worker uses DIR/<its name>, e.g. agg-0)')
    .option('--kv-disk-cache-gb <gib>', 'KV tier G3: disk space per worker')
    .option('--kv-disk-min-reuse <n>', 'KV tier G3: prefix hits a block needs before it is written to disk (default 2)')
    .option('--log-level <level>', 'log level of the children', 'info')
    .addOption(new Option('--planner <mode>', 'run the planner in-process (local connector): load | sla').argParser(oneOf(['load', 'sla'] as const)))
    .addOption(new Option('--max-workers <n>', 'planner: total workers over all pools (also each pool\'s max)').argParser(nonNegativeInt))
    .addOption(new Option('--min-workers <n>', 'planner: minimum workers per pool').argParser(nonNegativeInt).default(1))
    .addOption(new Option('--planner-interval <seconds>', 'planner: seconds between decisions').argParser(Number).default(10))
    .option('--planner-config <file>', 'planner: config file (YAML or JSON, see docs/planner.md); the flags above override it')
    .option('--planner-profile <file>', 'planner, sla mode: perf profile JSON (default: the polynomial model)')
    .addOption(new Option('--embedding-workers <n>', 'embedding workers (`worker --task embed`) serving /v1/embeddings; without --workers, the fleet is embedding-only').argParser(nonNegativeInt).default(0))
    .option('--pooling <mode>', "embedding workers: last | mean (default: the model's sentence-transformers config, else last)")
    .option('--speculative <method>', 'generation workers: speculative decoding, off | ngram | suffix (docs/speculative.md)')
    .option('--num-speculative-tokens <n>', 'generation workers: most drafts a sequence verifies per step')
    .option('--prompt-lookup-min <n>', 'generation workers, ngram: shortest n-gram matched')
    .option('--prompt-lookup-max <n>', 'generation workers, ngram: longest n-gram matched')
    .option('--spec-acceptance <p>', 'mocker workers with --speculative: the chance each draft is accepted')
    .allowUnknownOption(true)
    .allowExcessArguments(true)
    .addHelpText(
      'after',
      '\nUnknown flags (for example --router-mode kv, --disagg-min-prefill-tokens 512, --enforce-disagg) are passed to the frontend.' +
        '\nDisaggregated: runtime up --prefill 1 --decode 1 (prompts with at least --disagg-min-prefill-tokens uncached tokens prefill on the prefill pool).',
    )
    .action(async (flags: UpFlags, cmd: Command) => {
      const onGpu = flags.engine === 'native' && flags.device !== undefined && flags.device !== 'cpu';
      flags.workers ??= flags.prefill + flags.decode + flags.embeddingWorkers > 0 ? 0 : onGpu ? 1 : 2;
      checkFlagRules(UP_FLAG_RULES, flags);
      const frontend = checkForwardedFlags(cmd.parent!, flags, cmd.args);
      // a bad file is exit 2 here, not a worker dying at start
      if (flags.perfProfile !== undefined) await loadPlannerPerf(flags.perfProfile);
      // The profile before the config: its worker's KV capacity is the planner's default.
      const profile = flags.planner !== undefined ? await loadPlannerProfile(flags.plannerProfile ?? flags.perfProfile) : undefined;
      const plannerConfig = await upPlannerConfig(flags, profile?.kvCapacityTokens);
      const keyed = frontend.apiKey !== undefined || frontend.apiKeyFile !== undefined;
      await runUp(flags, cmd.args, keyed, plannerConfig && profile ? { config: plannerConfig, profile } : undefined);
    });
}

/** The served model's parameter counts (its config.json), or undefined when it cannot be read (the workers will say why). */
async function servedParameters(modelDir: string): Promise<{ total: number; active: number } | undefined> {
  try {
    return parameterCounts(await readModelConfig(modelDir));
  } catch {
    return undefined;
  }
}

/**
 * Every flag `up` passes on, checked by the child that would read it, values and combinations
 * (the worker's own rules, workers/process/worker-flag-rules.ts): exit 2 before anything starts.
 * Returns the frontend's parsed flags (the banner reads whether it needs a key).
 */
function checkForwardedFlags(program: Command, flags: UpFlags, frontendExtra: string[]): Record<string, unknown> {
  const args = childArgs(flags, frontendExtra, { modelDir: flags.model, discoveryDir: 'unused' });
  const frontend = checkChildArgs(program, 'frontend', args.frontend.slice(1), 'runtime up passes flags it does not know to the frontend');
  const toWorkers = 'runtime up passes it to every worker';
  const pools: Array<[string, number]> = [['agg', flags.workers ?? 0], ['prefill', flags.prefill], ['decode', flags.decode]];
  for (const [pool, count] of pools) {
    const parsed = checkChildArgs(program, 'worker', args.worker(pool, `${pool}-0`).slice(1), toWorkers);
    // A pool that starts empty may still be scaled up by the planner.
    if (count > 0 || flags.planner !== undefined) checkWorkerFlags(parsed as unknown as WorkerRuleFlags, toWorkers);
  }
  if (flags.embeddingWorkers > 0) {
    const toEmbed = 'runtime up passes it to every embedding worker';
    checkWorkerFlags(checkChildArgs(program, 'worker', args.embedWorker('embed-0').slice(1), toEmbed) as unknown as WorkerRuleFlags, toEmbed);
  }
  return frontend;
}

async function runUp(flags: UpFlags, frontendExtra: string[], keyed: boolean, plan?: { config: PlannerConfig; profile: PlannerProfile }): Promise<void> {
  const modelDir = await resolveModel(flags.model, (dir) => process.stderr.write(`runtime up: generating the tiny model in ${dir}\n`));
  // The served model's size: without a profile the planner charges a MoE its active share, as its mocker workers do.
  const params = plan !== undefined ? await servedParameters(modelDir) : undefined;
  const discoveryDir = mkdtempSync(join(tmpdir(), 'tandem-up-'));
  const argv = childArgs(flags, frontendExtra, { modelDir, discoveryDir });
  const graceMs = drainTimeoutMs(frontendExtra) + STOP_SLACK_MS;

  let phase: 'starting' | 'serving' | 'stopping' = 'starting';
  let startupFailure: Error | undefined;
  const say = (line: string) => process.stderr.write(`runtime up: ${line}\n`);
  const supervisor = new Supervisor({
    onEvent: (e) => {
      if (e.type === 'started') say(`${e.name} started (pid ${e.pid})${e.restarts > 0 ? `, restart ${e.restarts}` : ''}`);
      else if (e.type === 'exited') {
        if (e.expected) say(`${e.name} stopped (code ${e.code}, signal ${e.signal})`);
        else {
          say(`${e.name} exited unexpectedly (code ${e.code}, signal ${e.signal}) after ${(e.ranMs / 1000).toFixed(1)} s`);
          if (phase === 'starting') startupFailure ??= new Error(`${e.name} exited during start-up (see its log above)`);
        }
      } else if (e.type === 'restarting') {
        if (phase === 'serving') say(`restarting ${e.name} in ${e.delayMs} ms (attempt ${e.attempt})`);
      } else say(`${e.name} crashed ${e.crashes} times in a row; not restarting it`);
    },
  });
  // Own process group (detached): a terminal's Ctrl-C reaches only `up`, which stops each child
  // once (in the terminal's group a child would get SIGINT and then our SIGTERM: a second signal, no drain).
  const start = (name: string, args: string[]) =>
    supervisor.start({ name, ...runtimeCommand(args), detached: true, log: { stderrPrefix: true, stderrMinLevel: shownLevel(flags) }, stopGraceMs: graceMs, restart: UP_RESTART_POLICY });

  const workerNames: string[] = [];
  let planner: { live: LivePlanner; runtime: DistributedRuntime } | undefined;
  let stopping: Promise<void> | undefined;
  const stopAll = (code: number): Promise<void> =>
    (stopping ??= (async () => {
      phase = 'stopping';
      say('stopping');
      // The planner first: nothing may start or stop workers behind the shutdown.
      if (planner) {
        await planner.live.stop().catch(() => undefined);
        await planner.runtime.shutdown().catch(() => undefined);
      }
      // The frontend first: it stops taking requests and lets in-flight streams finish on the
      // workers, which must still be there. Then the workers, which by now have nothing in flight.
      await supervisor.stop(['frontend']);
      await supervisor.stop(workerNames);
      rmSync(discoveryDir, { recursive: true, force: true });
      process.exit(code);
    })());
  // A second Ctrl-C means "now": no more waiting for drains. The same Ctrl-C forwarded by a
  // wrapper (`npx runtime up`: npm forwards the terminal's SIGINT) is not a second one.
  const signals = new StopSignals();
  const onSignal = (signal: NodeJS.Signals) => {
    const action = signals.receive(signal, Date.now());
    if (action === 'duplicate') return;
    if (action === 'now') {
      supervisor.killNow();
      rmSync(discoveryDir, { recursive: true, force: true });
      process.exit(EXIT_CODES.interrupted);
    }
    void stopAll(0);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  process.on('SIGHUP', onSignal); // terminal closed: children no longer share its group

  const frontend = start('frontend', argv.frontend);
  const roles: Array<[string, number]> = [
    ['agg', flags.workers ?? 0],
    ['prefill', flags.prefill],
    ['decode', flags.decode],
  ];
  const workers: Array<ReturnType<typeof start>> = [];
  const initial: Partial<Record<PoolName, LocalWorker[]>> = {};
  // A worker's /metrics is on a port of its own, from its "status server listening" record. The
  // banner lists the first ones; a worker started after it (a restart, the planner) says its own.
  const metricsUrl = (run: ReturnType<typeof start>['current']): Promise<string | undefined> =>
    run.waitFor(recordWithMsg('status server listening'), { timeoutMs: 120_000, what: 'status server listening' }).then(
      (record) => (typeof record.url === 'string' ? `${record.url}/metrics` : undefined),
      () => undefined, // it exited first: the supervisor says so
    );
  const watchMetrics = (name: string, child: ReturnType<typeof start>) => {
    const sayUrl = (run: typeof child.current) => {
      if (phase === 'serving') void metricsUrl(run).then((at) => at !== undefined && say(`${name} metrics at ${at}`));
    };
    sayUrl(child.current);
    child.onRestart(sayUrl);
  };
  const startChild = (name: string, args: string[]) => {
    workerNames.push(name);
    const child = start(name, args);
    workers.push(child);
    watchMetrics(name, child);
    return child;
  };
  const startWorker = (pool: string, name: string): LocalWorker => {
    const child = startChild(name, ownDiskTier(argv.worker(pool, name), name));
    return { name, stop: () => child.stop() };
  };
  for (const [mode, count] of roles) {
    for (let i = 0; i < count; i++) (initial[mode as PoolName] ??= []).push(startWorker(mode, `${mode}-${i}`));
  }
  for (let i = 0; i < flags.embeddingWorkers; i++) startChild(`embed-${i}`, argv.embedWorker(`embed-${i}`));

  const configuredUrl = `http://${flags.host === '0.0.0.0' ? '127.0.0.1' : flags.host}:${flags.httpPort}`;
  // The frontend says where it listens; with --http-port 0 that is the only way to know the port.
  let listeningUrl: string | undefined;
  const urlOf = () => (listeningUrl ?? configuredUrl).replace('://0.0.0.0:', '://127.0.0.1:');
  try {
    const startTimeout = { timeoutMs: 120_000 };
    // Every worker must be up before "ready": a model listed from a prefill card alone cannot serve.
    // Another server on the port would answer /health too: ask only once our own frontend listens.
    const [listening] = await Promise.all([
      frontend.current.waitFor(recordWithMsg('frontend listening'), { ...startTimeout, what: 'frontend listening' }),
      ...workers.map((w) => w.current.waitFor(recordWithMsg('worker ready'), { ...startTimeout, what: 'worker ready' })),
    ]);
    if (typeof listening.url === 'string') listeningUrl = listening.url;
    // A restarted frontend listens again (on another port with --http-port 0): say where.
    frontend.onRestart((run) => {
      run
        .waitFor(recordWithMsg('frontend listening'), { ...startTimeout, what: 'frontend listening' })
        .then((record) => {
          if (typeof record.url === 'string') say(`frontend listening again at ${record.url.replace('://0.0.0.0:', '://127.0.0.1:')}`);
        })
        .catch(() => undefined); // it crashed again: the supervisor says so
    });
    const model = await waitForModel(urlOf, 120_000, () => startupFailure, Math.max(1, (flags.workers ?? 0) + flags.decode + flags.embeddingWorkers));
    if (startupFailure) throw startupFailure;
    // Every worker said "worker ready", which it logs after its status server listens.
    const metrics = await Promise.all(workers.map(async (w, i) => ({ name: workerNames[i]!, url: await metricsUrl(w.current) })));
    phase = 'serving';
    const url = urlOf();
    process.stdout.write(
      upBanner({
        url,
        model,
        workers: { agg: flags.workers ?? 0, prefill: flags.prefill, decode: flags.decode, embedding: flags.embeddingWorkers },
        keyed,
        keyInEnv: process.env.TANDEM_API_KEY !== undefined && process.env.TANDEM_API_KEY !== '' && !frontendExtra.some((a) => a === '--api-key' || a.startsWith('--api-key=')),
        adapters: (flags.lora ?? []).map((l) => l.slice(0, l.indexOf('='))),
        metrics: metrics.flatMap((m) => (m.url !== undefined ? [{ name: m.name, url: m.url }] : [])),
      }),
    );
    if (plan) {
      const runtime = await DistributedRuntime.create({
        name: 'planner',
        discovery: flags.discovery,
        ...(flags.discovery === 'file' ? { discoveryDir } : {}),
        ...(flags.discovery === 'etcd' ? { etcdEndpoints: etcdEndpointsFromEnv() } : {}),
        eventPlane: flags.eventPlane,
        ...(flags.eventPlane === 'nats' ? { natsServer: natsServerFromEnv() } : {}),
        logLevel: flags.logLevel,
        manageProcess: false,
      });
      // A worker the planner stops drains (SIGTERM: leave discovery, finish streams, exit).
      const connector = new LocalConnector((pool, name) => startWorker(pool, name), initial, (msg, f) => say(`planner: ${msg} ${f.name} (${f.pool}, ${f.rule})`));
      const live = await startLivePlanner({
        config: plan.config,
        perf: plannerPerf(plan.profile, params),
        runtime,
        namespace: DEFAULT_NAMESPACE,
        connector,
        frontendMetricsUrl: `${url}/metrics`,
        log: (level, msg, f) => say(`${msg} ${JSON.stringify(f)}`),
      });
      planner = { live, runtime };
      say(`planner: ${plan.config.mode} mode every ${plan.config.intervalS} s, pools ${Object.entries(plan.config.pools).map(([p, b]) => `${p} ${b!.min}..${b!.max}`).join(', ')}, budget ${plan.config.maxWorkers ?? 'none'}, step times from ${plannerPerfSource(plan.profile, params)}`);
    }
  } catch (err) {
    say((err as Error).message);
    await stopAll(1);
  }
}
