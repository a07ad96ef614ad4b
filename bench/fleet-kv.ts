/**
 * Fleet benchmark of the KV router (issue 5): 4 mocker workers (real `runtime worker`
 * processes, bench/fleet startFleet) behind one `runtime frontend`, round-robin against
 * `--router-mode kv` in the same run, at the same offered loads.
 *
 *   node --import tsx bench/fleet-kv.ts [--quick] [--load-factors 0.8,1.2] [--speedup-ratio 1]
 *     [--num-gpu-blocks 1024] [--requests 384] [--built] [--kv-args "--router-prefill-load-scale 2"]
 *
 * Workloads (each on every fleet, in this order):
 *   (the tiny model's context is 2048 tokens: prompt + output must fit)
 *   shared-prefix  16 groups × 16 prompts: a 1920-token system prompt (120 blocks) + a 64-token
 *                  question, 48 output tokens; `--requests` (default 384 = 1.5 rounds: the same
 *                  system prompts with new questions) so a group's compulsory first miss weighs
 *                  1/24, not 1/16. Poisson arrivals.
 *   hot-prefix     every request shares one 1920-token prefix (1 group): the spread case.
 *   trace          a synthetic Mooncake-style trace (shared 256-token prefix blocks, Zipf).
 *
 * Offered load: a calibration fleet (round-robin, fresh) measures the closed-loop capacity on
 * the shared-prefix workload (req/s); each `--load-factors` entry × that rate is offered to
 * every workload. Each (load, mode) gets a fresh fleet, so no mode inherits warm caches.
 *
 * KV pool: 1024 blocks per worker. kv mode's partition (4 groups × 120 blocks + the running
 * sequences' private blocks) fits; round-robin, which sends every group to every worker
 * (16 × 120 = 1920 blocks), does not: that is the case a cache-aware router exists for.
 *
 * By default the processes run the working tree's TypeScript through tsx (so the numbers are
 * those of the code beside this file); `--built` runs `bin/runtime.js` (dist/) instead.
 *
 * Per (load, workload, mode): cached-token ratio (what workers reported reusing), TTFT p50/p90,
 * ITL p99, output tok/s, and the per-worker load spread (requests, and prompt tokens actually
 * computed, from each worker's own /metrics). Writes bench/results/fleet-kv.json and a table.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { machineLoad, type MachineLoad } from './fleet/machine.js';
import { startFleet, type Fleet } from './fleet/fleet.js';
import { snapshotWorkers as snapshot, sourceLauncher, spreadOf as ratio, type WorkerCounters } from './fleet/index.js';
import { runBench, writeSyntheticTrace, type BenchOptions, type BenchReport } from './loadgen/index.js';
import { benchArgs } from './fleet/bench-args.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const ARGS = benchArgs();
const QUICK = ARGS.quick;
const BUILT = ARGS.built;
const flagValue = ARGS.value;
const flag = ARGS.number;

/** The knobs, scaled for a shared 2-core machine. */
const PLAN = {
  workers: 4,
  speedupRatio: flag('--speedup-ratio', 1),
  numGpuBlocks: flag('--num-gpu-blocks', 1024),
  maxNumSeqs: 64,
  /** Extra `runtime frontend` flags for kv mode (weights), e.g. "--router-prefill-load-scale 2". */
  kvArgs: (flagValue('--kv-args') ?? '').split(/\s+/).filter((a) => a !== ''),
  sharedPrefix: {
    groups: 16,
    promptsPerGroup: 16,
    systemTokens: 1920,
    questionTokens: 64,
    osl: 48,
    requests: flag('--requests', QUICK ? 128 : 384),
  },
  hotPrefix: { systemTokens: 1920, questionTokens: 64, osl: 48, requests: QUICK ? 48 : 128 },
  trace: {
    requests: QUICK ? 48 : 128,
    islMean: 1152,
    islStd: 160,
    oslMean: 32,
    oslStd: 8,
    prefixGroups: 16,
    prefixBlocks: 3,
    zipf: 1,
    blockSize: 256,
    seed: 7,
  },
  modes: ['round-robin', 'kv'] as const,
  /** Offered loads as fractions of the measured round-robin capacity. */
  loadFactors: (flagValue('--load-factors') ?? '0.8,1.2').split(',').map(Number),
  calibration: { concurrency: 48, requests: QUICK ? 64 : 160 },
};

