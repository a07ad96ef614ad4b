/**
 * Issue 13: the SLA planner on a real mocker fleet. The same compressed "day" (a diurnal swing of
 * 8× trough to peak, plus bursts of 1.5–1.8×) is replayed three times against `runtime up`
 * (frontend + mocker workers as processes, file discovery, the local connector):
 *
 *   1. planner:        --workers 1 --planner sla --max-workers N (N = static peak's size)
 *   2. static peak:    --workers N, sized by the planner's own rule for the busiest window
 *   3. static average: --workers sized for the trace's mean rate
 *
 * The perf profile the planner sizes from is measured first with `runtime profile --engine
 * mocker` on the fleet's worker flags (about 5 s), unless --profile FILE names one. SLA per
 * request, from the client's stream: TTFT ≤ target and mean ITL (per token, first to last) ≤
 * target; a failed request is a miss. Worker-seconds: the integral of live worker processes
 * (from `up`'s "agg-N started" to "agg-N stopped" lines, starting and draining ones included)
 * over the replay window, so a static run's is N × its duration.
 *
 *   node --import tsx bench/planner-live.ts [--quick] [--profile FILE] [--runs planner,peak,average]
 *     [--interval S] [--ttft-ms MS] [--itl-ms MS] [--speedup X] [--peak-rps R] [--seed N]
 *     [--surge-half-life S] [--rate-z Z] [--predictor NAME] [--cooldown-down S] [--scale-down-after S]
 *
 * `--runs` may also name `planner-defaults`: the planner with its own SLA defaults (surge
 * memory on) instead of this bench's (below).
 *
 * Needs `npm run build` (spawns bin/runtime.js). Prints a table, writes
 * bench/results/planner-live.json and bench/results/planner-live.html (worker count and SLA
 * attainment over time for the three runs).
 */
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { RUNTIME_BIN, SupervisedProcess, runtimeCommand } from '../runtime/supervisor/index.js';
import { binTrace, buildConfig, loadPlannerProfile, slaSizing, summarizeTrace, type TraceEntry } from '../planner/index.js';
import { machineLoad } from './fleet/machine.js';
import { formatTrace, runBench } from './loadgen/index.js';
import { meanItlMs, tpotMs, ttftMs, type RequestRecord } from './loadgen/record.js';
import { Rng, sampleLength } from './loadgen/rng.js';
import { summarize, type Stats } from './loadgen/stats.js';
import { isAlive } from '../test/harness/processes.js';
import { type Decision, offeredRpsAt, renderPlannerLiveHtml } from './planner-live-report.js';

function flag(name: string): string | undefined {
  const at = process.argv.indexOf(name);
  return at >= 0 ? process.argv[at + 1] : undefined;
}
const num = (name: string, dflt: number) => (flag(name) !== undefined ? Number(flag(name)) : dflt);

const QUICK = process.argv.includes('--quick');
/** The "day": 10 minutes of trace time, replayed `SPEEDUP` times faster. */
const DAY_S = 600;
const SPEEDUP = num('--speedup', QUICK ? 5 : 1);
const WALL_S = DAY_S / SPEEDUP;
/** Diurnal peak in wall-clock requests per second (before bursts); trough = peak ÷ SWING. */
const PEAK_RPS = num('--peak-rps', 7.5);
const SWING = 8;
const ISL = 512;
const OSL = 64;
/**
 * Bursts at fixed places of the day (fractions), so that every seed has one on the ramp, one at
 * the diurnal peak (the busiest window static peak is sized for) and one on the way down.
 */
const BURSTS = [
  { at: 0.2, len: 0.07, factor: 1.6 },
  { at: 0.46, len: 0.08, factor: 1.8 },
  { at: 0.7, len: 0.06, factor: 1.5 },
];
const SEED = num('--seed', 1);
const TTFT_MS = num('--ttft-ms', 500);
const ITL_MS = num('--itl-ms', 30);
/**
 * The planner's clock, in wall seconds. The full run replays the 10-minute day at 1× (bursts of
 * 36–48 s): 5 s intervals hold 5–80 requests, enough that the forecast error is traffic rather
 * than Poisson noise, and a burst is seen within an interval or two. Compressed further (the
 * 2-minute `--quick` day, bursts of 7–10 s) the planner sees a burst one interval late, its
 * Kalman filter adopts it one interval later still, and a new worker takes about a second to
 * serve: use `--interval 1` there. The scale-down pacing is `up`'s at a 2 s interval (cooldown
 * 10 s, 6 s of "fewer" in a row) so that short intervals do not flap the pool.
 */
