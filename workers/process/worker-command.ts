/** `runtime worker`: flags and start-up of one worker process. */
import { InvalidArgumentError, Option, type Command } from 'commander';
import { resolve } from 'node:path';
import { intInRange, numberInRange, oneOf, positiveInt } from '../../runtime/index.js';
import { addRuntimeOptions, createRuntimeFromOptions, type RuntimeFlags } from '../../runtime/index.js';
import { DEFAULT_KV_BLOCK_SIZE } from '../models/index.js';
import { WORKER_NAME } from '../../proto/wire.js';
import { DEFAULT_KV_RELEASE_TIMEOUT_MS, DEFAULT_MOCKER_KV_BYTES_PER_TOKEN, DEFAULT_PULL_TIMEOUT_MS } from '../disagg/index.js';
import { DEFAULT_COMPILE_MEMORY_MB, DEFAULT_COMPILE_TIMEOUT_MS, compileLimits } from '../../grammar/index.js';
import { startWorker, type WorkerOptions } from './worker-process.js';
import { GIB } from './kv-tiers-setup.js';
import { parseDiskCacheDir } from '../kv-tiers/index.js';
import { checkWorkerFlags } from './worker-flag-rules.js';
import { startEmbeddingWorker } from '../embedding/index.js';
import { DEFAULT_MAX_CPU_LORAS, DEFAULT_MAX_LORA_BYTES, DEFAULT_MAX_LORA_LOADS, DEFAULT_MAX_LORA_RANK, DEFAULT_MAX_LORAS } from '../lora/index.js';
import { MAX_SPECULATIVE_TOKENS, SPECULATIVE_METHODS, speculativeOptions, type SpeculativeFlags } from '../speculative/index.js';

/** Flags that carry a WorkerOptions field under the same name and unit. */
type SameAsOptions =
  | 'engine'
  | 'modelName'
  | 'workerName'
  | 'mode'
  | 'component'
  | 'blockSize'
  | 'numGpuBlocks'
  | 'maxNumBatchedTokens'
  | 'maxNumSeqs'
  | 'contextLength'
  | 'speedupRatio'
  | 'perfProfile'
  | 'device'
  | 'threads'
  | 'namespace';

/** What commander parses; the rest differ from WorkerOptions in name or unit (seconds). */
interface WorkerFlags extends RuntimeFlags, Pick<WorkerOptions, SameAsOptions>, SpeculativeFlags {
  model: string;
  quantization?: 'fp8' | 'none';
  kvCacheDtype: 'auto' | 'bf16' | 'fp8';
  gpuMemoryUtilization?: number;
  enforceEager?: boolean;
  kvCacheMemory?: number;
  loadMetricsInterval: number;
  kvBytesPerToken?: number;
  kvReleaseTimeout: number;
  kvPullTimeout: number;
  kvLayerStreaming?: boolean;
  grammarCompileTimeoutMs: number;
  grammarCompileMemoryMb: number;
  kvHostCacheGb?: number;
  kvDiskCacheDir?: string;
  kvDiskCacheGb?: number;
  kvDiskMinReuse: number;
  task: 'generate' | 'embed';
  pooling?: 'last' | 'mean';
  lora: string[];
  maxLoras: number;
  maxCpuLoras: number;
  maxLoraRank: number;
  maxLoraBytes: number;
  maxLoraLoads: number;
  loraRoot: string[];
}

