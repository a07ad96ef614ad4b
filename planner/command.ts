/**
 * `runtime planner` and `runtime planner simulate`.
 *
 * Live mode (`runtime planner --config FILE`): observes the workers' `load_metrics` on the event
 * plane and the frontend's /metrics, decides every interval, and applies decisions through the
 * kubernetes or virtual connector (the local one lives in `runtime up --planner`). Every config
 * field is also a flag and a TANDEM_* variable (cli/main.ts binds them).
 * `simulate` replays a trace (a Mooncake JSONL file, or a synthetic day) through the fleet
 * simulator with the policy core, and compares the planner with static peak and static average
 * provisioning. Bad configuration (unknown pool, min > max, a negative interval, an unreadable
 * profile or trace) is a ConfigError: one line, exit 2.
 */
import { Command, Option } from 'commander';
import { readFileSync, writeFileSync } from 'node:fs';
import { activeShare, loadPerfProfile, PerfProfileError, PolynomialPerfModel, stepTimeModel, type ParameterCounts, type PerfModel } from '../perf-model/index.js';
import { addRuntimeOptions, ConfigError, createRuntimeFromOptions, intInRange, numberInRange, positiveInt, type RuntimeFlags } from '../runtime/index.js';
import { KubernetesConnector } from './connectors/kubernetes.js';
import { VirtualConnector } from './connectors/virtual.js';
import { startLivePlanner } from './live/live-planner.js';
import type { PoolConnector } from './policy/connector.js';
import { PREDICTOR_NAMES, type PredictorName } from './predictors/index.js';
import { defaultPlannerConfig, parsePlannerConfig, type PlannerConfig } from './policy/config.js';
import { compareProvisioning, formatComparison, plannerLabel, type Comparison } from './simulator/compare.js';
import { simulate } from './simulator/simulate.js';
import { DEFAULT_SYNTHETIC, SYNTHETIC_SHAPES, syntheticTrace, type SyntheticShape } from './simulator/synthetic.js';
import { readTraceBins } from './simulator/trace-file.js';
import { summarizeTrace, type TraceBins } from './simulator/trace.js';

interface LiveFlags extends RuntimeFlags {
  config?: string;
  connector: 'kubernetes' | 'virtual';
  k8sNamespace: string;
  ackTimeout: number;
  frontendMetricsUrl?: string;
  profile?: string;
  mode?: 'sla' | 'load';
  topology?: 'agg' | 'disagg';
  predictor?: PredictorName;
  ttftMs?: number;
  itlMs?: number;
  interval?: number;
  minWorkers?: number;
  maxWorkers?: number;
  kvCapacityTokens?: number;
}

interface SimulateFlags {
  profile?: string;
  trace?: string;
  synthetic?: SyntheticShape;
  hours: number;
  peakRps: number;
  swing: number;
  isl: number;
  osl: number;
  burstsPerHour: number;
  seed: number;
  tickS: number;
  config?: string;
  mode?: 'sla' | 'load';
  topology?: 'agg' | 'disagg';
  predictor?: PredictorName;
  ttftMs?: number;
  itlMs?: number;
  interval?: number;
  minWorkers?: number;
  maxWorkers?: number;
  kvCapacityTokens?: number;
  startupS: number;
  compare: boolean;
  json?: string;
  decisions?: string;
}

const positive = numberInRange(Number.MIN_VALUE);

/** The policy flags live mode and `simulate` share; each also reads them from a config file. */
function addPolicyOptions(cmd: Command): void {
  cmd
    .addOption(new Option('--mode <mode>', 'scaling policy (default sla)').choices(['sla', 'load']))
    .addOption(new Option('--topology <t>', 'pools: agg, or prefill + decode (default disagg)').choices(['agg', 'disagg']))
    .addOption(new Option('--predictor <name>', 'rate/ISL/OSL predictor (default kalman)').choices(PREDICTOR_NAMES))
    .option('--ttft-ms <ms>', 'TTFT target (default 500)', positive)
    .option('--itl-ms <ms>', 'ITL target (default 30)', positive)
    .option('--interval <s>', 'seconds between planner decisions (default 60)', numberInRange(-Infinity))
    .option('--min-workers <n>', 'minimum workers per pool (default 1)', intInRange(0))
    .option('--max-workers <n>', "total worker budget over all pools; also each pool's max", positiveInt)
    .option('--kv-capacity-tokens <n>', "KV capacity of one worker in tokens (default: the profile's worker.kvCapacityTokens, else 131072)", positiveInt);
}

