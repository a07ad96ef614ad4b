/**
 * What `runtime up` hands its children: its flags (UpFlags), the command lines of the frontend
 * and the workers built from them (childArgs: checked before anything starts, then run), each
 * worker's share of one GPU and its own disk tier, and the log level the children run at.
 */
import { join } from 'node:path';
import { ConfigError } from '../runtime/errors.js';

export interface UpFlags {
  engine: 'mocker' | 'native';
  model: string;
  /** Aggregated workers; default 2, or 0 when --prefill/--decode ask for a disaggregated fleet. */
  workers?: number;
  prefill: number;
  decode: number;
  httpPort: number;
  host: string;
  discovery: 'file' | 'etcd';
  eventPlane: 'direct' | 'nats';
  speedupRatio?: string;
  numGpuBlocks?: string;
  blockSize?: string;
  maxNumSeqs?: string;
  maxNumBatchedTokens?: string;
  device?: string;
  threads?: string;
  gpuMemoryUtilization?: string;
  enforceEager?: boolean;
  kvLayerStreaming?: boolean;
  kvBytesPerToken?: string;
  kvReleaseTimeout?: string;
  perfProfile?: string;
  contextLength?: string;
  kvCacheMemory?: string;
  kvCacheDtype?: string;
  quantization?: string;
  lora?: string[];
  maxLoras?: string;
  maxCpuLoras?: string;
  maxLoraRank?: string;
  maxLoraBytes?: string;
  maxLoraLoads?: string;
  loraRoot?: string[];
  grammarCompileTimeoutMs?: string;
  grammarCompileMemoryMb?: string;
  kvHostCacheGb?: string;
  kvDiskCacheDir?: string;
  kvDiskCacheGb?: string;
  kvDiskMinReuse?: string;
  logLevel: string;
  planner?: 'load' | 'sla';
  maxWorkers?: number;
  minWorkers: number;
  plannerInterval: number;
  plannerConfig?: string;
  plannerProfile?: string;
  /** Embedding workers (`worker --task embed`); with them and no --workers, no generation workers. */
  embeddingWorkers: number;
  pooling?: string;
  speculative?: string;
  numSpeculativeTokens?: string;
  promptLookupMin?: string;
  promptLookupMax?: string;
  specAcceptance?: string;
}

/**
 * Workers started by `up` on one GPU share it: unless told otherwise, each takes an equal part
 * of the usual 0.9 (two workers: 0.45 each), so the second does not fail for want of memory.
 * An explicit --gpu-memory-utilization is the share of the GPU for all of them together.
 */
export function gpuMemoryShare(flags: Pick<UpFlags, 'engine' | 'device' | 'gpuMemoryUtilization' | 'workers' | 'prefill' | 'decode'>): string | undefined {
  const onGpu = flags.engine === 'native' && flags.device !== undefined && flags.device !== 'cpu';
  if (!onGpu) return flags.gpuMemoryUtilization;
  const total = flags.gpuMemoryUtilization !== undefined ? Number(flags.gpuMemoryUtilization) : 0.9;
  if (!(total > 0 && total <= 1)) throw new ConfigError(`--gpu-memory-utilization must be in (0, 1], got '${flags.gpuMemoryUtilization}'`);
  const workers = (flags.workers ?? 0) + flags.prefill + flags.decode;
  return (total / Math.max(1, workers)).toFixed(4);
}

/** pino's level names and numbers. */
const PINO_LEVELS: Record<string, number> = { trace: 10, debug: 20, info: 30, warn: 40, error: 50, fatal: 60, silent: 100 };

/**
 * The command lines of `up`'s children. Built once for checking (before anything starts, with
 * the flags as given) and once for starting (with the model and discovery paths resolved): the
 * same function, so what is checked is what runs.
 */
