/**
 * `runtime profile`: measure one worker's performance model and write it as a perf-model
 * profile (JSON, schema v1) and, optionally, an HTML page of its curves.
 *
 *   runtime profile --engine mocker --model tiny --out p.json --html p.html   (launches a worker)
 *   runtime profile --endpoint tandem/backend/generate --out p.json           (a running one)
 *
 * The model directory is resolved by the caller (cli/ passes workers' resolveModel in), since
 * planner/ may not import workers/.
 */
import { writeFileSync } from 'node:fs';
import { Command, Option } from 'commander';
import { ConfigError, DEFAULT_DISCOVERY_DIR, defaultDiscoveryKind, etcdEndpointsFromEnv, oneOf, parseInteger, positiveInt, type DiscoveryKind } from '../../runtime/index.js';
import { GrpcRequestPlaneClient } from '../../runtime/index.js';
import { loadPlannerPerf } from '../command.js';
import { renderProfileHtml } from './html-report.js';
import { WorkerProber, type DecodeMeasurement, type PrefillMeasurement } from './measure.js';
import { buildProfile, type ProfileReport } from './profile-build.js';
import { ProgressBar } from './progress.js';
import { planSize, planSweep, type SweepOptions } from './sweep.js';
import { connectWorker, launchWorker, type ResolvedWorker } from './target.js';

export interface ProfileFlags {
  engine?: 'mocker' | 'native';
  model: string;
  endpoint?: string;
  instance?: string;
  discovery: DiscoveryKind;
  discoveryDir: string;
  etcdEndpoints?: string;
  out: string;
  html?: string;
  quick?: boolean;
  isl?: number[];
  context?: number[];
  concurrency?: number[];
  samples?: number;
  maxConcurrency?: number;
  seed: number;
  numGpuBlocks?: number;
  blockSize?: number;
  maxNumBatchedTokens?: number;
  maxNumSeqs?: number;
  contextLength?: number;
  perfProfile?: string;
  device?: string;
  threads?: number;
}

export interface ProfileDeps {
  /** `--model DIR | tiny` → a model directory (workers' resolveModel). */
  resolveModel(model: string): Promise<string>;
}

const list = (raw: string): number[] => raw.split(',').map((x) => parseInteger(x.trim(), 1));

export function registerProfileCommand(program: Command, deps: ProfileDeps): Command {
  return program
    .command('profile')
    .description("measure one worker's performance model (TTFT and prefill tok/s vs ISL; ITL and decode tok/s vs concurrency × context) → perf profile JSON (+ HTML)")
    .addOption(new Option('--engine <engine>', 'launch a worker with this engine (default mocker; not with --endpoint)').argParser(oneOf(['mocker', 'native'] as const)))
    .option('--model <dir>', "model directory, or 'tiny' for the generated tiny Llama (launch mode)", 'tiny')
    .option('--endpoint <ns/component/endpoint>', 'measure a running worker found through discovery (e.g. tandem/backend/generate)')
    .option('--instance <id>', 'with --endpoint: which instance (16 hex digits) when several serve it')
    .addOption(new Option('--discovery <kind>', 'with --endpoint: discovery backend').argParser(oneOf(['etcd', 'file'] as const)).default(defaultDiscoveryKind()))
    .option('--discovery-dir <dir>', 'with --endpoint: directory of file discovery', DEFAULT_DISCOVERY_DIR)
    .addOption(new Option('--etcd-endpoints <urls>', 'with --endpoint: comma-separated etcd endpoints').env('ETCD_ENDPOINTS'))
    .option('--out <file>', 'profile JSON to write (perf-model schema v1)', 'profile.json')
    .option('--html <file>', 'also write a self-contained HTML page with the plots')
    .option('--quick', 'fewer points (first and last ISL and context; concurrency 1 and the most that fit)')
    .option('--isl <list>', 'prefill ISLs, comma-separated (default 128, 256, … up to max batched tokens)', list)
    .option('--context <list>', 'decode context lengths, comma-separated (default 256, 1024, … up to the context length)', list)
    .option('--concurrency <list>', 'decode concurrencies, comma-separated (default 1, 8, 64, … and the most that fit in KV)', list)
    .option('--samples <n>', 'TTFT samples per ISL (median kept; default 3)', positiveInt)
    .option('--max-concurrency <n>', "most concurrent streams (default: --max-num-seqs, else 256)", positiveInt)
    .option('--seed <n>', 'seed of the random prompts', (x: string) => parseInteger(x, 0), 1)
    .option('--num-gpu-blocks <n>', 'launch: KV blocks of the worker', positiveInt)
    .option('--block-size <tokens>', 'launch: tokens per KV block', positiveInt)
    .option('--max-num-batched-tokens <n>', 'launch: token budget per step', positiveInt)
    .option('--max-num-seqs <n>', 'launch: most running sequences', positiveInt)
    .option('--context-length <n>', 'launch: cap the model context length', positiveInt)
    .option('--perf-profile <file>', 'launch, mocker: the profile the mocker runs (a round trip reproduces it)')
    .option('--device <device>', 'launch, native: device')
    .option('--threads <n>', 'launch, native: compute threads', positiveInt)
    .action(async (f: ProfileFlags) => runProfile(f, deps));
}

