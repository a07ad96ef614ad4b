/**
 * A prefill or decode worker whose native engine keeps its KV pool in device memory (--device
 * cuda or simt). The engine loads with its own pool; the UCX agent gets a host pool of the
 * same layout beside it:
 *   - prefill: the pool is exported (kvExportHandle: CUDA IPC, SIMT shared memory) for
 *     same-node decode workers, and `stage` copies a hand-off's blocks device → host into the
 *     host pool (same block ids) when a decode worker asks (`kv_stage`), for the staged path
 *     (UCX reads that host copy). The host pool costs as much host memory as the device pool: sized by
 *     --num-gpu-blocks / --kv-cache-memory on real GPUs;
 *   - decode: one block of host pool names the layout; pulls stage per transfer
 *     (device-kv-importer.ts).
 */
import { totalmem } from 'node:os';
import type { KvPlacement } from '../../proto/wire.js';
import { ConfigError } from '../../runtime/errors.js';
import type { NativeEngine, NativeEngineOptions } from '../engines/native/index.js';
import { UcxTransferAgent, localPlacement, peerLayout, type KvPool } from '../kv-transfer/index.js';
import { poolBytes } from './converting-pull.js';
import type { KvTransferSetup, KvTransferSetupOptions } from './kv-pool-setup.js';

export interface DeviceKvTransferSetup extends KvTransferSetup {
  engine: NativeEngine;
  /** Prefill: copy blocks device → host pool (same ids) for UCX readers. */
  stage?(blockIds: number[]): Promise<void>;
  /** Prefill: the pool's export handle, base64. */
  deviceHandle?: string;
}

export function isDeviceKvSetup(kv: KvTransferSetup): kv is DeviceKvTransferSetup {
  return kv.placement.pool === 'device' && kv.engine.info.kind === 'native';
}

/** Runs of consecutive ids, so each becomes one kvReadBlocks into a contiguous host range. */
function runs(ids: number[]): Array<{ first: number; ids: number[] }> {
  const out: Array<{ first: number; ids: number[] }> = [];
  for (const id of ids) {
    const last = out[out.length - 1];
    if (last !== undefined && last.first + last.ids.length === id) last.ids.push(id);
    else out.push({ first: id, ids: [id] });
  }
  return out;
}

export async function setupDeviceKvTransfer(
  engineOptions: Omit<NativeEngineOptions, 'kvPool'>,
  mode: 'prefill' | 'decode',
  options: Omit<KvTransferSetupOptions, 'kvBytesPerToken'> = {},
): Promise<DeviceKvTransferSetup> {
  const { createNativeEngine } = await import('../engines/native/index.js');
  const engine = await createNativeEngine(engineOptions);
  let agent: UcxTransferAgent | undefined;
  try {
    agent = UcxTransferAgent.create({
      ...(options.ucxConfig !== undefined ? { config: options.ucxConfig } : {}),
      ...(options.counters !== undefined ? { counters: options.counters } : {}),
    });
    const blockBytes = engine.model.kvBytesPerBlock;
    // The prefill's host copy is as large as its device pool: refuse a size this machine cannot
    // hold instead of being OOM-killed mid-start.
    if (mode === 'prefill' && engine.info.numBlocks * blockBytes > totalmem() / 2) {
      throw new ConfigError(
        `a prefill worker on ${engineOptions.device} keeps a host copy of its ${((engine.info.numBlocks * blockBytes) / 2 ** 30).toFixed(1)} GiB KV pool ` +
          `for staged transfers, more than half of this machine's memory; bound the pool with --kv-cache-memory or --num-gpu-blocks`,
      );
    }
    const pool: KvPool = agent.allocatePool({ numBlocks: mode === 'prefill' ? engine.info.numBlocks : 1, blockBytes, layout: engine.kvLayoutName });
    const device = engineOptions.device ?? 'cpu';
    const deviceKind = device.startsWith('cuda') ? 'cuda' : device;
    const gpuId = device.startsWith('cuda') ? (device.split(':')[1] ?? '0') : undefined;
    const placement: KvPlacement = localPlacement({ poolOnHost: false, deviceKind, ...(gpuId !== undefined ? { gpuId } : {}), ucxCuda: agent.cudaSupported });
    const layout = peerLayout(engine.kvLayoutName);
    const a = agent;
    const setup: DeviceKvTransferSetup = { engine, agent, pool, ...(layout !== undefined ? { layout } : {}), placement, close: () => a.close() };
    if (mode === 'prefill') {
      const handle = engine.kvExportHandle();
      if (handle !== null) setup.deviceHandle = Buffer.from(handle).toString('base64');
      const host = poolBytes(pool);
      setup.stage = async (blockIds) => {
        await Promise.all(runs(blockIds).map((r) => engine.kvReadBlocks(Int32Array.from(r.ids), host.subarray(r.first * blockBytes, (r.first + r.ids.length) * blockBytes))));
      };
    }
    return setup;
  } catch (err) {
    agent?.close();
    await engine.close();
    throw err;
  }
}
