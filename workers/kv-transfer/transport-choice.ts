/**
 * Which transport moves a hand-off's KV, from where each pool lives. Pure: placements in, a
 * choice with its reason out; the decode worker asks once per hand-off and the prefill worker
 * lists what it can serve on its model card.
 *
 *   source pool   local pool   same node   UCX can read GPU memory   →  transport      extra copies
 *   host          host         any         any                          ucx-host       —
 *   host          device       any         any                          ucx-host       host→device here
 *   device        host         any         any                          staged         device→host there
 *   device        device       yes         any                          cuda-ipc       —
 *   device        device       no          both sides                   ucx-cuda       —
 *   device        device       no          not both                     staged         device→host there, host→device here
 *
 * "Same node" is the same boot id when both sides give one, else the same hostname. Device
 * pools of a device kind other than CUDA, or of two kinds, are staged.
 */
import type { KvPlacement, KvTransport } from '../../proto/wire.js';

export type { KvPlacement, KvTransport };
export { KV_TRANSPORTS } from '../../proto/wire.js';

export interface TransportChoice {
  transport: KvTransport;
  /** The source (prefill) side copies device → host before the read. */
  sourceToHost: boolean;
  /** This (decode) side copies the read bytes host → device. */
  localToDevice: boolean;
  /** One line for logs: why this transport. */
  reason: string;
}

/** A host pool on an unknown node: what a peer that names no placement (older workers) has. */
export function legacyPlacement(hostname = ''): KvPlacement {
  return { pool: 'host', hostname, ucxCuda: false };
}

/** A placement read from another process (card or hand-off), or undefined when it is not one. */
export function parsePlacement(value: unknown): KvPlacement | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const v = value as Record<string, unknown>;
  if (v.pool !== 'host' && v.pool !== 'device') return undefined;
  if (typeof v.hostname !== 'string' || typeof v.ucxCuda !== 'boolean') return undefined;
  for (const field of ['deviceKind', 'bootId', 'gpuId'] as const) if (v[field] !== undefined && typeof v[field] !== 'string') return undefined;
  return {
    pool: v.pool,
    hostname: v.hostname,
    ucxCuda: v.ucxCuda,
    ...(typeof v.deviceKind === 'string' ? { deviceKind: v.deviceKind } : {}),
    ...(typeof v.bootId === 'string' ? { bootId: v.bootId } : {}),
    ...(typeof v.gpuId === 'string' ? { gpuId: v.gpuId } : {}),
  };
}

export function sameNode(a: KvPlacement, b: KvPlacement): boolean {
  if (a.bootId !== undefined && b.bootId !== undefined) return a.bootId === b.bootId;
  return a.hostname !== '' && a.hostname === b.hostname;
}

function isCuda(p: KvPlacement): boolean {
  return p.pool === 'device' && p.deviceKind === 'cuda';
}

/** The transport for pulling from `source`'s pool into `local`'s pool. */
export function chooseTransport(source: KvPlacement, local: KvPlacement): TransportChoice {
  const choice = (transport: KvTransport, sourceToHost: boolean, localToDevice: boolean, reason: string): TransportChoice => ({
    transport,
    sourceToHost,
    localToDevice,
    reason,
  });
  if (source.pool === 'host' && local.pool === 'host') return choice('ucx-host', false, false, 'both pools in host memory');
  if (source.pool === 'host') return choice('ucx-host', false, true, 'source pool in host memory: UCX host read, then host→device here');
  if (local.pool === 'host') return choice('staged', true, false, 'local pool in host memory: device→host on the source, then UCX host read');
  if (!isCuda(source) || !isCuda(local)) {
    return choice('staged', true, true, `device kinds ${source.deviceKind ?? '?'} and ${local.deviceKind ?? '?'}: no direct device path`);
  }
  if (sameNode(source, local)) {
    const gpus = source.gpuId !== undefined && source.gpuId === local.gpuId ? 'the same GPU' : 'GPUs of one node';
    return choice('cuda-ipc', false, false, `device pools on ${gpus}: CUDA IPC`);
  }
  if (source.ucxCuda && local.ucxCuda) return choice('ucx-cuda', false, false, 'device pools on two nodes, UCX on both reads GPU memory');
  const which = !source.ucxCuda && !local.ucxCuda ? 'neither side' : source.ucxCuda ? 'this side' : 'the source';
  return choice('staged', true, true, `device pools on two nodes and UCX without CUDA memory support on ${which}: pinned host bounce`);
}

/**
 * What a worker can serve to peers, for its model card: a host pool is read by UCX; a CUDA
 * pool by CUDA IPC on its node, by UCX directly where UCX reads GPU memory, staged otherwise.
 */
export function servableTransports(self: KvPlacement): KvTransport[] {
  if (self.pool === 'host') return ['ucx-host'];
  if (!isCuda(self)) return ['staged'];
  return self.ucxCuda ? ['cuda-ipc', 'ucx-cuda', 'staged'] : ['cuda-ipc', 'staged'];
}
