/**
 * Builds a worker's KV tiers from its flags: sizes in bytes become block counts, the disk
 * directory is opened (its blocks adopted), and the copy seam matches the engine.
 */
import { PolynomialPerfModel, type PerfModel } from '../../perf-model/index.js';
import { KvTierPolicy } from '../block-manager/kv-tier-policy.js';
import { DevicePoolCopier, HostPoolCopier, SimulatedCopier, type BlockCopier, type DeviceBlockPort } from './block-copier.js';
import { DiskBlockStore, SimulatedDiskStore, type BlockStore } from './disk-block-store.js';
import { KvTierManager } from './kv-tier-manager.js';
import { checkDiskCacheDir } from './disk-dir-check.js';
import { onboardCosts, type TierBandwidths, CPU_TIER_BANDWIDTHS, H100_TIER_BANDWIDTHS } from './tier-costs.js';

export interface KvTierOptions {
  /** G2 size in bytes (0 or absent: no tiers). */
  hostCacheBytes?: number;
  diskCacheDir?: string;
  diskCacheBytes?: number;
  diskMinReuse?: number;
}

export interface KvTierTarget {
  copier: BlockCopier;
  /** Model name, KV layout and dtype: written into every disk block's header and checked on load. */
  model: string;
  layout: string;
  dtype: string;
  perfModel?: PerfModel;
  bandwidths?: TierBandwidths;
  /** G3 storage other than files under diskCacheDir (the mocker's simulated disk). */
  disk?: BlockStore;
}

/** The tiers, or undefined when no host cache is configured (G3 needs G2 above it). */
export async function createKvTiers(options: KvTierOptions, target: KvTierTarget): Promise<KvTierManager | undefined> {
  const bb = target.copier.blockBytes;
  const hostBlocks = Math.floor((options.hostCacheBytes ?? 0) / bb);
  if (hostBlocks <= 0) return undefined;
  const hasDisk = options.diskCacheDir !== undefined || target.disk !== undefined;
  const diskBlocks = hasDisk ? Math.floor((options.diskCacheBytes ?? 0) / bb) : 0;
  // A path the disk tier cannot use is a configuration error (exit 2), found before the worker
  // serves; the mocker, which only simulates the disk, is told the same.
  if (diskBlocks > 0 && options.diskCacheDir !== undefined) checkDiskCacheDir(options.diskCacheDir);
  const policy = new KvTierPolicy({ hostBlocks, diskBlocks, ...(options.diskMinReuse !== undefined ? { diskMinReuse: options.diskMinReuse } : {}) });
  const disk =
    diskBlocks > 0
      ? (target.disk ?? new DiskBlockStore({ dir: options.diskCacheDir!, model: target.model, layout: target.layout, dtype: target.dtype, blockBytes: bb }))
      : undefined;
  const manager = new KvTierManager({
    policy,
    costs: onboardCosts(target.perfModel ?? new PolynomialPerfModel(), bb, target.bandwidths ?? CPU_TIER_BANDWIDTHS),
    copier: target.copier,
    ...(disk !== undefined ? { disk } : {}),
  });
  await manager.open();
  return manager;
}

/**
 * The tier target of a native engine whose pool is host memory (the CPU backend). A device
 * pool needs a device BlockCopier (the engine's async block reads/writes) instead.
 */
/**
 * The tier target of a native engine whose pool is device memory: copies go through
 * kvReadBlocks / kvWriteBlocks (pinned staging on the engine's side stream).
 */
export function devicePoolTierTarget(
  engine: DeviceBlockPort & { kvLayoutName: string; model: { kvBytesPerBlock: number; kvDtype?: string } },
  model: string,
): KvTierTarget {
  return {
    copier: new DevicePoolCopier(engine, engine.model.kvBytesPerBlock),
    model,
    layout: engine.kvLayoutName,
    dtype: engine.model.kvDtype ?? 'bf16',
  };
}

export function hostPoolTierTarget(
  engine: { kvPool(): ArrayBuffer; kvLayoutName: string; model: { kvBytesPerBlock: number; kvDtype?: string } },
  model: string,
): KvTierTarget {
  return {
    copier: new HostPoolCopier(engine.kvPool(), engine.model.kvBytesPerBlock),
    model,
    layout: engine.kvLayoutName,
    dtype: engine.model.kvDtype ?? 'f32',
  };
}

/**
 * The mocker's tier target: blocks of `kvBytesPerBlock` notional bytes that cost time at
 * `bandwidths` (H100-like by default), scaled by the mocker's speedup ratio; no bytes move.
 */
export function simulatedTierTarget(kvBytesPerBlock: number, speedupRatio: number, perfModel: PerfModel, bandwidths: TierBandwidths = H100_TIER_BANDWIDTHS): KvTierTarget {
  return {
    copier: new SimulatedCopier(kvBytesPerBlock, bandwidths.hostBytesPerSec, speedupRatio),
    disk: new SimulatedDiskStore(kvBytesPerBlock, bandwidths.diskBytesPerSec, speedupRatio),
    model: 'mocker',
    layout: 'none',
    dtype: 'none',
    perfModel,
    bandwidths,
  };
}