async function runProfile(f: ProfileFlags, deps: ProfileDeps): Promise<void> {
  if (f.endpoint !== undefined && f.engine !== undefined) throw new ConfigError('give --engine (launch a worker) or --endpoint (measure a running one), not both');
  const t0 = performance.now();
  const worker = await openWorker(f, deps);
  const grpc = new GrpcRequestPlaneClient();
  // Interrupted: stop the worker we launched (the supervisor's exit hook does not run when a
  // signal ends the process), then exit as a signal would.
  const onSignal = () => void worker.close().finally(() => process.exit(130));
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  let report: ProfileReport;
  try {
    report = await measure(worker, grpc, f, t0);
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    grpc.close();
    await worker.close();
  }
  writeFileSync(f.out, JSON.stringify(report, null, 2) + '\n');
  process.stdout.write(`wrote ${f.out}\n`);
  if (f.html !== undefined) {
    writeFileSync(f.html, renderProfileHtml(report));
    process.stdout.write(`wrote ${f.html}\n`);
  }
}

async function openWorker(f: ProfileFlags, deps: ProfileDeps): Promise<ResolvedWorker> {
  if (f.endpoint !== undefined) {
    return connectWorker({
      endpoint: f.endpoint,
      discovery: f.discovery,
      discoveryDir: f.discoveryDir,
      ...(f.instance !== undefined ? { instance: f.instance } : {}),
      ...(f.discovery === 'etcd' ? { etcdEndpoints: etcdEndpointsFromEnv({ ETCD_ENDPOINTS: f.etcdEndpoints ?? process.env.ETCD_ENDPOINTS }) } : {}),
    });
  }
  const engine = f.engine ?? 'mocker';
  if (f.perfProfile !== undefined && engine !== 'mocker') throw new ConfigError('--perf-profile is for the mocker engine');
  // A bad profile is our user's mistake: say so here (exit 2), not as a worker that died at start.
  if (f.perfProfile !== undefined) await loadPlannerPerf(f.perfProfile);
  const args: string[] = [];
  const pass: Array<[keyof ProfileFlags, string]> = [
    ['numGpuBlocks', '--num-gpu-blocks'],
    ['blockSize', '--block-size'],
    ['maxNumBatchedTokens', '--max-num-batched-tokens'],
    ['maxNumSeqs', '--max-num-seqs'],
    ['contextLength', '--context-length'],
    ['perfProfile', '--perf-profile'],
    ['device', '--device'],
    ['threads', '--threads'],
  ];
  for (const [key, flag] of pass) if (f[key] !== undefined) args.push(flag, String(f[key]));
  const modelDir = await deps.resolveModel(f.model);
  process.stderr.write(`profile: starting a ${engine} worker (${f.model})\n`);
  return launchWorker({ engine, modelDir, workerArgs: args });
}