export function registerPlannerCommand(program: Command): Command {
  const planner = program
    .command('planner')
    .description('SLA planner: scales the agg or prefill/decode pools through the kubernetes or virtual connector; `simulate` replays a trace')
    .option('--config <file>', 'planner config (YAML or JSON, see docs/planner.md); the flags below override it')
    .addOption(new Option('--connector <kind>', 'who carries out decisions').choices(['kubernetes', 'virtual']).default('kubernetes'))
    .option('--k8s-namespace <ns>', 'kubernetes: namespace of the pool Deployments', 'default')
    .option('--ack-timeout <s>', 'virtual: seconds to wait for an executor to acknowledge a decision', positive, 30)
    .option('--frontend-metrics-url <url>', "the frontend's Prometheus /metrics URL (traffic, TTFT, ITL; needed by sla mode)")
    .option('--profile <file>', 'perf profile JSON for sla mode (default: the polynomial model)')
    .enablePositionalOptions()
    .allowExcessArguments(true)
    .action(async (f: LiveFlags) => runLive(f));
  addPolicyOptions(planner);
  addRuntimeOptions(planner);

  const d = DEFAULT_SYNTHETIC;
  const simulateCmd = planner
    .command('simulate')
    .description('replay a trace through the fleet simulator: planner vs static peak vs static average')
    .option('--profile <file>', 'perf profile JSON (perf-model schema v1); default: the polynomial model')
    .option('--trace <file>', 'Mooncake JSONL trace (timestamp ms, input_length, output_length)')
    .addOption(new Option('--synthetic <shape>', `synthetic trace instead of --trace (default ${d.shape})`).choices(SYNTHETIC_SHAPES))
    .option('--hours <h>', 'synthetic: length in hours', positive, d.hours)
    .option('--peak-rps <r>', 'synthetic: peak request rate', positive, d.peakRps)
    .option('--swing <x>', 'synthetic: peak ÷ trough', numberInRange(1), d.swing)
    .option('--isl <n>', 'synthetic: mean input tokens', positiveInt, d.isl)
    .option('--osl <n>', 'synthetic: mean output tokens', positiveInt, d.osl)
    .option('--bursts-per-hour <n>', 'synthetic diurnal-bursty: mean bursts per hour', numberInRange(0), d.burstsPerHour)
    .option('--seed <n>', 'synthetic: seed', intInRange(0, 2 ** 31 - 1), d.seed)
    .option('--tick-s <s>', 'simulation tick in seconds', positive, 1)
    .option('--config <file>', 'planner config JSON (see docs/planner.md); flags below override it');
  addPolicyOptions(simulateCmd);
  simulateCmd
    .option('--startup-s <s>', 'seconds from scale-up to a ready worker', numberInRange(0), 120)
    .option('--no-compare', 'run the planner only (no static baselines)')
    .option('--json <file>', 'write the reports (and timelines) as JSON')
    .option('--decisions <file>', 'write every planner decision as JSONL')
    .action(async (f: SimulateFlags) => {
      const { perf, kvCapacityTokens } = await loadPlannerProfile(f.profile);
      const config = buildConfig(f, undefined, { kvCapacityTokens });
      const trace = loadTrace(f);
      const keepDecisions = f.decisions !== undefined;
      const now = () => performance.now();
      const result = f.compare
        ? compareProvisioning(perf, trace, config, f.startupS, now, keepDecisions)
        : timed(now, () => ({ trace: summarizeTrace(trace, config.intervalS), runs: [simulate({ label: plannerLabel(config), perf, trace, config, policy: { kind: 'planner' }, startupS: f.startupS, keepDecisions })] }));
      process.stdout.write(formatComparison(result));
      process.stdout.write(`simulated in ${(result.wallMs / 1000).toFixed(2)} s (targets: TTFT ${config.sla.ttftMs} ms, ITL ${config.sla.itlMs} ms; startup ${f.startupS} s; interval ${config.intervalS} s)\n`);
      if (f.decisions) {
        writeFileSync(f.decisions, (result.runs[0]!.decisions ?? []).map((x) => JSON.stringify(x)).join('\n') + '\n');
        process.stdout.write(`wrote ${f.decisions}\n`);
      }
      if (f.json) {
        const runs = result.runs.map(({ decisions: _d, ...r }) => r);
        writeFileSync(f.json, JSON.stringify({ config, startupS: f.startupS, trace: result.trace, wallMs: result.wallMs, runs }, null, 2) + '\n');
        process.stdout.write(`wrote ${f.json}\n`);
      }
    });
  return planner;
}

