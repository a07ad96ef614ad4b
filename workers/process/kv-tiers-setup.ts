/**
 * The worker's KV tiers from its flags: G2 host memory and G3 disk below the engine pool.
 * The native engine copies real blocks out of its pool (host memory directly, a device pool
 * through kvReadBlocks / kvWriteBlocks); the mocker simulates the copies with H100-like
 * bandwidths, blocks sized by the served model's own KV bytes per token (bf16; or
 * `--kv-bytes-per-token`), so it charges what the native engine on a GPU would copy.
 */
import { PolynomialPerfModel, type PerfModel } from '../../perf-model/index.js';
import type { Engine } from '../engines/engine.js';
import type { NativeEngine } from '../engines/native/index.js';
import { MockerEngine } from '../engines/mocker/index.js';
import { createKvTiers, devicePoolTierTarget, hostPoolTierTarget, simulatedTierTarget, type KvTierManager, type KvTierOptions } from '../kv-tiers/index.js';

export interface WorkerKvTierOptions extends KvTierOptions {
  /** Mocker: bytes of KV per token, for the simulated copy times (`--kv-bytes-per-token`). */
  kvBytesPerToken?: number;
  /** Mocker: the served model's own KV bytes per token (bf16), used when `kvBytesPerToken` is not given. */
  modelKvBytesPerToken?: number;
}

export const GIB = 1024 ** 3;

export async function setupWorkerKvTiers(engine: Engine, options: WorkerKvTierOptions, modelName: string, perfModel?: PerfModel): Promise<KvTierManager | undefined> {
  // The flag combinations were checked before the worker started (worker-flag-rules.ts).
  if (!((options.hostCacheBytes ?? 0) > 0)) return undefined;
  if (engine instanceof MockerEngine) {
    // What the native engine would copy: the model's real KV per token (an 8B model's 128 KiB if unknown).
    const bytes = (options.kvBytesPerToken ?? options.modelKvBytesPerToken ?? 131072) * engine.info.blockSize;
    return createKvTiers(options, simulatedTierTarget(bytes, engine.speedupRatio, perfModel ?? engine.perfModel));
  }
  const native = engine as NativeEngine;
  // A device pool (CUDA; SIMT in tests) moves blocks through the engine's staged copies.
  const target = native.model.kvPoolOnHost ? hostPoolTierTarget(native, modelName) : devicePoolTierTarget(native, modelName);
  return createKvTiers(options, { ...target, perfModel: perfModel ?? new PolynomialPerfModel() });
}
