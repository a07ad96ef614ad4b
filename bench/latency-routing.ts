/**
 * Predicted-latency routing (issue 28) against block-count routing, with round-robin as the
 * floor, side by side in one run: 4 mocker workers (real `runtime worker` processes, bench/fleet
 * startFleet) behind one `runtime frontend`, the same offered loads for every mode.
 *
 *   node --import tsx bench/latency-routing.ts [--quick] [--built] [--load-factors 0.8,1.2]
 *     [--fleets homogeneous,heterogeneous] [--requests 256]
 *
 * Fleets:
 *   homogeneous    4 workers at --speedup-ratio 1
 *   heterogeneous  2 at 1 and 2 at 0.5 (half speed): what a block count cannot see
 * Modes: round-robin; kv (`--router-cost blocks`, today's default); kv + `--router-cost latency`
 * (the polynomial perf model the mocker itself runs, calibrated online per worker).
 * Workloads (the tiny model's context is 2048 tokens):
 *   shared-prefix  16 groups × 16 prompts: 1920-token system prompt + 64-token question, 48 output
 *                  tokens, Poisson arrivals (bench/fleet-kv.ts's workload)
 *   trace          a synthetic trace in Mooncake's format (hash_ids of 256-token blocks, as bench/fleet-kv.ts: 16 shared
 *                  prefixes of 3 blocks, Zipf popularity; ISL ~1150, OSL ~32), replayed by
 *                  `runtime bench --workload trace` at the offered rate. No public Mooncake trace
 *                  is available offline here; a public file drops in through --trace-file.
 *
 * Offered load: per fleet, a calibration fleet (round-robin, fresh) measures the closed-loop
 * capacity on shared-prefix (req/s); each load factor × that rate is offered. Each (fleet, load,
 * mode) gets a fresh fleet, so no mode inherits warm caches or calibration.
 *
 * Per run: TTFT p50/p90, ITL p99, output tok/s, req/s, per-worker requests. Writes
 * bench/results/latency-routing.json and bench/results/latency-routing.md.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { machineLoad, snapshotWorkers, sourceLauncher, spreadOf, startFleet, type Fleet, type FleetOptions, type MachineLoad, type WorkerCounters } from './fleet/index.js';
import { runBench, writeSyntheticTrace, type BenchOptions, type BenchReport } from './loadgen/index.js';
import { benchArgs } from './fleet/bench-args.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const ARGS = benchArgs();
const QUICK = ARGS.quick;
const BUILT = ARGS.built;
const flagValue = ARGS.value;
const flag = ARGS.number;

const FLEETS = {
  homogeneous: [1, 1, 1, 1],
  heterogeneous: [1, 1, 0.5, 0.5],
} as const;
type FleetName = keyof typeof FLEETS;

const MODES = {
  'round-robin': { routerMode: 'round-robin', frontendArgs: [] as string[] },
  blocks: { routerMode: 'kv', frontendArgs: ['--router-cost', 'blocks'] },
  latency: { routerMode: 'kv', frontendArgs: ['--router-cost', 'latency'] },
} as const;
type Mode = keyof typeof MODES;

const PLAN = {
  fleets: (flagValue('--fleets') ?? 'homogeneous,heterogeneous').split(',') as FleetName[],
  modes: Object.keys(MODES) as Mode[],
  numGpuBlocks: 1024,
  maxNumSeqs: 64,
  sharedPrefix: { groups: 16, promptsPerGroup: 16, systemTokens: 1920, questionTokens: 64, osl: 48, requests: flag('--requests', QUICK ? 96 : 256) },
  trace: { requests: QUICK ? 48 : 128, islMean: 1152, islStd: 160, oslMean: 32, oslStd: 8, prefixGroups: 16, prefixBlocks: 3, zipf: 1, blockSize: 256, seed: 7 },
  traceFile: flagValue('--trace-file'),
  loadFactors: (flagValue('--load-factors') ?? '0.8,1.2').split(',').map(Number),
  calibration: { concurrency: 48, requests: QUICK ? 64 : 128 },
};

interface RunResult {
  fleet: FleetName;
  speedupRatios: readonly number[];
  loadFactor: number;
  offeredReqPerS: number;
  workload: string;
  mode: Mode;
  requests: { completed: number; failed: number };
  errors: Record<string, number>;
  cachedRatio: number | null;
  ttftMs: { p50: number; p90: number; p99: number };
  itlMs: { p50: number; p99: number };
  outputTokPerS: number;
  requestsPerS: number;
  durationS: number;
  /** Requests each worker served, in fleet order (the heterogeneous fleet's slow ones last). */
  perWorkerRequests: number[];
  spreadRequests: number;
  machine: { before: MachineLoad; after: MachineLoad };
}