function workerOptionsFromFlags(flags: WorkerFlags): WorkerOptions {
  return {
    engine: flags.engine,
    modelDir: flags.model,
    modelName: flags.modelName,
    ...(flags.workerName !== undefined ? { workerName: flags.workerName } : {}),
    mode: flags.mode,
    namespace: flags.namespace,
    component: flags.component,
    blockSize: flags.blockSize,
    numGpuBlocks: flags.numGpuBlocks,
    maxNumBatchedTokens: flags.maxNumBatchedTokens,
    maxNumSeqs: flags.maxNumSeqs,
    contextLength: flags.contextLength,
    speedupRatio: flags.speedupRatio,
    perfProfile: flags.perfProfile,
    device: flags.device,
    threads: flags.threads,
    ...(flags.quantization !== undefined ? { quantization: flags.quantization } : {}),
    kvCacheDtype: flags.kvCacheDtype,
    ...(flags.gpuMemoryUtilization !== undefined ? { gpuMemoryUtilization: flags.gpuMemoryUtilization } : {}),
    ...(flags.enforceEager === true ? { cudaGraphs: false } : {}),
    kvCacheMemoryBytes: flags.kvCacheMemory,
    loadMetricsIntervalMs: flags.loadMetricsInterval,
    ...(flags.kvBytesPerToken !== undefined ? { kvBytesPerToken: flags.kvBytesPerToken } : {}),
    kvReleaseTimeoutMs: Math.round(flags.kvReleaseTimeout * 1000),
    kvPullTimeoutMs: Math.round(flags.kvPullTimeout * 1000),
    ...(flags.kvLayerStreaming === true ? { kvLayerStreaming: true } : {}),
    grammarLimits: compileLimits(flags.grammarCompileTimeoutMs, flags.grammarCompileMemoryMb),
    ...(flags.kvHostCacheGb !== undefined || flags.kvDiskCacheDir !== undefined || flags.kvDiskCacheGb !== undefined
      ? {
          kvTiers: {
            hostCacheBytes: Math.floor((flags.kvHostCacheGb ?? 0) * GIB),
            ...(flags.kvDiskCacheDir !== undefined ? { diskCacheDir: flags.kvDiskCacheDir } : {}),
            diskCacheBytes: Math.floor((flags.kvDiskCacheGb ?? 0) * GIB),
            diskMinReuse: flags.kvDiskMinReuse,
            ...(flags.kvBytesPerToken !== undefined ? { kvBytesPerToken: flags.kvBytesPerToken } : {}),
          },
        }
      : {}),
    lora: {
      adapters: flags.lora,
      maxLoras: flags.maxLoras,
      maxCpuLoras: flags.maxCpuLoras,
      maxLoraRank: flags.maxLoraRank,
      maxLoraBytes: flags.maxLoraBytes,
      maxLoraLoads: flags.maxLoraLoads,
      roots: flags.loraRoot.map((r) => resolve(r)),
    },
    ...speculativeFromFlags(flags),
  };
}

/** --speculative and its knobs (worker-flag-rules.ts refused the combinations that cannot run). */
function speculativeFromFlags(flags: WorkerFlags): Pick<WorkerOptions, 'speculative'> {
  const speculative = speculativeOptions(flags);
  return speculative !== undefined ? { speculative } : {};
}

/** `--lora name=DIR`, repeatable. */
function collectLora(value: string, previous: string[]): string[] {
  if (!/^[^=]+=.+$/.test(value)) throw new InvalidArgumentError(`expected name=DIR, got '${value}'`);
  return [...previous, value];
}

function parseWorkerName(value: string): string {
  if (WORKER_NAME.test(value)) return value;
  throw new InvalidArgumentError(`expected 1-64 letters, digits, '.', '_' or '-' (starting with a letter or digit), got '${value}'`);
}

/** cpu | cuda | cuda:N (simt: the CUDA backend's kernels on the host, for tests). */
export function parseDevice(value: string): string {
  if (value === 'cpu' || value === 'cuda' || value === 'simt' || /^cuda:\d{1,4}$/.test(value)) return value;
  throw new InvalidArgumentError(`expected cpu, cuda or cuda:N, got '${value}'`);
}

