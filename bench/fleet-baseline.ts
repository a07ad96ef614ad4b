/**
 * Fleet baseline (issue 4, "Then measure"): 4 mocker workers behind one frontend, as real
 * processes with file discovery in a temp dir. It finds the fleet's saturation with a short
 * closed-loop concurrency ramp, then runs the shared-prefix workload at ~80% and ~120% of that
 * request rate (Poisson arrivals) and replays a synthetic Mooncake trace it generates. Every
 * measured phase gets a fresh fleet, so no phase inherits another's prefix cache.
 *
 * Run:  npm run build && node --import tsx bench/fleet-baseline.ts [--quick]
 * KV:   node --import tsx bench/fleet-baseline.ts --router-mode kv \
 *         --saturation-from bench/results/fleet-baseline/rr-summary.json
 *       (same offered loads as the round-robin run), then
 *       node bin/runtime.js bench compare bench/results/fleet-baseline/rr-sp-80.json bench/results/fleet-baseline/kv-sp-80.json
 *
 * Writes under bench/results/fleet-baseline/ (or --out): <prefix>-sp-80, -sp-120, -trace
 * (.json + .html bench reports), <prefix>-summary.json (choices, ramp, headline rows, machine
 * load), and trace.jsonl. <prefix> is `rr` for round-robin, else the router mode.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { headlineOf, renderHeadlines, type Headline } from './fleet/headline.js';
import { machineLoad, startFleet, type Fleet, type FleetOptions } from './fleet/index.js';
import { formatTrace, makeSyntheticTrace, runBench, type BenchOptions, type BenchReport } from './loadgen/index.js';

const { values: args } = (() => {
  try {
    return parseArgs({
      options: {
        'router-mode': { type: 'string', default: 'round-robin' },
        workers: { type: 'string', default: '4' },
        'speedup-ratio': { type: 'string', default: '2' },
        'num-gpu-blocks': { type: 'string', default: '1024' },
        groups: { type: 'string', default: '8' },
        'prompts-per-group': { type: 'string', default: '32' },
        'system-len': { type: 'string', default: '1024' },
        'question-len': { type: 'string', default: '128' },
        osl: { type: 'string', default: '128' },
        ramp: { type: 'string', default: '16,32,64,128,256' },
        'saturation-rate': { type: 'string' },
        'saturation-from': { type: 'string' },
        'trace-requests': { type: 'string', default: '300' },
        out: { type: 'string', default: 'bench/results/fleet-baseline' },
        seed: { type: 'string', default: '0' },
        quick: { type: 'boolean', default: false },
        help: { type: 'boolean', default: false },
      },
    });
  } catch (err) {
    // Usage errors exit 2, as `runtime` does.
    process.stderr.write(`fleet-baseline: ${(err as Error).message}\n`);
    process.exit(2);
  }
})();
if (args.help) {
  process.stdout.write(readFileSync(new URL(import.meta.url), 'utf8').split('*/')[0]!.replace(/^\/\*\*?|^ \* ?/gm, ''));
  process.exit(0);
}

const num = (name: keyof typeof args): number => {
  const v = Number(args[name]);
  if (!Number.isFinite(v) || v <= 0) {
    process.stderr.write(`fleet-baseline: --${name} must be a positive number, got '${String(args[name])}'\n`);
    process.exit(2);
  }
  return v;
};