const COMMON: Partial<BenchOptions> = { promptFormat: 'ids', ignoreEos: true, warmup: 0, progress: 'off', timeoutS: 180 };

function fleetOptions(fleet: FleetName, mode: Mode, runtimeBin: string | undefined): FleetOptions {
  return {
    workers: FLEETS[fleet].length,
    speedupRatios: [...FLEETS[fleet]],
    routerMode: MODES[mode].routerMode,
    numGpuBlocks: PLAN.numGpuBlocks,
    maxNumSeqs: PLAN.maxNumSeqs,
    extraFrontendArgs: [...MODES[mode].frontendArgs],
    ...(runtimeBin !== undefined ? { runtimeBin } : {}),
  };
}

function sharedPrefixOptions(seed: number): Partial<BenchOptions> {
  const sp = PLAN.sharedPrefix;
  return { workload: 'shared-prefix', groups: sp.groups, promptsPerGroup: sp.promptsPerGroup, systemTokens: sp.systemTokens, questionTokens: sp.questionTokens, osl: sp.osl, maxTokens: sp.osl, requests: sp.requests, seed };
}

async function runOne(fleet: Fleet, key: Omit<RunResult, 'requests' | 'errors' | 'cachedRatio' | 'ttftMs' | 'itlMs' | 'outputTokPerS' | 'requestsPerS' | 'durationS' | 'perWorkerRequests' | 'spreadRequests' | 'machine'>, options: Partial<BenchOptions>): Promise<RunResult> {
  const loadBefore = machineLoad();
  const before = await snapshotWorkers(fleet);
  const { report } = await runBench({ url: fleet.url, model: fleet.model, tokenizer: fleet.modelDir, ...COMMON, ...options } as BenchOptions);
  const after = await snapshotWorkers(fleet);
  return { ...key, ...summarize(report, before, after), machine: { before: loadBefore, after: machineLoad() } };
}

function summarize(report: BenchReport, before: WorkerCounters[], after: WorkerCounters[]) {
  const s = report.summary;
  const perWorkerRequests = after.map((a, i) => a.requests - before[i]!.requests);
  return {
    requests: { completed: s.requests.completed, failed: s.requests.failed },
    errors: s.errors.by_kind,
    cachedRatio: s.tokens.cached_ratio,
    ttftMs: { p50: s.latency_ms.ttft.p50, p90: s.latency_ms.ttft.p90, p99: s.latency_ms.ttft.p99 },
    itlMs: { p50: s.latency_ms.itl.p50, p99: s.latency_ms.itl.p99 },
    outputTokPerS: s.throughput.output_tokens_per_s,
    requestsPerS: s.throughput.requests_per_s,
    durationS: s.duration_s,
    perWorkerRequests,
    spreadRequests: spreadOf(perWorkerRequests),
  };
}

/** The fleet's round-robin capacity in requests/s: a closed loop on a fresh fleet. */
async function capacityOf(fleet: FleetName, runtimeBin: string | undefined): Promise<number> {
  const f = await startFleet(fleetOptions(fleet, 'round-robin', runtimeBin));
  try {
    const { report } = await runBench({ url: f.url, model: f.model, tokenizer: f.modelDir, ...COMMON, ...sharedPrefixOptions(99), concurrency: PLAN.calibration.concurrency, requests: PLAN.calibration.requests } as BenchOptions);
    return report.summary.throughput.requests_per_s;
  } finally {
    await f.stop();
  }
}

function fmt(n: number | null, digits = 1): string {
  if (n === null || !Number.isFinite(n)) return String(n);
  return n.toFixed(digits);
}