export function childArgs(flags: UpFlags, frontendExtra: string[], paths: { modelDir: string; discoveryDir: string }): { frontend: string[]; worker: (pool: string, name: string) => string[]; embedWorker: (name: string) => string[] } {
  // Children log at info at least: `up` waits on their info-level start-up records, and shows only
  // the lines at the asked level (a quieter --log-level must not hide "worker ready" from `up`).
  const childLevel = shownLevel(flags) > 30 ? 'info' : flags.logLevel;
  const common = ['--discovery', flags.discovery, '--event-plane', flags.eventPlane, '--log-level', childLevel];
  if (flags.discovery === 'file') common.push('--discovery-dir', paths.discoveryDir);
  const workerFlags = ['--engine', flags.engine, '--model', paths.modelDir];
  const passthrough: Array<[keyof UpFlags, string]> = [
    ['speedupRatio', '--speedup-ratio'],
    ['numGpuBlocks', '--num-gpu-blocks'],
    ['blockSize', '--block-size'],
    ['maxNumSeqs', '--max-num-seqs'],
    ['maxNumBatchedTokens', '--max-num-batched-tokens'],
    ['device', '--device'],
    ['threads', '--threads'],
    ['kvBytesPerToken', '--kv-bytes-per-token'],
    ['kvReleaseTimeout', '--kv-release-timeout'],
    ['perfProfile', '--perf-profile'],
    ['contextLength', '--context-length'],
    ['kvCacheMemory', '--kv-cache-memory'],
    ['kvCacheDtype', '--kv-cache-dtype'],
    ['quantization', '--quantization'],
    ['kvHostCacheGb', '--kv-host-cache-gb'],
    ['kvDiskCacheDir', '--kv-disk-cache-dir'],
    ['kvDiskCacheGb', '--kv-disk-cache-gb'],
    ['kvDiskMinReuse', '--kv-disk-min-reuse'],
    ['maxLoras', '--max-loras'],
    ['maxCpuLoras', '--max-cpu-loras'],
    ['maxLoraRank', '--max-lora-rank'],
    ['maxLoraBytes', '--max-lora-bytes'],
    ['maxLoraLoads', '--max-lora-loads'],
  ];
  // The grammar budgets bound both compiles of a request: the frontend's check and the worker's.
  const budgets: string[] = [];
  if (flags.grammarCompileTimeoutMs !== undefined) budgets.push('--grammar-compile-timeout-ms', flags.grammarCompileTimeoutMs);
  if (flags.grammarCompileMemoryMb !== undefined) budgets.push('--grammar-compile-memory-mb', flags.grammarCompileMemoryMb);
  for (const [key, flag] of passthrough) if (flags[key] !== undefined) workerFlags.push(flag, String(flags[key]));
  if (flags.enforceEager === true) workerFlags.push('--enforce-eager');
  // Both sides must agree: the frontend asks for early hand-offs, the workers make and take them.
  const streaming = flags.kvLayerStreaming === true ? ['--kv-layer-streaming'] : [];
  workerFlags.push(...streaming);
  for (const l of flags.lora ?? []) workerFlags.push('--lora', l);
  for (const root of flags.loraRoot ?? []) workerFlags.push('--lora-root', root);
  const gpuShare = gpuMemoryShare(flags);
  if (gpuShare !== undefined) workerFlags.push('--gpu-memory-utilization', gpuShare);
  // Each worker is named as `up` names it (agg-0, embed-0: its logs, its card, the dashboard) and
  // serves /metrics on a port of its own (any free one; `up` prints where).
  const own = (name: string) => ['--worker-name', name, '--status-port', '0'];
  // Speculative decoding: generation workers only (an embedding worker refuses it).
  const speculation: string[] = [];
  const specFlags: Array<[keyof UpFlags, string]> = [
    ['speculative', '--speculative'],
    ['numSpeculativeTokens', '--num-speculative-tokens'],
    ['promptLookupMin', '--prompt-lookup-min'],
    ['promptLookupMax', '--prompt-lookup-max'],
    ['specAcceptance', '--spec-acceptance'],
  ];
  for (const [key, flag] of specFlags) if (flags[key] !== undefined) speculation.push(flag, String(flags[key]));
  return {
    frontend: ['frontend', ...common, '--http-port', String(flags.httpPort), '--host', flags.host, ...budgets, ...streaming, ...frontendExtra],
    worker: (pool, name) => ['worker', ...common, ...own(name), ...workerFlags, ...speculation, ...budgets, '--mode', pool],
    embedWorker: (name) => ['worker', ...common, ...own(name), ...workerFlags, '--task', 'embed', ...(flags.pooling !== undefined ? ['--pooling', flags.pooling] : [])],
  };
}

/**
 * Each worker gets its own G3 directory under --kv-disk-cache-dir, named by its stable child
 * name: workers sharing one would adopt and evict each other's blocks, and a restarted worker
 * finds its own blocks again.
 */
export function ownDiskTier(args: string[], name: string): string[] {
  const i = args.indexOf('--kv-disk-cache-dir');
  if (i < 0 || i + 1 >= args.length) return args;
  const own = [...args];
  own[i + 1] = join(args[i + 1]!, name);
  return own;
}

/** The pino level of `up`'s own --log-level: lines of the children below it are not shown. */
export function shownLevel(flags: UpFlags): number {
  return PINO_LEVELS[flags.logLevel] ?? 30;
}
