/**
 * The transport choice (workers/kv-transfer/transport-choice.ts), one row per placement pair:
 * what moves the KV, which extra copies each side makes, and what a worker lists on its card.
 */
import { describe, expect, it } from 'vitest';
import type { KvPlacement, KvTransport } from '../../proto/wire.js';
import { chooseTransport, legacyPlacement, parsePlacement, sameNode, servableTransports } from '../../workers/kv-transfer/transport-choice.js';

const cpu = (hostname: string, bootId?: string): KvPlacement => ({ pool: 'host', hostname, ...(bootId ? { bootId } : {}), ucxCuda: false });
const gpu = (hostname: string, gpuId: string, ucxCuda = false, bootId?: string): KvPlacement => ({
  pool: 'device',
  deviceKind: 'cuda',
  hostname,
  gpuId,
  ucxCuda,
  ...(bootId ? { bootId } : {}),
});

const ROWS: Array<[string, KvPlacement, KvPlacement, KvTransport, boolean, boolean, RegExp]> = [
  // name, source (prefill), local (decode), transport, source→host, local→device, reason
  ['CPU → CPU, one node', cpu('a'), cpu('a'), 'ucx-host', false, false, /both pools in host memory/],
  ['CPU → CPU, two nodes', cpu('a'), cpu('b'), 'ucx-host', false, false, /host memory/],
  ['CPU prefill → GPU decode', cpu('a'), gpu('a', '0'), 'ucx-host', false, true, /host→device here/],
  ['CPU prefill → GPU decode with CUDA UCX, two nodes', cpu('a'), gpu('b', '0', true), 'ucx-host', false, true, /host→device/],
  ['GPU prefill → CPU decode', gpu('a', '0'), cpu('a'), 'staged', true, false, /device→host on the source/],
  ['GPU → GPU, same GPU', gpu('a', '0'), gpu('a', '0'), 'cuda-ipc', false, false, /the same GPU: CUDA IPC/],
  ['GPU → GPU, two GPUs of one node', gpu('a', '0'), gpu('a', '1'), 'cuda-ipc', false, false, /GPUs of one node/],
  ['GPU → GPU, one node even when UCX reads GPU memory', gpu('a', '0', true), gpu('a', '1', true), 'cuda-ipc', false, false, /CUDA IPC/],
  ['GPU → GPU, two nodes, CUDA UCX on both', gpu('a', '0', true), gpu('b', '0', true), 'ucx-cuda', false, false, /UCX on both/],
  ['GPU → GPU, two nodes, distribution UCX', gpu('a', '0'), gpu('b', '0'), 'staged', true, true, /neither side/],
  ['GPU → GPU, two nodes, CUDA UCX on the source only', gpu('a', '0', true), gpu('b', '0'), 'staged', true, true, /on this side/],
  ['GPU → GPU, two nodes, CUDA UCX here only', gpu('a', '0'), gpu('b', '0', true), 'staged', true, true, /on the source/],
  ['one hostname, two boot ids: two nodes', gpu('a', '0', false, 'x'), gpu('a', '0', false, 'y'), 'staged', true, true, /two nodes/],
  ['two hostnames, one boot id: one node (containers)', gpu('a', '0', false, 'x'), gpu('b', '1', false, 'x'), 'cuda-ipc', false, false, /one node/],
  ['device pools of another kind are staged', { ...gpu('a', '0'), deviceKind: 'rocm' }, gpu('a', '0'), 'staged', true, true, /device kinds rocm and cuda/],
  ['an older peer (no placement) is a host pool', legacyPlacement(), gpu('a', '0'), 'ucx-host', false, true, /source pool in host memory/],
];

describe('chooseTransport', () => {
  it.each(ROWS)('%s', (_name, source, local, transport, sourceToHost, localToDevice, reason) => {
    const choice = chooseTransport(source, local);
    expect(choice).toMatchObject({ transport, sourceToHost, localToDevice });
    expect(choice.reason).toMatch(reason);
  });

  it('same node: boot ids decide when both sides give one; an unknown hostname is never shared', () => {
    expect(sameNode(cpu('a', 'x'), cpu('b', 'x'))).toBe(true);
    expect(sameNode(cpu('a', 'x'), cpu('a', 'y'))).toBe(false);
    expect(sameNode(cpu('a'), cpu('a', 'y'))).toBe(true);
    expect(sameNode(legacyPlacement(), legacyPlacement())).toBe(false);
  });
});

describe('parsePlacement (a peer\'s placement, read at the edge)', () => {
  it('keeps a valid placement, drops unknown fields, and refuses what it cannot read', () => {
    const g = gpu('a', '0', true, 'x');
    expect(parsePlacement({ ...g, extra: 1 })).toEqual(g);
    expect(parsePlacement(cpu('a'))).toEqual(cpu('a'));
    expect(parsePlacement({ ...g, pool: 'nvme' })).toBeUndefined();
    expect(parsePlacement({ ...g, ucxCuda: 'yes' })).toBeUndefined();
    expect(parsePlacement({ ...g, gpuId: 0 })).toBeUndefined();
    expect(parsePlacement(undefined)).toBeUndefined();
  });
});

describe('servableTransports (the model card)', () => {
  it('a host pool serves UCX host reads; a CUDA pool IPC, UCX on GPU memory where UCX has CUDA, and staged', () => {
    expect(servableTransports(cpu('a'))).toEqual(['ucx-host']);
    expect(servableTransports(gpu('a', '0'))).toEqual(['cuda-ipc', 'staged']);
    expect(servableTransports(gpu('a', '0', true))).toEqual(['cuda-ipc', 'ucx-cuda', 'staged']);
    expect(servableTransports({ ...gpu('a', '0'), deviceKind: 'rocm' })).toEqual(['staged']);
  });

  it('every transport chosen for a device source is one the source lists', () => {
    for (const [, source, local] of ROWS) {
      const { transport } = chooseTransport(source, local);
      if (source.pool === 'device') expect(servableTransports(source)).toContain(transport);
    }
  });
});