function table(results: RunResult[]): string {
  const head = ['fleet', 'load', 'workload', 'mode', 'ok/fail', 'cached', 'TTFT p50 ms', 'TTFT p90 ms', 'ITL p99 ms', 'out tok/s', 'req/s', 'requests per worker'];
  const rows = results.map((r) => [
    r.fleet,
    `${Math.round(r.loadFactor * 100)}%`,
    r.workload,
    r.mode,
    `${r.requests.completed}/${r.requests.failed}`,
    r.cachedRatio === null ? 'n/a' : `${(r.cachedRatio * 100).toFixed(1)}%`,
    fmt(r.ttftMs.p50),
    fmt(r.ttftMs.p90),
    fmt(r.itlMs.p99),
    fmt(r.outputTokPerS, 0),
    fmt(r.requestsPerS, 2),
    r.perWorkerRequests.join(' / '),
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`;
  return [line(head), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...rows.map(line)].join('\n');
}

async function main(): Promise<void> {
  const loadBefore = machineLoad();
  const scratch = mkdtempSync(join(tmpdir(), 'tandem-latency-routing-'));
  const runtimeBin = BUILT ? undefined : sourceLauncher(scratch);
  const results: RunResult[] = [];
  const capacities: Partial<Record<FleetName, number>> = {};
  try {
    for (const fleet of PLAN.fleets) {
      const capacity = (capacities[fleet] = await capacityOf(fleet, runtimeBin));
      process.stdout.write(`${fleet}: round-robin capacity ${capacity.toFixed(1)} req/s\n`);
      for (const loadFactor of PLAN.loadFactors) {
        const rate = loadFactor * capacity;
        const traceFile = PLAN.traceFile ?? join(scratch, `trace-${fleet}-${loadFactor}.jsonl`);
        if (PLAN.traceFile === undefined) writeSyntheticTrace(traceFile, { ...PLAN.trace, rate });
        for (const mode of PLAN.modes) {
          const f = await startFleet(fleetOptions(fleet, mode, runtimeBin));
          const key = (workload: string) => ({ fleet, speedupRatios: FLEETS[fleet], loadFactor, offeredReqPerS: rate, workload, mode });
          try {
            results.push(await runOne(f, key('shared-prefix'), { ...sharedPrefixOptions(11), rate }));
            results.push(await runOne(f, key('trace'), { workload: 'trace', traceFile, traceBlockSize: PLAN.trace.blockSize, speedup: 1 }));
            process.stdout.write(`${fleet} load ${loadFactor} ${mode} done\n`);
          } finally {
            await f.stop();
          }
        }
      }
    }
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
  const comparisons = [];
  for (const fleet of PLAN.fleets) {
    for (const loadFactor of PLAN.loadFactors) {
      for (const workload of ['shared-prefix', 'trace']) {
        const pick = (mode: Mode) => results.find((r) => r.fleet === fleet && r.loadFactor === loadFactor && r.workload === workload && r.mode === mode);
        const [rr, blocks, latency] = [pick('round-robin'), pick('blocks'), pick('latency')];
        if (!rr || !blocks || !latency) continue;
        comparisons.push({
          fleet,
          loadFactor,
          workload,
          /** > 1: latency better than blocks. */
          ttftP90BlocksOverLatency: blocks.ttftMs.p90 / latency.ttftMs.p90,
          ttftP50BlocksOverLatency: blocks.ttftMs.p50 / latency.ttftMs.p50,
          itlP99BlocksOverLatency: blocks.itlMs.p99 / latency.itlMs.p99,
          throughputLatencyOverBlocks: latency.outputTokPerS / blocks.outputTokPerS,
          ttftP90RoundRobinOverLatency: rr.ttftMs.p90 / latency.ttftMs.p90,
        });
      }
    }
  }
  const out = {
    bench: 'latency-routing',
    quick: QUICK,
    runtime: BUILT ? 'dist (bin/runtime.js)' : 'working tree through tsx',
    plan: { ...PLAN, fleets: Object.fromEntries(PLAN.fleets.map((f) => [f, FLEETS[f]])), modes: MODES },
    capacities,
    machine: { before: loadBefore, after: machineLoad() },
    results,
    comparisons,
  };
  const stem = join(ROOT, 'bench', 'results', QUICK ? 'latency-routing-quick' : 'latency-routing');
  mkdirSync(dirname(stem), { recursive: true });
  writeFileSync(`${stem}.json`, `${JSON.stringify(out, null, 2)}\n`);
  const lines = comparisons.map((c) => `${c.fleet} ${Math.round(c.loadFactor * 100)}% ${c.workload}: TTFT p90 blocks/latency ${fmt(c.ttftP90BlocksOverLatency, 2)}x, p50 ${fmt(c.ttftP50BlocksOverLatency, 2)}x, ITL p99 ${fmt(c.itlP99BlocksOverLatency, 2)}x, throughput latency/blocks ${fmt(c.throughputLatencyOverBlocks, 2)}x; rr/latency p90 ${fmt(c.ttftP90RoundRobinOverLatency, 2)}x`);
  const text = `${table(results)}\n\n${lines.join('\n')}\n\nmachine load before ${loadBefore.loadavg}, after ${out.machine.after.loadavg}\n`;
  writeFileSync(`${stem}.md`, `# bench/latency-routing.ts${QUICK ? ' --quick' : ''}\n\n${text}`);
  process.stdout.write(`\n${text}wrote ${stem}.json and .md\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`latency-routing: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