export function registerWorkerCommand(program: Command): void {
  const cmd = program
    .command('worker')
    .description('a worker process: scheduler + block manager + engine (mocker or native)')
    .addOption(new Option('--engine <engine>', 'mocker | native').argParser(oneOf(['mocker', 'native'] as const)).default('mocker'))
    .addOption(new Option('--model <dir>', 'Hugging Face model directory').makeOptionMandatory(true))
    .option('--model-name <name>', 'served model name (default: the directory name)')
    .addOption(new Option('--worker-name <name>', "this worker's name in its log lines and on the dashboard (runtime up names its workers agg-0, decode-1, embed-0, …; default: worker-<mode>, or worker-embed)").argParser(parseWorkerName))
    .addOption(new Option('--mode <mode>', 'agg | prefill | decode').argParser(oneOf(['agg', 'prefill', 'decode'] as const)).default('agg'))
    .option('--component <name>', 'component to serve under (default: backend, prefill or decode by mode)')
    .addOption(new Option('--block-size <tokens>', 'tokens per KV block').argParser(intInRange(1, 1024)).default(DEFAULT_KV_BLOCK_SIZE))
    .addOption(new Option('--num-gpu-blocks <n>', 'KV blocks in the pool (mocker default 16384; native default: from --kv-cache-memory)').argParser(positiveInt))
    .addOption(new Option('--max-num-batched-tokens <n>', 'token budget per step').argParser(positiveInt).default(8192))
    .addOption(new Option('--max-num-seqs <n>', 'most sequences running at once').argParser(positiveInt).default(256))
    .addOption(new Option('--context-length <n>', 'cap the model context length').argParser(positiveInt))
    .addOption(new Option('--speedup-ratio <x>', 'mocker: divide simulated step time by this').argParser(numberInRange(1e-6)).default(1))
    .option('--perf-profile <file>', 'mocker: JSON profile of measured step times (interpolated)')
    .addOption(new Option('--device <device>', 'native: cpu | cuda | cuda:N (GPU N; `runtime backends` lists what this machine has)').argParser(parseDevice).default('cpu'))
    .addOption(new Option('--gpu-memory-utilization <share>', 'native on a GPU: share of device memory for weights, activations and the KV pool (default 0.9) when --num-gpu-blocks and --kv-cache-memory are unset').argParser(numberInRange(0.01, 1)))
    .addOption(new Option('--enforce-eager', 'native on a GPU: no CUDA graphs (every decode step launches its kernels)'))
    .addOption(new Option('--threads <n>', 'native: compute threads (default: all cores)').argParser(positiveInt))
    .addOption(new Option('--kv-cache-memory <bytes>', 'KV pool budget in bytes when --num-gpu-blocks is not set (the mocker sizes its block count from it and the model shape)').argParser(positiveInt))
    .addOption(new Option('--kv-cache-dtype <dtype>', 'KV cache element type: auto (f32 on the CPU, bf16 on GPUs) | bf16 | fp8 (e4m3, scaled by the checkpoint\'s k_scale/v_scale or 1.0; half the bytes per token of bf16)').argParser(oneOf(['auto', 'bf16', 'fp8'] as const)).default('auto'))
    .addOption(new Option('--quantization <method>', "native weights: fp8 (quantize a bf16/f16 checkpoint's linear layers at load: per-channel scales, dynamic per-token activations) | none (dequantize an FP8 checkpoint); default: the checkpoint's own quantization_config").argParser(oneOf(['fp8', 'none'] as const)))
    .addOption(new Option('--load-metrics-interval <ms>', 'publish load metrics at most this often').argParser(intInRange(0, 60_000)).default(10))
    .addOption(new Option('--kv-bytes-per-token <bytes>', `mocker: KV bytes per token: of its real host pool in prefill/decode mode (default ${DEFAULT_MOCKER_KV_BYTES_PER_TOKEN}), and of the blocks its KV tiers copy (default: the model's own, bf16, from config.json)`).argParser(positiveInt))
    .addOption(new Option('--kv-release-timeout <seconds>', 'prefill: free pinned KV blocks no decode worker released after this long').argParser(numberInRange(0.001)).default(DEFAULT_KV_RELEASE_TIMEOUT_MS / 1000))
    .addOption(new Option('--kv-layer-streaming', 'prefill/decode, host KV pools and device pools on one node: stream each hand-off layer by layer while the prefill computes (with the frontend flag of the same name; docs/disaggregation.md)'))
    .addOption(new Option('--kv-pull-timeout <seconds>', 'decode: give up a KV pull and compute the prompt after this long (keep below --kv-release-timeout)').argParser(numberInRange(0.001)).default(DEFAULT_PULL_TIMEOUT_MS / 1000))
    .addOption(new Option('--grammar-compile-timeout-ms <ms>', 'structured output: most wall time one new grammar may take to compile (then 400)').argParser(intInRange(1, 3_600_000)).default(DEFAULT_COMPILE_TIMEOUT_MS))
    .addOption(new Option('--grammar-compile-memory-mb <mb>', 'structured output: most memory one new grammar may need, automaton and token classes (then 400)').argParser(numberInRange(0.001)).default(DEFAULT_COMPILE_MEMORY_MB))
    .addOption(new Option('--kv-host-cache-gb <gib>', 'KV tier G2: host memory (GiB) that keeps blocks evicted from the engine pool (docs/kv-tiers.md)').argParser(numberInRange(0)))
    .addOption(new Option('--kv-disk-cache-dir <dir>', 'KV tier G3: directory for blocks pushed out of the host tier (survives restarts; it must be a directory this process may write, or creatable)').argParser(parseDiskCacheDir))
    .addOption(new Option('--kv-disk-cache-gb <gib>', 'KV tier G3: most disk space (GiB) it uses, LRU').argParser(numberInRange(0)))
    .addOption(new Option('--kv-disk-min-reuse <n>', 'KV tier G3: prefix hits a block needs before it is written to disk').argParser(intInRange(0, 1_000_000)).default(2))
    .addOption(new Option('--task <task>', 'generate | embed (an embedding worker: serves /v1/embeddings through the `embed` endpoint, docs/embeddings.md)').argParser(oneOf(['generate', 'embed'] as const)).default('generate'))
    .addOption(new Option('--pooling <mode>', "--task embed: last | mean (default: the model's sentence-transformers Pooling module, else last)").argParser(oneOf(['last', 'mean'] as const)))
    .addOption(new Option('--lora <name=dir>', 'serve this PEFT LoRA adapter under name (repeatable); more at run time with POST /v1/load_lora_adapter').argParser(collectLora).default([]))
    .addOption(new Option('--max-loras <n>', 'most distinct adapters in one step').argParser(positiveInt).default(DEFAULT_MAX_LORAS))
    .addOption(new Option('--max-cpu-loras <n>', 'most adapters resident in host memory; the least recently used idle one makes room').argParser(positiveInt).default(DEFAULT_MAX_CPU_LORAS))
    .addOption(new Option('--max-lora-rank <r>', 'refuse adapters of a higher rank').argParser(positiveInt).default(DEFAULT_MAX_LORA_RANK))
    .addOption(new Option('--max-lora-bytes <bytes>', "refuse adapters whose weight files are larger (checked from their size and headers before reading)").argParser(positiveInt).default(DEFAULT_MAX_LORA_BYTES))
    .addOption(new Option('--max-lora-loads <n>', 'adapter loads reading files at once; 16 x that many more wait, the rest get 429').argParser(positiveInt).default(DEFAULT_MAX_LORA_LOADS))
    .addOption(
      new Option('--lora-root <dir>', 'run-time adapter loads (load_lora_adapter, on demand) must name a directory under this one (repeatable); --lora adapters are exempt; default: anywhere')
        .argParser((v: string, prev: string[]) => [...prev, v])
        .default([]),
    )
    .addOption(new Option('--speculative <method>', 'speculative decoding: off | ngram (prompt lookup) | suffix (suffix decoding); docs/speculative.md').argParser(oneOf(SPECULATIVE_METHODS)).default('off'))
    .addOption(new Option('--num-speculative-tokens <n>', 'most drafts a sequence verifies in one step (default 5 for ngram, 16 for suffix)').argParser(intInRange(1, MAX_SPECULATIVE_TOKENS)))
    .addOption(new Option('--prompt-lookup-min <n>', 'ngram: shortest n-gram matched (default 2)').argParser(intInRange(1, 64)))
    .addOption(new Option('--prompt-lookup-max <n>', 'ngram: longest n-gram matched, tried first (default 5)').argParser(intInRange(1, 64)))
    .addOption(new Option('--spec-acceptance <p>', 'mocker with --speculative: the chance each draft is accepted (default 0.7)').argParser(numberInRange(0, 1)));
  addRuntimeOptions(cmd).action(async (flags: WorkerFlags) => {
    checkWorkerFlags(flags);
    const runtime = await createRuntimeFromOptions(flags, flags.workerName ?? (flags.task === 'embed' ? 'worker-embed' : `worker-${flags.mode}`));
    const options = workerOptionsFromFlags(flags);
    try {
      if (flags.task === 'embed') await startEmbeddingWorker(runtime, { ...options, ...(flags.pooling ? { pooling: flags.pooling } : {}) });
      else await startWorker(runtime, options);
    } catch (err) {
      await runtime.shutdown('start-up failed');
      throw err;
    }
    runtime.markReady();
  });
}
