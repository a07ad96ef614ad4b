/**
 * Fleet benchmark of the KV router (issue 5): 4 mocker workers (real `runtime worker`
 * processes, bench/fleet startFleet) behind one `runtime frontend`, round-robin against
 * `--router-mode kv` in the same run, on a shared-prefix workload and a synthetic
 * Mooncake-style trace, at the same offered load.
 *
 *   npm run build && node --import tsx bench/fleet-kv.ts [--quick] [--load-factor 1.0]
 *     [--speedup-ratio 1] [--num-gpu-blocks 512] [--shared-rate R] [--trace-rate R]
 *
 * Offered load: unless given, a calibration fleet (round-robin, fresh) measures the closed-loop
 * capacity on the shared-prefix workload; both workloads are then offered `--load-factor` ×
 * that rate (Poisson for shared-prefix, the trace's own Poisson timestamps for the trace).
 * Each mode gets a fresh fleet, so neither inherits the other's warm caches.
 *
 * Per (workload, mode): cached-token ratio (what workers reported reusing), TTFT p50/p90,
 * ITL p99, output tok/s, and the per-worker load spread (requests, and prompt tokens actually
 * computed, from each worker's own /metrics). Writes bench/results/fleet-kv.json and a table.
 *
 * Scaled for a shared 2-core machine: mocker at real time (speedup 1) so the simulated GPU,
 * not the JS processes, is what saturates; 512 KV blocks per worker so the 16 shared prefixes
 * (64 blocks each) do not all fit in one worker; 128 requests per workload, 32 output tokens.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { machineLoad } from './fleet/machine.js';
import { startFleet, type Fleet } from './fleet/fleet.js';
import { runBench, writeSyntheticTrace, type BenchOptions, type BenchReport } from './loadgen/index.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const QUICK = args.includes('--quick');
const flag = (name: string, fallback: number) => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : fallback;
};

/** The knobs, scaled for a shared 2-core machine. */
const PLAN = {
  workers: 4,
  speedupRatio: flag('--speedup-ratio', 1),
  numGpuBlocks: flag('--num-gpu-blocks', 512),
  maxNumSeqs: 64,
  sharedPrefix: {
    groups: 16,
    promptsPerGroup: QUICK ? 4 : 8,
    systemTokens: 1024,
    questionTokens: 64,
    osl: 32,
    /** Poisson req/s; 0 = calibrate: `loadFactor` × the round-robin fleet's closed-loop capacity. */
    rate: flag('--shared-rate', 0),
  },
  trace: {
    requests: QUICK ? 48 : 128,
    rate: flag('--trace-rate', 0),
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
  /** Offered load as a fraction of the measured round-robin capacity. */
  loadFactor: flag('--load-factor', 1.0),
  calibration: { concurrency: 48, requests: QUICK ? 64 : 128 },
};

type Mode = (typeof PLAN.modes)[number];

interface WorkerCounters {
  requests: number;
  prefixQueries: number;
  prefixHits: number;
  generated: number;
}

interface RunResult {
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
}

async function scrapeWorker(statusUrl: string): Promise<WorkerCounters> {
  const text = await (await fetch(`${statusUrl}/metrics`)).text();
  const sum = (name: string) => {
    let total = 0;
    for (const line of text.split('\n')) {
      if (!line.startsWith(name)) continue;
      const m = /^[^ {]+(?:\{[^}]*\})? (\S+)$/.exec(line);
      if (m && line.slice(name.length).match(/^[ {]/)) total += Number(m[1]);
    }
    return total;
  };
  return {
    requests: sum('tandem_worker_requests_total'),
    prefixQueries: sum('vllm:prefix_cache_queries'),
    prefixHits: sum('vllm:prefix_cache_hits'),
    generated: sum('tandem_worker_generated_tokens_total'),
  };
}

async function snapshot(fleet: Fleet): Promise<WorkerCounters[]> {
  return Promise.all(fleet.workers.map((w) => scrapeWorker(w.statusUrl)));
}

function ratio(values: number[]): number {
  const min = Math.min(...values);
  const max = Math.max(...values);
  return min > 0 ? max / min : Infinity;
}

async function runOne(fleet: Fleet, mode: Mode, workload: string, options: Partial<BenchOptions>): Promise<RunResult> {
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
  return summarize(fleet, mode, workload, report, before, after);
}

function summarize(fleet: Fleet, mode: Mode, workload: string, report: BenchReport, before: WorkerCounters[], after: WorkerCounters[]): RunResult {
  const s = report.summary;
  const perWorker = fleet.workers.map((w, i) => {
    const queries = after[i]!.prefixQueries - before[i]!.prefixQueries;
    const hits = after[i]!.prefixHits - before[i]!.prefixHits;
    return { worker: w.instanceId, requests: after[i]!.requests - before[i]!.requests, prefillTokens: queries - hits, queries, hits };
  });
  const queries = perWorker.reduce((a, w) => a + w.queries, 0);
  const hits = perWorker.reduce((a, w) => a + w.hits, 0);
  return {
    workload,
    mode,
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
  const head = ['workload', 'mode', 'ok/fail', 'cached', 'TTFT p50', 'TTFT p90', 'ITL p99', 'out tok/s', 'spread req', 'spread prefill'];
  const rows = results.map((r) => [
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

function fleetOptions(mode: Mode) {
  return { workers: PLAN.workers, routerMode: mode, speedupRatio: PLAN.speedupRatio, numGpuBlocks: PLAN.numGpuBlocks, maxNumSeqs: PLAN.maxNumSeqs };
}

function sharedPrefixOptions(seed: number): Partial<BenchOptions> {
  const sp = PLAN.sharedPrefix;
  return { workload: 'shared-prefix', groups: sp.groups, promptsPerGroup: sp.promptsPerGroup, systemTokens: sp.systemTokens, questionTokens: sp.questionTokens, osl: sp.osl, maxTokens: sp.osl, seed };
}

/**
 * The round-robin fleet's capacity in requests/s: a closed loop at high concurrency on a
 * fleet of its own (so neither measured fleet starts with warm caches).
 */
async function calibrate(): Promise<number> {
  const fleet = await startFleet(fleetOptions('round-robin'));
  try {
    const { report } = await runBench({
      url: fleet.url,
      model: fleet.model,
      tokenizer: fleet.modelDir,
      promptFormat: 'ids',
      ignoreEos: true,
      warmup: 0,
      progress: 'off',
      timeoutS: 120,
      ...sharedPrefixOptions(99),
      concurrency: PLAN.calibration.concurrency,
      requests: PLAN.calibration.requests,
    } as BenchOptions);
    return report.summary.throughput.requests_per_s;
  } finally {
    await fleet.stop();
  }
}

async function main(): Promise<void> {
  const loadBefore = machineLoad();
  const scratch = mkdtempSync(join(tmpdir(), 'tandem-fleet-kv-'));
  const traceFile = join(scratch, 'trace.jsonl');
  let capacity: number | undefined;
  if (PLAN.sharedPrefix.rate === 0 || PLAN.trace.rate === 0) {
    capacity = await calibrate();
    process.stdout.write(`round-robin capacity ${capacity.toFixed(1)} req/s (closed loop, ${PLAN.calibration.concurrency} streams)\n`);
  }
  const sharedRate = PLAN.sharedPrefix.rate || PLAN.loadFactor * capacity!;
  const traceRate = PLAN.trace.rate || PLAN.loadFactor * capacity!;
  writeSyntheticTrace(traceFile, { ...PLAN.trace, rate: traceRate });
  const results: RunResult[] = [];
  try {
    for (const mode of PLAN.modes) {
      const fleet = await startFleet(fleetOptions(mode));
      try {
        results.push(await runOne(fleet, mode, 'shared-prefix', { ...sharedPrefixOptions(11), rate: sharedRate }));
        process.stdout.write(`${mode} shared-prefix done\n`);
        results.push(await runOne(fleet, mode, 'trace', { workload: 'trace', traceFile, traceBlockSize: PLAN.trace.blockSize, speedup: 1 }));
        process.stdout.write(`${mode} trace done\n`);
      } finally {
        await fleet.stop();
      }
    }
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
  const byKey = (w: string, m: Mode) => results.find((r) => r.workload === w && r.mode === m)!;
  const comparisons = ['shared-prefix', 'trace'].map((w) => {
    const rr = byKey(w, 'round-robin');
    const kv = byKey(w, 'kv');
    return {
      workload: w,
      ttftP90Speedup: rr.ttftMs.p90 / kv.ttftMs.p90,
      ttftP50Speedup: rr.ttftMs.p50 / kv.ttftMs.p50,
      throughputRatio: kv.outputTokPerS / rr.outputTokPerS,
      cachedRatioKv: kv.cachedRatio,
      cachedRatioRoundRobin: rr.cachedRatio,
    };
  });
  const out = {
    bench: 'fleet-kv',
    quick: QUICK,
    plan: PLAN,
    offered: { capacityReqPerS: capacity ?? null, sharedPrefixRate: sharedRate, traceRate },
    machine: { before: loadBefore, after: machineLoad() },
    results,
    comparisons,
  };
  const file = join(ROOT, 'bench', 'results', 'fleet-kv.json');
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, `${JSON.stringify(out, null, 2)}\n`);
  process.stdout.write(`\n${table(results)}\n\n`);
  for (const c of comparisons) {
    process.stdout.write(`${c.workload}: TTFT p90 rr/kv ${fmt(c.ttftP90Speedup, 2)}x, p50 ${fmt(c.ttftP50Speedup, 2)}x, throughput kv/rr ${fmt(c.throughputRatio, 2)}x\n`);
  }
  process.stdout.write(`wrote ${file}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`fleet-kv: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