const INTERVAL_S = num('--interval', QUICK ? 1 : 5);
const COOLDOWN_DOWN_S = num('--cooldown-down', 10);
const SCALE_DOWN_AFTER_S = num('--scale-down-after', 6);
/**
 * The learnt surge (`sla.surgeHalfLifeS`, default 6 h of a real day) scaled to the compressed
 * day: 6 h of 24 is 150 s of the 600 s day, so a burst teaches the planner headroom that halves
 * over a quarter of the day. In the 2-minute `--quick` day an interval holds 1–40 requests and
 * their Poisson swing reads as a burst, so the surge is off there. `--runs planner-defaults`
 * runs the planner's own SLA defaults for comparison. `--rate-z` (default 1.28, the planner's)
 * trades attainment for worker-seconds: the headroom over the forecast is rateZ × its RMS error.
 */
const SURGE_HALF_LIFE_S = num('--surge-half-life', QUICK ? 0 : 150);
const RATE_Z = num('--rate-z', 1.28);
const PREDICTOR = flag('--predictor') ?? 'kalman';
/** Wall seconds of the window static peak is sized for (the busiest such window of the trace). */
const PEAK_WINDOW_S = 5;
/** One worker's KV: 256 blocks × 16 tokens = 4,096 tokens, about 7 requests of ISL 512 + OSL 64. */
const MOCKER_FLAGS = ['--engine', 'mocker', '--model', 'tiny', '--num-gpu-blocks', '256', '--block-size', '16'];
const RUNS = (flag('--runs') ?? 'planner,peak,average').split(',');
const REQUEST_TIMEOUT_S = 120;
const BIN_S = Math.max(2, Math.round(WALL_S / 40));

if (!existsSync(path.join(path.dirname(RUNTIME_BIN), '..', 'dist', 'cli', 'main.js'))) {
  process.stderr.write('planner-live: dist/ is missing; run `npm run build` first\n');
  process.exit(2);
}

const say = (line: string) => process.stderr.write(`planner-live: ${line}\n`);
const work = mkdtempSync(path.join(tmpdir(), 'tandem-planner-live-'));

// ---- the trace --------------------------------------------------------------------------------

const DAY = { wallS: WALL_S, diurnalPeakRps: PEAK_RPS, swing: SWING, bursts: BURSTS };
const offeredRps = (s: number): number => offeredRpsAt(DAY, s);

/** A non-homogeneous Poisson process by thinning; timestamps in trace ms (wall × SPEEDUP). */
function makeTrace(): TraceEntry[] {
  const rng = new Rng(SEED, 0x504c4956);
  const maxRps = PEAK_RPS * Math.max(...BURSTS.map((b) => b.factor));
  const out: TraceEntry[] = [];
  for (let s = rng.exponential(maxRps); s < WALL_S; s += rng.exponential(maxRps)) {
    if (rng.next() * maxRps >= offeredRps(s)) continue;
    out.push({ timestamp: Math.round(s * SPEEDUP * 1000), input_length: sampleLength(rng, ISL, ISL / 5, 128, 1024), output_length: sampleLength(rng, OSL, OSL / 5, 16, 128), hash_ids: [] });
  }
  return out;
}

const trace = makeTrace();
const traceFile = path.join(work, 'trace.jsonl');
writeFileSync(traceFile, formatTrace(trace));
// The trace in wall seconds (ticks of 1 s), for sizing.
const wallTrace = binTrace(trace.map((e) => ({ ...e, timestamp: e.timestamp / SPEEDUP })), 1);
const summary = summarizeTrace(wallTrace, PEAK_WINDOW_S);

// ---- the profile and the static sizes ---------------------------------------------------------

async function profile(): Promise<string> {
  const given = flag('--profile');
  if (given !== undefined) return given;
  const out = path.join(work, 'profile.json');
  say('measuring the mocker worker: runtime profile --engine mocker (about 5 s)');
  const proc = new SupervisedProcess({ name: 'profile', ...runtimeCommand(['profile', ...MOCKER_FLAGS, '--out', out]) });
  const exit = await proc.exited();
  if (exit.code !== 0) throw new Error(`runtime profile failed (code ${exit.code}): ${proc.logHint()}`);
  return out;
}