const routerMode = args['router-mode']!;
const prefix = routerMode === 'round-robin' ? 'rr' : routerMode;
const quick = args.quick!;
const choices = {
  router_mode: routerMode,
  workers: num('workers'),
  engine: 'mocker',
  model: 'tiny (generated tiny Llama, context 2048)',
  // Real time per simulated step / 2: short enough for a few-minute run, long enough that
  // mocker step times (10-17 ms at this KV usage) stay above the CPU noise of a shared box.
  speedup_ratio: num('speedup-ratio'),
  // 1024 blocks x 16 tokens per worker: the KV pool, not max-num-seqs, bounds each worker, so
  // saturation comes from the simulated GPU (KV pressure raises decode time, then preemption),
  // not from the 2 shared CPU cores, and prefix reuse visibly buys capacity.
  num_gpu_blocks: num('num-gpu-blocks'),
  shared_prefix: {
    groups: num('groups'),
    prompts_per_group: quick ? 8 : num('prompts-per-group'),
    system_len: num('system-len'),
    question_len: num('question-len'),
    osl: num('osl'),
  },
  ramp_concurrency: (quick ? '32,128' : args.ramp!).split(',').map(Number),
  trace: { requests: quick ? 100 : num('trace-requests'), isl_mean: 1280, isl_std: 256, osl_mean: 128, osl_std: 32, prefix_groups: 16, prefix_blocks: 2, block_size: 512, zipf: 1 },
  seed: Number(args.seed),
  quick,
};
const outDir = args.out!;
mkdirSync(outDir, { recursive: true });

const fleetOptions: FleetOptions = { workers: choices.workers, routerMode, speedupRatio: choices.speedup_ratio, numGpuBlocks: choices.num_gpu_blocks };

async function withFleet<T>(run: (fleet: Fleet) => Promise<T>): Promise<T> {
  const fleet = await startFleet(fleetOptions);
  try {
    return await run(fleet);
  } finally {
    await fleet.stop();
  }
}

function sharedPrefix(fleet: Fleet, seed: number): BenchOptions {
  const sp = choices.shared_prefix;
  return {
    url: fleet.url, model: fleet.model, tokenizer: fleet.modelDir, workload: 'shared-prefix',
    groups: sp.groups, promptsPerGroup: sp.prompts_per_group, systemTokens: sp.system_len, questionTokens: sp.question_len, osl: sp.osl,
    seed, timeoutS: 120, progress: 'off', preflight: true,
  };
}

interface RampLevel { concurrency: number; requests_per_s: number; output_tokens_per_s: number; ttft_p50_ms: number; errors: number; loadavg: string }

/**
 * Closed loop at rising concurrency; capacity is the best request rate seen. It stops once
 * doubling concurrency adds < 10% throughput: past the knee only TTFT grows. Each level uses
 * its own seed (own system prompts), so one level's cache does not flatter the next.
 */
async function findSaturation(): Promise<{ rate: number; ramp: RampLevel[] }> {
  return withFleet(async (fleet) => {
    const ramp: RampLevel[] = [];
    for (const concurrency of choices.ramp_concurrency) {
      const requests = Math.max(64, 2 * concurrency);
      const { report } = await runBench({ ...sharedPrefix(fleet, 1000 + concurrency), concurrency, requests, warmup: 4 });
      const s = report.summary;
      const level = { concurrency, requests_per_s: s.throughput.requests_per_s, output_tokens_per_s: s.throughput.output_tokens_per_s, ttft_p50_ms: s.latency_ms.ttft.p50, errors: s.errors.total, loadavg: machineLoad().loadavg };
      ramp.push(level);
      process.stdout.write(`ramp: concurrency ${concurrency}: ${level.requests_per_s.toFixed(2)} req/s, ${level.output_tokens_per_s.toFixed(0)} tok/s, TTFT p50 ${level.ttft_p50_ms.toFixed(0)} ms, errors ${level.errors} (load ${level.loadavg})\n`);
      const best = Math.max(...ramp.slice(0, -1).map((l) => l.requests_per_s));
      if (ramp.length >= 2 && level.requests_per_s < 1.1 * best) break;
    }
    return { rate: Math.max(...ramp.map((l) => l.requests_per_s)), ramp };
  });
}

function saturationGiven(): number | undefined {
  if (args['saturation-rate'] !== undefined) return num('saturation-rate');
  if (args['saturation-from'] !== undefined) {
    const summary = JSON.parse(readFileSync(args['saturation-from'], 'utf8')) as { saturation: { requests_per_s: number } };
    return summary.saturation.requests_per_s;
  }
  return undefined;
}