type Mode = (typeof PLAN.modes)[number];

interface RunResult {
  /** Offered load as a fraction of the round-robin capacity. */
  loadFactor: number;
  offeredReqPerS: number;
  workload: string;
  mode: Mode;
  requests: { completed: number; failed: number };
  errors: Record<string, number>;
  cachedRatio: number | null;
  /** Σ worker prefix-cache hits / Σ queried prompt tokens, from the workers' vLLM counters. */
  workerHitRatio: number;
  ttftMs: { p50: number; p90: number; p99: number };
  itlMs: { p50: number; p99: number };
  e2eMs: { p50: number; p90: number };
  outputTokPerS: number;
  requestsPerS: number;
  durationS: number;
  perWorker: Array<{ worker: string; requests: number; prefillTokens: number }>;
  /** busiest / least busy, by requests and by prefill tokens actually computed. */
  spread: { requests: number; prefillTokens: number };
  machine: { before: MachineLoad; after: MachineLoad };
}

interface RunKey {
  loadFactor: number;
  offeredReqPerS: number;
  workload: string;
  mode: Mode;
}

async function runOne(fleet: Fleet, key: RunKey, options: Partial<BenchOptions>): Promise<RunResult> {
  const loadBefore = machineLoad();
  const before = await snapshot(fleet);
  const { report } = await runBench({
    url: fleet.url,
    model: fleet.model,
    tokenizer: fleet.modelDir,
    promptFormat: 'ids',
    ignoreEos: true,
    warmup: 0,
    progress: 'off',
    timeoutS: 120,
    ...options,
  } as BenchOptions);
  const after = await snapshot(fleet);
  return { ...summarize(fleet, key, report, before, after), machine: { before: loadBefore, after: machineLoad() } };
}

function summarize(fleet: Fleet, key: RunKey, report: BenchReport, before: WorkerCounters[], after: WorkerCounters[]): Omit<RunResult, 'machine'> {
  const s = report.summary;
  const perWorker = fleet.workers.map((w, i) => {
    const queries = after[i]!.prefixQueries - before[i]!.prefixQueries;
    const hits = after[i]!.prefixHits - before[i]!.prefixHits;
    return { worker: w.instanceId, requests: after[i]!.requests - before[i]!.requests, prefillTokens: queries - hits, queries, hits };
  });
  const queries = perWorker.reduce((a, w) => a + w.queries, 0);
  const hits = perWorker.reduce((a, w) => a + w.hits, 0);
  return {
    ...key,
    requests: { completed: s.requests.completed, failed: s.requests.failed },
    errors: s.errors.by_kind,
    cachedRatio: s.tokens.cached_ratio,
    workerHitRatio: queries > 0 ? hits / queries : 0,
    ttftMs: { p50: s.latency_ms.ttft.p50, p90: s.latency_ms.ttft.p90, p99: s.latency_ms.ttft.p99 },
    itlMs: { p50: s.latency_ms.itl.p50, p99: s.latency_ms.itl.p99 },
    e2eMs: { p50: s.latency_ms.e2e.p50, p90: s.latency_ms.e2e.p90 },
    outputTokPerS: s.throughput.output_tokens_per_s,
    requestsPerS: s.throughput.requests_per_s,
    durationS: s.duration_s,
    perWorker: perWorker.map(({ worker, requests, prefillTokens }) => ({ worker, requests, prefillTokens })),
    spread: { requests: ratio(perWorker.map((w) => w.requests)), prefillTokens: ratio(perWorker.map((w) => w.prefillTokens)) },
  };
}

