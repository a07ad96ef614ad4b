/**
 * `runtime planner` and `runtime planner simulate`.
 *
 * Live mode (`runtime planner --config FILE`) needs the connectors (local, virtual, kubernetes)
 * and the live observation source, which are not built yet: it says so and exits 2.
 * `simulate` replays a trace (a Mooncake JSONL file, or a synthetic day) through the fleet
 * simulator with the policy core, and compares the planner with static peak and static average
 * provisioning. Bad configuration (unknown pool, min > max, a negative interval, an unreadable
 * profile or trace) is a ConfigError: one line, exit 2.
 */
import { Command, Option } from 'commander';
import { readFileSync, writeFileSync } from 'node:fs';
import { loadPerfProfile, PerfProfileError, PolynomialPerfModel, type PerfModel } from '../perf-model/index.js';
import { ConfigError, intInRange, numberInRange, positiveInt } from '../runtime/index.js';
import { PREDICTOR_NAMES, type PredictorName } from './predictors/index.js';
import { defaultPlannerConfig, parsePlannerConfig, type PlannerConfig } from './policy/config.js';
import { compareProvisioning, formatComparison, plannerLabel, type Comparison } from './simulator/compare.js';
import { simulate } from './simulator/simulate.js';
import { DEFAULT_SYNTHETIC, SYNTHETIC_SHAPES, syntheticTrace, type SyntheticShape } from './simulator/synthetic.js';
import { readTraceBins } from './simulator/trace-file.js';
import { summarizeTrace, type TraceBins } from './simulator/trace.js';

export const LIVE_NOT_BUILT =
  'runtime planner: live mode is not built yet: the local, virtual and kubernetes connectors and the live metrics source come with the rest of issue 13. ' +
  'The policy core and the simulator are here: try `runtime planner simulate --synthetic diurnal-bursty`.';

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

export function registerPlannerCommand(program: Command): Command {
  const planner = program
    .command('planner')
    .description('SLA planner: scales the agg or prefill/decode pools (live mode: not built yet; `simulate` works)')
    .option('--config <file>', 'planner config (JSON) for live mode')
    .enablePositionalOptions()
    .allowExcessArguments(true)
    .action(() => {
      process.stderr.write(`${LIVE_NOT_BUILT}\n`);
      process.exit(2);
    });

  const d = DEFAULT_SYNTHETIC;
  planner
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
    .option('--config <file>', 'planner config JSON (see docs/planner.md); flags below override it')
    .addOption(new Option('--mode <mode>', 'scaling policy (default sla)').choices(['sla', 'load']))
    .addOption(new Option('--topology <t>', 'pools: agg, or prefill + decode (default disagg)').choices(['agg', 'disagg']))
    .addOption(new Option('--predictor <name>', 'rate/ISL/OSL predictor (default kalman)').choices(PREDICTOR_NAMES))
    .option('--ttft-ms <ms>', 'TTFT target (default 500)', positive)
    .option('--itl-ms <ms>', 'ITL target (default 30)', positive)
    .option('--interval <s>', 'seconds between planner decisions (default 60)', numberInRange(-Infinity))
    .option('--min-workers <n>', 'minimum workers per pool (default 1)', intInRange(0))
    .option('--max-workers <n>', 'total worker budget over all pools; also each pool\'s max', positiveInt)
    .option('--kv-capacity-tokens <n>', 'KV capacity of one worker in tokens (default 131072)', positiveInt)
    .option('--startup-s <s>', 'seconds from scale-up to a ready worker', numberInRange(0), 120)
    .option('--no-compare', 'run the planner only (no static baselines)')
    .option('--json <file>', 'write the reports (and timelines) as JSON')
    .option('--decisions <file>', 'write every planner decision as JSONL')
    .action(async (f: SimulateFlags) => {
      const perf = await loadPerf(f.profile);
      const config = buildConfig(f);
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

function timed(now: () => number, run: () => Omit<Comparison, 'wallMs'>): Comparison {
  const t0 = now();
  const r = run();
  return { ...r, wallMs: now() - t0 };
}

async function loadPerf(path: string | undefined): Promise<PerfModel> {
  if (path === undefined) return new PolynomialPerfModel();
  try {
    return await loadPerfProfile(path);
  } catch (err) {
    if (err instanceof PerfProfileError) throw new ConfigError(err.message);
    throw err;
  }
}

function loadTrace(f: SimulateFlags): TraceBins {
  if (f.trace !== undefined && f.synthetic !== undefined) throw new ConfigError('give --trace or --synthetic, not both');
  if (f.trace !== undefined) return readTraceBins(f.trace, f.tickS);
  return syntheticTrace({ shape: f.synthetic ?? DEFAULT_SYNTHETIC.shape, hours: f.hours, peakRps: f.peakRps, swing: f.swing, isl: f.isl, osl: f.osl, burstsPerHour: f.burstsPerHour, seed: f.seed, tickS: f.tickS });
}

/** Config file (if any) over the defaults, then explicit flags; validated once at the end. */
export function buildConfig(f: Partial<SimulateFlags>): PlannerConfig {
  let raw: Record<string, unknown> = {};
  if (f.config !== undefined) {
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