async function measure(worker: ResolvedWorker, grpc: GrpcRequestPlaneClient, f: ProfileFlags, t0: number): Promise<ProfileReport> {
  const card = worker.card;
  const sweep: SweepOptions = {
    ...(f.quick ? { quick: true } : {}),
    ...(f.isl ? { isls: f.isl } : {}),
    ...(f.context ? { contexts: f.context } : {}),
    ...(f.concurrency ? { concurrencies: f.concurrency } : {}),
    ...(f.samples !== undefined ? { samples: f.samples } : {}),
    maxConcurrency: f.maxConcurrency ?? f.maxNumSeqs ?? 256,
  };
  const plan = planSweep(card, sweep);
  if (plan.prefill.length === 0) throw new ConfigError(`no ISL to measure: every --isl is above the worker's limit (${Math.min(card.contextLength - 1, card.maxNumBatchedTokens)} tokens)`);
  if (plan.decode.length === 0) throw new ConfigError(`no decode point fits the worker's KV cache (${card.totalKvBlocks} blocks × ${card.kvBlockSize} tokens) and context length ${card.contextLength}`);
  process.stderr.write(`profile: ${card.name} (${card.engine}) at ${worker.target.address}: ${plan.prefill.length} ISLs, ${plan.decode.length} decode points\n`);

  const prober = new WorkerProber(grpc, worker.target, f.seed);
  const bar = new ProgressBar(planSize(plan));
  await prober.warmUp();
  const prefill: PrefillMeasurement[] = [];
  for (const p of plan.prefill) {
    bar.phase(`prefill ISL ${p.isl}`);
    prefill.push(await prober.prefill(p, () => bar.tick()));
  }
  const decode: DecodeMeasurement[] = [];
  const kv = { blockSize: card.kvBlockSize, totalBlocks: card.totalKvBlocks };
  for (const p of plan.decode) {
    bar.phase(`decode context ${p.contextLength} × ${p.concurrency}`);
    decode.push(await prober.decode(p, kv, () => bar.tick()));
  }
  const wallS = (performance.now() - t0) / 1000;
  bar.finish(`measured in ${wallS.toFixed(1)} s`);
  const report = buildProfile(
    { model: card.name, engine: card.engine, contextLength: card.contextLength, kvBlockSize: card.kvBlockSize, totalKvBlocks: card.totalKvBlocks, kvCapacityTokens: card.totalKvBlocks * card.kvBlockSize, maxNumBatchedTokens: card.maxNumBatchedTokens, ...(card.parameters !== undefined ? { parameters: card.parameters } : {}) },
    prefill,
    decode,
    new Date().toISOString(),
    wallS,
  );
  process.stdout.write(formatSummary(report));
  return report;
}

/** The measured points as two small tables on stdout. */
export function formatSummary(r: ProfileReport): string {
  const lines = ['prefill:  ISL  TTFT ms  tok/s'];
  for (const p of r.measured.prefill) lines.push(`  ${String(p.isl).padStart(9)}  ${p.ttftMs.toFixed(1).padStart(7)}  ${Math.round(p.tokensPerS)}`);
  lines.push('decode:  context  streams  KV use  ITL ms  tok/s');
  for (const d of r.measured.decode) {
    lines.push(`  ${String(d.contextLength).padStart(13)}  ${String(d.concurrency).padStart(7)}  ${d.kvUsage.toFixed(2).padStart(6)}  ${d.itlMs.toFixed(1).padStart(6)}  ${Math.round(d.tokensPerS)}`);
  }
  return lines.join('\n') + '\n';
}