const profileFile = await profile();
const planned = await loadPlannerProfile(profileFile);
const config = buildConfig({ mode: 'sla', interval: INTERVAL_S, minWorkers: 1, maxWorkers: 64, topology: 'agg' }, undefined, { kvCapacityTokens: planned.kvCapacityTokens });
config.sla.ttftMs = TTFT_MS;
config.sla.itlMs = ITL_MS;
const PEAK_N = slaSizing(planned.perf, config, summary.peakRps, summary.meanIsl, summary.meanOsl).agg!;
const AVERAGE_N = slaSizing(planned.perf, config, summary.meanRps, summary.meanIsl, summary.meanOsl).agg!;

// Scale-down pacing (a --planner-config file replaces `up`'s own, so it is spelt out here).
const pacing = { cooldownDownS: COOLDOWN_DOWN_S, scaleDownIntervals: Math.max(1, Math.round(SCALE_DOWN_AFTER_S / INTERVAL_S)), pendingTimeoutS: Math.max(60, 10 * INTERVAL_S) };
const plannerConfig = { predictor: PREDICTOR, sla: { ttftMs: TTFT_MS, itlMs: ITL_MS, surgeHalfLifeS: SURGE_HALF_LIFE_S, rateZ: RATE_Z }, ...pacing };
const defaultsConfig = { sla: { ttftMs: TTFT_MS, itlMs: ITL_MS }, ...pacing };
const plannerConfigFile = path.join(work, 'planner.json');
writeFileSync(plannerConfigFile, JSON.stringify(plannerConfig));
const defaultsConfigFile = path.join(work, 'planner-defaults.json');
writeFileSync(defaultsConfigFile, JSON.stringify(defaultsConfig));

// ---- one run ----------------------------------------------------------------------------------

interface WorkerEvent {
  tS: number;
  name: string;
  delta: 1 | -1;
}

interface RunResult {
  label: string;
  args: string[];
  requests: number;
  failed: number;
  attainment: number;
  ttftOk: number;
  itlOk: number;
  workerSeconds: number;
  windowS: number;
  meanWorkers: number;
  maxWorkers: number;
  actions: number;
  unexpectedExits: number;
  ttftMs: Stats;
  itlMs: Stats;
  wallS: number;
  /** Live worker processes over time (a step series, seconds from the replay's start). */
  workers: { tS: number; n: number }[];
  /** Instances the frontend's /health listed (ready and routable), polled every 0.5 s. */
  ready: { tS: number; n: number }[];
  /** Per BIN_S seconds of scheduled arrival: requests, SLA attainment, median TTFT, mean ITL. */
  bins: { tS: number; requests: number; attainment: number; ttftP50Ms: number; itlMeanMs: number }[];
  decisions: Decision[];
}