async function runLive(f: LiveFlags): Promise<void> {
  const raw = f.config !== undefined ? await readPlannerConfigFile(f.config) : undefined;
  const { perf, kvCapacityTokens } = await loadPlannerProfile(f.profile);
  const config = buildConfig(f, raw, { kvCapacityTokens });
  if (config.mode === 'sla' && f.frontendMetricsUrl === undefined) throw new ConfigError('sla mode needs --frontend-metrics-url (the frontend /metrics it sizes from)');
  const runtime = await createRuntimeFromOptions(f, 'planner');
  const log = runtime.logger.child({ component: 'planner' });
  let connector: PoolConnector;
  if (f.connector === 'kubernetes') connector = await KubernetesConnector.create({ namespace: f.k8sNamespace, log: (msg, fields) => log.info(fields, msg) });
  else {
    const initial = Object.fromEntries(Object.entries(config.pools).map(([p, b]) => [p, b!.min]));
    connector = new VirtualConnector({ discovery: runtime.discovery, namespace: f.namespace, initial, ackTimeoutMs: f.ackTimeout * 1000 });
  }
  const live = await startLivePlanner({ config, perf, runtime, namespace: f.namespace, connector, ...(f.frontendMetricsUrl ? { frontendMetricsUrl: f.frontendMetricsUrl } : {}), log: (level, msg, fields) => log[level](fields, msg) });
  runtime.onShutdown(() => live.stop());
  log.info({ mode: config.mode, connector: f.connector, intervalS: config.intervalS, pools: config.pools, maxWorkers: config.maxWorkers }, 'planner running');
}

/** A YAML (.yaml/.yml) or JSON config file, parsed; unreadable or malformed → ConfigError. */
export async function readPlannerConfigFile(path: string): Promise<unknown> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError(`cannot read planner config ${path}: ${(err as Error).message}`);
  }
  try {
    if (/\.ya?ml$/i.test(path)) {
      const { loadYaml } = await import('@kubernetes/client-node'); // its js-yaml; loaded only for YAML
      return loadYaml<unknown>(text) ?? {};
    }
    return JSON.parse(text) as unknown;
  } catch (err) {
    throw new ConfigError(`planner config ${path}: invalid ${/\.ya?ml$/i.test(path) ? 'YAML' : 'JSON'} (${(err as Error).message.split('\n')[0]})`);
  }
}

function timed(now: () => number, run: () => Omit<Comparison, 'wallMs'>): Comparison {
  const t0 = now();
  const r = run();
  return { ...r, wallMs: now() - t0 };
}

/** The perf model for SLA sizing: a profile JSON, or the polynomial model. Unreadable → ConfigError. */
export async function loadPlannerPerf(path: string | undefined): Promise<PerfModel> {
  return (await loadPlannerProfile(path)).perf;
}

/** What the planner takes from a profile: the model, and the profiled worker's KV capacity. */
export interface PlannerProfile {
  /** The profile's model, else the default fit (which knows no model: see `plannerPerf`). */
  perf: PerfModel;
  /** True when `perf` was measured (a profile file), not the default fit. */
  measured: boolean;
  /** `worker.kvCapacityTokens` of a `runtime profile` file; absent in a bare schema-v1 model. */
  kvCapacityTokens?: number;
}

/**
 * The perf model plus the KV capacity the profiled worker had. Sizing decode with another
 * worker's capacity (the 131072 default) misjudges how many sequences fit, so the profile's
 * value is the default whenever no flag or config file names one (buildConfig's `defaults`).
 */
export async function loadPlannerProfile(path: string | undefined): Promise<PlannerProfile> {
  if (path === undefined) return { perf: new PolynomialPerfModel(), measured: false };
  let perf: PerfModel;
  try {
    perf = await loadPerfProfile(path);
  } catch (err) {
    if (err instanceof PerfProfileError) throw new ConfigError(err.message);
    throw err;
  }
  // The `worker` section is informational in schema v1 (perf-model ignores it), so it is read here.
  const worker = (JSON.parse(readFileSync(path, 'utf8')) as { worker?: unknown }).worker;
  if (worker === undefined || worker === null || typeof worker !== 'object') return { perf, measured: true };
  const kv = (worker as { kvCapacityTokens?: unknown }).kvCapacityTokens;
  if (kv === undefined) return { perf, measured: true };
  if (typeof kv !== 'number' || !Number.isInteger(kv) || kv <= 0) throw new ConfigError(`perf profile ${path}: worker.kvCapacityTokens must be an integer > 0, got ${JSON.stringify(kv)}`);
  return { perf, measured: true, kvCapacityTokens: kv };
}