function fmt(n: number | null, digits = 1): string {
  if (n === null || !Number.isFinite(n)) return String(n);
  return n.toFixed(digits);
}

function table(results: RunResult[]): string {
  const head = ['load', 'workload', 'mode', 'ok/fail', 'cached', 'TTFT p50', 'TTFT p90', 'ITL p99', 'out tok/s', 'spread req', 'spread prefill'];
  const rows = results.map((r) => [
    `${Math.round(r.loadFactor * 100)}%`,
    r.workload,
    r.mode,
    `${r.requests.completed}/${r.requests.failed}`,
    r.cachedRatio === null ? 'n/a' : `${(r.cachedRatio * 100).toFixed(1)}%`,
    `${fmt(r.ttftMs.p50)} ms`,
    `${fmt(r.ttftMs.p90)} ms`,
    `${fmt(r.itlMs.p99)} ms`,
    fmt(r.outputTokPerS, 0),
    `${fmt(r.spread.requests, 2)}x`,
    `${fmt(r.spread.prefillTokens, 2)}x`,
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`;
  return [line(head), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...rows.map(line)].join('\n');
}

function fleetOptions(mode: Mode, runtimeBin: string | undefined) {
  return {
    workers: PLAN.workers,
    routerMode: mode,
    speedupRatio: PLAN.speedupRatio,
    numGpuBlocks: PLAN.numGpuBlocks,
    maxNumSeqs: PLAN.maxNumSeqs,
    ...(mode === 'kv' && PLAN.kvArgs.length > 0 ? { extraFrontendArgs: PLAN.kvArgs } : {}),
    ...(runtimeBin !== undefined ? { runtimeBin } : {}),
  };
}

const COMMON: Partial<BenchOptions> = { promptFormat: 'ids', ignoreEos: true, warmup: 0, progress: 'off', timeoutS: 180 };

function sharedPrefixOptions(seed: number): Partial<BenchOptions> {
  const sp = PLAN.sharedPrefix;
  return { workload: 'shared-prefix', groups: sp.groups, promptsPerGroup: sp.promptsPerGroup, systemTokens: sp.systemTokens, questionTokens: sp.questionTokens, osl: sp.osl, maxTokens: sp.osl, requests: sp.requests, seed };
}

function hotPrefixOptions(seed: number): Partial<BenchOptions> {
  const hp = PLAN.hotPrefix;
  return { workload: 'shared-prefix', groups: 1, promptsPerGroup: hp.requests, systemTokens: hp.systemTokens, questionTokens: hp.questionTokens, osl: hp.osl, maxTokens: hp.osl, requests: hp.requests, seed };
}

/**
 * The round-robin fleet's capacity in requests/s: a closed loop at high concurrency on a
 * fleet of its own (so neither measured fleet starts with warm caches).
 */
async function calibrate(runtimeBin: string | undefined): Promise<number> {
  const fleet = await startFleet(fleetOptions('round-robin', runtimeBin));
  try {
    const { report } = await runBench({
      url: fleet.url,
      model: fleet.model,
      tokenizer: fleet.modelDir,
      ...COMMON,
      ...sharedPrefixOptions(99),
      concurrency: PLAN.calibration.concurrency,
      requests: PLAN.calibration.requests,
    } as BenchOptions);
    return report.summary.throughput.requests_per_s;
  } finally {
    await fleet.stop();
  }
}

/** The ideal cached ratio of the shared-prefix run: each group's first request must miss. */
function sharedPrefixCeiling(): number {
  const sp = PLAN.sharedPrefix;
  const prompt = sp.systemTokens + sp.questionTokens;
  const firstMisses = Math.min(sp.groups, sp.requests);
  return ((sp.requests - firstMisses) * sp.systemTokens) / (sp.requests * prompt);
}

async function main(): Promise<void> {
  const loadBefore = machineLoad();
  const scratch = mkdtempSync(join(tmpdir(), 'tandem-fleet-kv-'));
  const runtimeBin = BUILT ? undefined : sourceLauncher(scratch);
  const results: RunResult[] = [];
  let capacity = 0;
  try {
    capacity = flag('--capacity', 0) || (await calibrate(runtimeBin));
    process.stdout.write(`round-robin capacity ${capacity.toFixed(1)} req/s (closed loop, ${PLAN.calibration.concurrency} streams)\n`);
    for (const loadFactor of PLAN.loadFactors) {
      const rate = loadFactor * capacity;
      const traceFile = join(scratch, `trace-${loadFactor}.jsonl`);
      writeSyntheticTrace(traceFile, { ...PLAN.trace, rate });
      for (const mode of PLAN.modes) {
        const fleet = await startFleet(fleetOptions(mode, runtimeBin));
        const key = (workload: string): RunKey => ({ loadFactor, offeredReqPerS: rate, workload, mode });
        const base = { url: fleet.url, model: fleet.model, tokenizer: fleet.modelDir, ...COMMON };
        try {
          results.push(await runOne(fleet, key('shared-prefix'), { ...base, ...sharedPrefixOptions(11), rate }));
          results.push(await runOne(fleet, key('hot-prefix'), { ...base, ...hotPrefixOptions(13), rate }));
          results.push(await runOne(fleet, key('trace'), { ...base, workload: 'trace', traceFile, traceBlockSize: PLAN.trace.blockSize, speedup: 1 }));
          process.stdout.write(`load ${loadFactor} ${mode} done\n`);
        } finally {
          await fleet.stop();
        }
      }
    }
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
  const comparisons = [];
  for (const loadFactor of PLAN.loadFactors) {
    for (const w of ['shared-prefix', 'hot-prefix', 'trace']) {
      const rr = results.find((r) => r.loadFactor === loadFactor && r.workload === w && r.mode === 'round-robin')!;
      const kv = results.find((r) => r.loadFactor === loadFactor && r.workload === w && r.mode === 'kv')!;
      comparisons.push({
        loadFactor,
        workload: w,
        ttftP90Speedup: rr.ttftMs.p90 / kv.ttftMs.p90,
        ttftP50Speedup: rr.ttftMs.p50 / kv.ttftMs.p50,
        throughputRatio: kv.outputTokPerS / rr.outputTokPerS,
        cachedRatioKv: kv.cachedRatio,
        cachedRatioRoundRobin: rr.cachedRatio,
        kvSpreadRequests: kv.spread.requests,
      });
    }
  }
  const out = {
    bench: 'fleet-kv',
    quick: QUICK,
    runtime: BUILT ? 'dist (bin/runtime.js)' : 'working tree through tsx',
    plan: PLAN,
    sharedPrefixCachedCeiling: sharedPrefixCeiling(),
    offered: { capacityReqPerS: capacity, rates: PLAN.loadFactors.map((f) => ({ loadFactor: f, reqPerS: f * capacity })) },
    machine: { before: loadBefore, after: machineLoad() },
    results,
    comparisons,
  };
  const file = join(ROOT, 'bench', 'results', QUICK ? 'fleet-kv-quick.json' : 'fleet-kv.json');
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, `${JSON.stringify(out, null, 2)}\n`);
  process.stdout.write(`\n${table(results)}\n\n`);
  process.stdout.write(`shared-prefix cached-ratio ceiling (one compulsory miss per group): ${(sharedPrefixCeiling() * 100).toFixed(1)}%\n`);
  for (const c of comparisons) {
    process.stdout.write(`${Math.round(c.loadFactor * 100)}% ${c.workload}: TTFT p90 rr/kv ${fmt(c.ttftP90Speedup, 2)}x, p50 ${fmt(c.ttftP50Speedup, 2)}x, throughput kv/rr ${fmt(c.throughputRatio, 2)}x\n`);
  }
  process.stdout.write(`machine load before ${loadBefore.loadavg}, after ${out.machine.after.loadavg}\nwrote ${file}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`fleet-kv: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