const upLine = /^runtime up: ((?:agg|prefill|decode)-\d+) (started \(pid (\d+)\)|stopped|exited unexpectedly)/;
const decisionLine = /^runtime up: planner decision (\{.*\})$/;
/** Worker pids `up` reported, SIGKILLed if this bench dies before `up` stopped them. */
const childPids = new Set<number>();
process.on('exit', () => {
  rmSync(work, { recursive: true, force: true });
  for (const pid of childPids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
});

async function runOnce(label: string, args: string[]): Promise<RunResult> {
  const wall0 = performance.now();
  const events: WorkerEvent[] = [];
  const decisions: Decision[] = [];
  let origin = Number.NaN; // performance.now() at the replay's start
  const at = () => (performance.now() - (Number.isNaN(origin) ? wall0 : origin)) / 1000;
  const up = new SupervisedProcess({
    name: `up (${label})`,
    ...runtimeCommand(['up', ...MOCKER_FLAGS, '--http-port', '0', '--log-level', 'warn', ...args]),
    detached: true,
    stopGraceMs: 60_000,
    log: {
      memoryLines: 20_000,
      onLine: (line) => {
        const now = performance.now();
        const m = upLine.exec(line);
        if (m) {
          if (m[3]) childPids.add(Number(m[3]));
          events.push({ tS: now, name: m[1]!, delta: m[2]!.startsWith('started') ? 1 : -1 });
        }
        const d = decisionLine.exec(line);
        if (d) {
          const f = JSON.parse(d[1]!) as Omit<Decision, 'tS'>;
          decisions.push({ tS: now, action: f.action, current: f.current, target: f.target, rule: f.rule, limitedBy: f.limitedBy, reason: f.reason });
        }
      },
    },
  });
  try {
    const serving = await up.waitForLine(/^Tandem is serving \S+ at http:\/\/\S+$/, 120_000);
    const [, model, url] = /^Tandem is serving (\S+) at (\S+)$/.exec(serving)!;
    if (args.includes('--planner')) await up.waitForLine(/planner: sla mode every/, 30_000);
    say(`${label}: serving ${model} at ${url}; replaying ${trace.length} requests over ${WALL_S} s`);

    // The driver's clock starts a few ms after this (it only reads the trace file first).
    origin = performance.now();
    const ready: { tS: number; n: number }[] = [];
    let polling = true;
    const poller = (async () => {
      while (polling) {
        try {
          const body = (await (await fetch(`${url}/health`)).json()) as { models?: Array<{ name: string; instances: number }> };
          ready.push({ tS: at(), n: body.models?.find((x) => x.name === model)?.instances ?? 0 });
        } catch {
          ready.push({ tS: at(), n: 0 });
        }
        await new Promise((r) => setTimeout(r, 500));
      }
    })();
    let result;
    try {
      result = await runBench({ url: url!, model: model!, traceFile, speedup: SPEEDUP, promptFormat: 'ids', endpoint: 'completions', ignoreEos: true, timeoutS: REQUEST_TIMEOUT_S, label, progress: 'off', seed: SEED });
    } finally {
      polling = false;
      await poller;
    }
    const records = result.records;
    const windowS = Math.max(WALL_S, ...records.map((r) => r.endMs / 1000));
    const workers = workerSeries(events.map((e) => ({ ...e, tS: (e.tS - origin) / 1000 })), windowS);
    const workerSeconds = integral(workers, windowS);
    const sla = records.map((r) => slaOf(r));
    const share = (f: (s: ReturnType<typeof slaOf>) => boolean) => sla.filter(f).length / Math.max(1, sla.length);
    const ttfts = records.map(ttftMs).filter((x): x is number => x !== null);
    const itls = records.map(tpotMs).filter((x): x is number => x !== null);
    return {
      label,
      args,
      requests: records.length,
      failed: records.filter((r) => !r.ok).length,
      attainment: share((s) => s.ttftOk && s.itlOk),
      ttftOk: share((s) => s.ttftOk),
      itlOk: share((s) => s.itlOk),
      workerSeconds,
      windowS,
      meanWorkers: workerSeconds / windowS,
      maxWorkers: Math.max(...workers.filter((p) => p.tS <= windowS).map((p) => p.n)),
      actions: decisions.length,
      unexpectedExits: [...up.output().matchAll(/exited unexpectedly/g)].length,
      ttftMs: summarize(ttfts),
      itlMs: summarize(itls),
      wallS: 0,
      workers,
      ready,
      bins: binned(records, sla),
      decisions: decisions.map((d) => ({ ...d, tS: Math.round((d.tS - origin) / 10) / 100 })),
    };
  } finally {
    const exit = await up.stop(60_000);
    if (exit.code !== 0 && exit.code !== null) say(`${label}: runtime up exited with code ${exit.code}`);
    for (const pid of childPids) if (!isAlive(pid)) childPids.delete(pid);
    // `up` stops its workers before it exits; anything left is ours to end.
    for (const pid of childPids) process.kill(pid, 'SIGKILL');
    childPids.clear();
    say(`${label}: done in ${((performance.now() - wall0) / 1000).toFixed(0)} s`);
  }
}

function slaOf(r: RequestRecord): { ttftOk: boolean; itlOk: boolean } {
  const ttft = ttftMs(r);
  // Per-token mean ITL, first token to last: the same whether the frontend sends a token per chunk or several.
  const itl = tpotMs(r) ?? meanItlMs(r);
  return { ttftOk: r.ok && ttft !== null && ttft <= TTFT_MS, itlOk: r.ok && (itl === null || itl <= ITL_MS) };
}

/** Live workers as a step series from `up`'s start/stop lines (times in seconds from the replay's start). */
function workerSeries(events: WorkerEvent[], windowS: number): { tS: number; n: number }[] {
  events.sort((a, b) => a.tS - b.tS);
  let n = 0;
  for (const e of events) if (e.tS <= 0) n += e.delta;
  const out = [{ tS: 0, n }];
  for (const e of events) {
    if (e.tS <= 0 || e.tS > windowS) continue;
    n += e.delta;
    out.push({ tS: Math.round(e.tS * 100) / 100, n });
  }
  return out;
}

function integral(series: { tS: number; n: number }[], windowS: number): number {
  let sum = 0;
  for (let i = 0; i < series.length; i++) {
    const end = i + 1 < series.length ? series[i + 1]!.tS : windowS;
    sum += series[i]!.n * Math.max(0, Math.min(end, windowS) - series[i]!.tS);
  }
  return sum;
}

function binned(records: RequestRecord[], sla: { ttftOk: boolean; itlOk: boolean }[]): RunResult['bins'] {
  const bins = new Map<number, { ok: number; n: number; ttft: number[]; itl: number[] }>();
  records.forEach((r, i) => {
    const k = Math.floor((r.scheduledMs ?? r.startMs) / 1000 / BIN_S);
    const b = bins.get(k) ?? { ok: 0, n: 0, ttft: [], itl: [] };
    b.n++;
    if (sla[i]!.ttftOk && sla[i]!.itlOk) b.ok++;
    const t = ttftMs(r);
    if (t !== null) b.ttft.push(t);
    const itl = tpotMs(r);
    if (itl !== null) b.itl.push(itl);
    bins.set(k, b);
  });
  return [...bins.entries()]
    .sort((a, b) => a[0] - b[0])
    .map(([k, b]) => ({ tS: k * BIN_S, requests: b.n, attainment: b.ok / b.n, ttftP50Ms: Math.round(summarize(b.ttft).p50), itlMeanMs: Math.round(summarize(b.itl).mean * 10) / 10 }));
}

// ---- the three runs ---------------------------------------------------------------------------

const t0 = performance.now();
say(`trace: ${trace.length} requests over ${WALL_S} s wall (${DAY_S} s of trace at ${SPEEDUP}×), mean ${summary.meanRps.toFixed(2)} req/s, busiest ${PEAK_WINDOW_S} s ${summary.peakRps.toFixed(2)} req/s`);
say(`sizing (the planner's agg rule, profile ${profileFile}): static peak ${PEAK_N} workers, static average ${AVERAGE_N}; targets TTFT ${TTFT_MS} ms, ITL ${ITL_MS} ms`);
const plannerArgs = (file: string) => ['--workers', '1', '--planner', 'sla', '--max-workers', String(PEAK_N), '--min-workers', '1', '--planner-interval', String(INTERVAL_S), '--planner-profile', profileFile, '--planner-config', file];
const plans: Record<string, [string, string[]]> = {
  planner: [`planner (sla, ${PREDICTOR})`, plannerArgs(plannerConfigFile)],
  'planner-defaults': ['planner (sla defaults)', plannerArgs(defaultsConfigFile)],
  peak: ['static peak', ['--workers', String(PEAK_N)]],
  average: ['static average', ['--workers', String(AVERAGE_N)]],
};
const runs: RunResult[] = [];
for (const key of RUNS) {
  const plan = plans[key];
  if (!plan) throw new Error(`--runs: unknown run '${key}' (${Object.keys(plans).join(', ')})`);
  const start = performance.now();
  const r = await runOnce(plan[0], plan[1]);
  r.wallS = (performance.now() - start) / 1000;
  runs.push(r);
}
const totalS = (performance.now() - t0) / 1000;

// ---- report -----------------------------------------------------------------------------------

const peakRun = runs.find((r) => r.label === 'static peak');
const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
const head = `${'run'.padEnd(24)} ${'attain'.padStart(7)} ${'TTFT ok'.padStart(8)} ${'ITL ok'.padStart(7)} ${'worker-s'.padStart(9)} ${'vs peak'.padStart(8)} ${'mean'.padStart(5)} ${'max'.padStart(4)} ${'actions'.padStart(8)} ${'TTFT p50/p99 ms'.padStart(16)} ${'ITL p50/p99 ms'.padStart(15)} ${'failed'.padStart(7)}`;
const rows = runs.map(
  (r) =>
    `${r.label.padEnd(24)} ${pct(r.attainment).padStart(7)} ${pct(r.ttftOk).padStart(8)} ${pct(r.itlOk).padStart(7)} ${r.workerSeconds.toFixed(0).padStart(9)} ${(peakRun ? pct(r.workerSeconds / peakRun.workerSeconds) : '-').padStart(8)} ${r.meanWorkers.toFixed(1).padStart(5)} ${String(r.maxWorkers).padStart(4)} ${String(r.actions).padStart(8)} ${`${r.ttftMs.p50.toFixed(0)}/${r.ttftMs.p99.toFixed(0)}`.padStart(16)} ${`${r.itlMs.p50.toFixed(1)}/${r.itlMs.p99.toFixed(1)}`.padStart(15)} ${String(r.failed).padStart(7)}`,
);
process.stdout.write(
  [
    `trace: ${trace.length} requests over ${WALL_S} s (a ${DAY_S / 60}-minute day at ${SPEEDUP}×), mean ${summary.meanRps.toFixed(2)} req/s, busiest ${PEAK_WINDOW_S} s ${summary.peakRps.toFixed(2)} req/s, ISL ${Math.round(summary.meanIsl)}, OSL ${Math.round(summary.meanOsl)}; targets TTFT ${TTFT_MS} ms, ITL ${ITL_MS} ms`,
    head,
    ...rows,
    `wall: ${runs.map((r) => `${r.label} ${r.wallS.toFixed(0)} s`).join(', ')}; total ${totalS.toFixed(0)} s`,
  ].join('\n') + '\n',
);

const planner = runs.find((r) => r.label === `planner (sla, ${PREDICTOR})`);
const average = runs.find((r) => r.label === 'static average');
const aim = {
  plannerAttainmentAtLeast95: planner ? planner.attainment >= 0.95 : null,
  plannerWorkerSecondsAtMost60PctOfPeak: planner && peakRun ? planner.workerSeconds / peakRun.workerSeconds <= 0.6 : null,
  staticAverageBelow80: average ? average.attainment < 0.8 : null,
};
process.stdout.write(`aim: planner ≥ 95% ${aim.plannerAttainmentAtLeast95}, planner ≤ 60% of peak worker-s ${aim.plannerWorkerSecondsAtMost60PctOfPeak}, static average < 80% ${aim.staticAverageBelow80}\n`);

const results = path.join(path.dirname(new URL(import.meta.url).pathname), 'results');
mkdirSync(results, { recursive: true });
const out = {
  bench: 'planner-live',
  date: new Date().toISOString(),
  machine: machineLoad(),
  quick: QUICK,
  setup: {
    dayS: DAY_S,
    speedup: SPEEDUP,
    wallS: WALL_S,
    diurnalPeakRps: PEAK_RPS,
    swing: SWING,
    bursts: BURSTS,
    isl: ISL,
    osl: OSL,
    seed: SEED,
    targets: { ttftMs: TTFT_MS, itlMs: ITL_MS },
    intervalS: INTERVAL_S,
    mocker: MOCKER_FLAGS.join(' '),
    staticPeak: PEAK_N,
    staticAverage: AVERAGE_N,
    peakWindowS: PEAK_WINDOW_S,
    binS: BIN_S,
    plannerConfig,
    plannerDefaultsConfig: RUNS.includes('planner-defaults') ? defaultsConfig : undefined,
    profile: flag('--profile') ?? 'measured at the start of the run (runtime profile --engine mocker, same worker flags)',
    kvCapacityTokens: planned.kvCapacityTokens,
  },
  trace: { requests: trace.length, meanRps: summary.meanRps, peakRps: summary.peakRps, meanIsl: summary.meanIsl, meanOsl: summary.meanOsl },
  aim,
  totalWallS: totalS,
  runs: runs.map(({ workers: _w, ready: _r, bins: _b, decisions: _d, ...r }) => ({ ...r, vsPeak: peakRun ? r.workerSeconds / peakRun.workerSeconds : null })),
  timelines: runs.map((r) => ({ label: r.label, workers: r.workers, ready: r.ready, bins: r.bins })),
  decisions: Object.fromEntries(runs.filter((r) => r.label.startsWith('planner')).map((r) => [r.label, r.decisions])),
};
const jsonFile = path.join(results, 'planner-live.json');
writeFileSync(jsonFile, JSON.stringify(out, null, 1) + '\n');
const htmlFile = path.join(results, 'planner-live.html');
writeFileSync(htmlFile, renderPlannerLiveHtml(out));
process.stdout.write(`wrote ${path.relative(process.cwd(), jsonFile)}, ${path.relative(process.cwd(), htmlFile)}\n`);