/**
 * The planner's step-time model for a fleet serving a model of `params` parameters: a measured
 * profile as it is, else the default fit charged the model's active share: perf-model's
 * `stepTimeModel`, the derivation the mocker sleeps and the KV router's latency cost predicts
 * with, so a mixture of experts is sized by what one token reads (its memory, by the total, is
 * in the workers' KV capacity). `runtime up --planner` passes the served model's counts.
 */
export function plannerPerf(profile: PlannerProfile, params?: ParameterCounts): PerfModel {
  return stepTimeModel(params, profile.measured ? profile.perf : undefined);
}

/** One line for logs: where the planner's step times come from. */
export function plannerPerfSource(profile: PlannerProfile, params?: ParameterCounts): string {
  if (profile.measured) return 'the perf profile';
  const share = params === undefined ? 1 : activeShare(params);
  return share === 1 ? 'the default fit' : `the default fit x active share ${share.toFixed(4)}`;
}

function loadTrace(f: SimulateFlags): TraceBins {
  if (f.trace !== undefined && f.synthetic !== undefined) throw new ConfigError('give --trace or --synthetic, not both');
  if (f.trace !== undefined) return readTraceBins(f.trace, f.tickS);
  return syntheticTrace({ shape: f.synthetic ?? DEFAULT_SYNTHETIC.shape, hours: f.hours, peakRps: f.peakRps, swing: f.swing, isl: f.isl, osl: f.osl, burstsPerHour: f.burstsPerHour, seed: f.seed, tickS: f.tickS });
}

/**
 * Config file (if any) over the defaults, then explicit flags; validated once at the end.
 * `defaults` replace built-in defaults (the profiled worker's KV capacity) but lose to the file
 * and the flags (TANDEM_* variables arrive as flags).
 */
export function buildConfig(f: Partial<SimulateFlags>, preloaded?: unknown, defaults: { kvCapacityTokens?: number | undefined } = {}): PlannerConfig {
  let raw = (preloaded ?? {}) as Record<string, unknown>;
  if (f.config !== undefined && preloaded === undefined) {
    let text: string;
    try {
      text = readFileSync(f.config, 'utf8');
    } catch (err) {
      throw new ConfigError(`cannot read planner config ${f.config}: ${(err as Error).message}`);
    }
    try {
      raw = JSON.parse(text) as Record<string, unknown>;
    } catch (err) {
      throw new ConfigError(`planner config ${f.config}: invalid JSON (${(err as Error).message})`);
    }
  }
  const base = defaultPlannerConfig();
  if (defaults.kvCapacityTokens !== undefined) base.sla.kvCapacityTokens = defaults.kvCapacityTokens;
  const fromFile = parsePlannerConfig(raw, base);
  const c: PlannerConfig = { ...fromFile, sla: { ...fromFile.sla }, pools: { ...fromFile.pools } };
  if (f.mode) c.mode = f.mode;
  if (f.predictor) c.predictor = f.predictor;
  if (f.interval !== undefined) c.intervalS = f.interval;
  if (f.ttftMs !== undefined) c.sla.ttftMs = f.ttftMs;
  if (f.itlMs !== undefined) c.sla.itlMs = f.itlMs;
  if (f.kvCapacityTokens !== undefined) c.sla.kvCapacityTokens = f.kvCapacityTokens;
  if (f.topology === 'agg' && !c.pools.agg) c.pools = { agg: c.pools.decode ?? { ...base.pools.decode! } };
  if (f.topology === 'disagg' && c.pools.agg) c.pools = { prefill: { ...c.pools.agg }, decode: { ...c.pools.agg } };
  if (f.maxWorkers !== undefined || f.minWorkers !== undefined) {
    for (const [name, p] of Object.entries(c.pools)) {
      const q = { ...p! };
      if (f.maxWorkers !== undefined) q.max = f.maxWorkers;
      if (f.minWorkers !== undefined) {
        q.min = f.minWorkers;
        if (f.minWorkers === 0) q.allowZero = true;
      }
      c.pools[name as keyof PlannerConfig['pools']] = q;
    }
    if (f.maxWorkers !== undefined) c.maxWorkers = f.maxWorkers;
  }
  return parsePlannerConfig(c as unknown as Record<string, unknown>, base);
}