async function measured(phase: string, load: string, options: (fleet: Fleet) => BenchOptions): Promise<Headline> {
  return withFleet(async (fleet) => {
    process.stdout.write(`${phase}: ${load} (load ${machineLoad().loadavg})\n`);
    const { report } = await runBench({ ...options(fleet), outDir, label: `${prefix}-${phase}` });
    return headlineOf(phase, load, report as BenchReport, machineLoad().loadavg);
  });
}

const started = Date.now();
const loadAtStart = machineLoad();
const given = saturationGiven();
const saturation = given !== undefined ? { rate: given, ramp: [] as RampLevel[], source: 'given' } : { ...(await findSaturation()), source: 'ramp' };
process.stdout.write(`saturation: ${saturation.rate.toFixed(2)} req/s (${saturation.source})\n`);

const rows: Headline[] = [];
const spRequests = choices.shared_prefix.groups * choices.shared_prefix.prompts_per_group;
for (const pct of [80, 120]) {
  const rate = Number(((saturation.rate * pct) / 100).toFixed(2));
  rows.push(await measured(`sp-${pct}`, `rate ${rate}/s`, (fleet) => ({ ...sharedPrefix(fleet, choices.seed + pct), rate, requests: spRequests, warmup: 8 })));
}

const t = choices.trace;
// Trace arrivals at ~80% of saturation; lengths clamped so prompt + output fit the tiny model's 2048 context.
const traceRate = Number((saturation.rate * 0.8).toFixed(2));
const trace = makeSyntheticTrace({ requests: t.requests, rate: traceRate, islMean: t.isl_mean, islStd: t.isl_std, oslMean: t.osl_mean, oslStd: t.osl_std, prefixGroups: t.prefix_groups, prefixBlocks: t.prefix_blocks, blockSize: t.block_size, zipf: t.zipf, seed: choices.seed }).map((e) => {
  const input = Math.min(e.input_length, 1792);
  return { ...e, input_length: input, output_length: Math.min(e.output_length, 240), hash_ids: e.hash_ids.slice(0, Math.ceil(input / t.block_size)) };
});
const traceFile = join(outDir, 'trace.jsonl');
writeFileSync(traceFile, formatTrace(trace));
rows.push(await measured('trace', `trace ${traceRate}/s`, (fleet) => ({ url: fleet.url, model: fleet.model, tokenizer: fleet.modelDir, workload: 'trace', traceFile, traceBlockSize: t.block_size, timeoutS: 120, progress: 'off', preflight: true, warmup: 8 })));

const table = renderHeadlines(rows);
const summary = {
  schema: 'tandem.bench.fleet-baseline',
  version: 1,
  created_at: new Date(started).toISOString(),
  wall_s: (Date.now() - started) / 1000,
  choices,
  saturation: { requests_per_s: saturation.rate, source: saturation.source, ramp: saturation.ramp },
  machine: { at_start: loadAtStart, at_end: machineLoad() },
  headline: rows,
};
writeFileSync(join(outDir, `${prefix}-summary.json`), JSON.stringify(summary, null, 2) + '\n');
process.stdout.write(`\nfleet baseline, router ${routerMode}: ${choices.workers} mocker workers, speedup ${choices.speedup_ratio}, ${choices.num_gpu_blocks} KV blocks/worker; shared-prefix ${choices.shared_prefix.groups}x${choices.shared_prefix.prompts_per_group}, system ${choices.shared_prefix.system_len}, question ${choices.shared_prefix.question_len}, osl ${choices.shared_prefix.osl}; saturation ${saturation.rate.toFixed(2)} req/s\n\n${table}\nwrote ${outDir}/${prefix}-{sp-80,sp-120,trace}.{json,html}, ${prefix}-summary.json, trace.jsonl in ${summary.wall_s.toFixed(0)} s\n`);
