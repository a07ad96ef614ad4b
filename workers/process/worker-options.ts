/**
 * The `runtime worker` options (worker-command.ts reads them from the flags), and the component
 * each role serves under.
 */
import type { WorkerRole } from '../../proto/wire.js';
import type { CompileLimits } from '../../grammar/index.js';
import type { WorkerKvTierOptions } from './kv-tiers-setup.js';
import type { SpeculativeOptions } from '../speculative/index.js';

export const COMPONENT_FOR_ROLE: Record<WorkerRole, string> = { agg: 'backend', prefill: 'prefill', decode: 'decode' };

export interface WorkerOptions {
  engine: 'mocker' | 'native';
  modelDir: string;
  modelName?: string;
  /** On the card (the dashboard shows it): `--worker-name`. */
  workerName?: string;
  mode: WorkerRole;
  namespace: string;
  component?: string;
  blockSize: number;
  numGpuBlocks?: number;
  maxNumBatchedTokens: number;
  maxNumSeqs: number;
  contextLength?: number;
  /** mocker */
  speedupRatio: number;
  perfProfile?: string;
  /** native: cpu, cuda, cuda:N (or simt, the CUDA backend's kernels on the host, for tests) */
  device: string;
  /** native: `--quantization` (unset: the checkpoint's own quantization_config). */
  quantization?: 'fp8' | 'none';
  /**
   * `--kv-cache-dtype`: the native pool's element type; the mocker sizes its pool from
   * --kv-cache-memory with the bytes per token a native GPU pool of this type would have.
   */
  kvCacheDtype?: 'auto' | 'bf16' | 'fp8';
  threads?: number;
  kvCacheMemoryBytes?: number;
  /** native on a GPU: share of device memory the worker may fill (default 0.9). */
  gpuMemoryUtilization?: number;
  /** native on a GPU: replay decode steps from CUDA graphs (default true). */
  cudaGraphs?: boolean;
  /** Publish load metrics at most this often (ms); 0 publishes after every step. */
  loadMetricsIntervalMs: number;
  /** Each new grammar's compile budget (`--grammar-compile-timeout-ms`, `--grammar-compile-memory-mb`). */
  grammarLimits?: CompileLimits;
  /** prefill/decode, mocker: bytes of KV per token in the host pool (default 1024). */
  kvBytesPerToken?: number;
  /** prefill: free pinned blocks no decode worker released after this long (default 30 s). */
  kvReleaseTimeoutMs?: number;
  /** decode: give up a pull (and recompute) after this long (default 10 s). */
  kvPullTimeoutMs?: number;
  /**
   * Layer-wise streaming (--kv-layer-streaming, docs/disaggregation.md): a prefill worker
   * publishes per-layer readiness of each hand-off and announces it before its first token; a
   * decode worker serves `kv_prefetch`. Host KV pools only (mocker, native CPU).
   */
  kvLayerStreaming?: boolean;
  /** KV tiers below the engine pool (`--kv-host-cache-gb`, `--kv-disk-cache-*`); docs/kv-tiers.md. */
  kvTiers?: WorkerKvTierOptions;
  /** prefill/decode: UCX config overrides without the UCX_ prefix; UCX_* env applies otherwise. */
  ucxConfig?: Record<string, string>;
  /**
   * Multi-LoRA: adapters loaded at start (`name=DIR`) and the limits (`--max-loras`,
   * `--max-cpu-loras`, `--max-lora-rank`, `--max-lora-bytes`, `--max-lora-loads`), and where
   * run-time loads may read (`--lora-root`).
   */
  lora?: { adapters: string[]; maxLoras?: number; maxCpuLoras?: number; maxLoraRank?: number; maxLoraBytes?: number; maxLoraLoads?: number; roots?: string[] };
  /** Speculative decoding (`--speculative`, docs/speculative.md); undefined = off. */
  speculative?: SpeculativeOptions;
}
