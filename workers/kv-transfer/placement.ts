/**
 * This worker's KvPlacement (proto/model-card.ts), read once at start: the node's hostname and
 * boot id, and where the engine keeps its pool. The only part of the transport choice that
 * touches the machine.
 */
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import type { KvPlacement } from '../../proto/wire.js';

let bootId: string | undefined | null = null;

/** The kernel's boot id (Linux), or undefined where there is none. */
export function readBootId(): string | undefined {
  if (bootId === null) {
    try {
      bootId = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim() || undefined;
    } catch {
      bootId = undefined;
    }
  }
  return bootId;
}

export interface PlacementInput {
  /** False for a device pool (NativeEngine model.kvPoolOnHost); the mocker's is always on host. */
  poolOnHost: boolean;
  deviceKind?: string;
  gpuId?: string;
  /** UcxTransferAgent.cudaSupported. */
  ucxCuda: boolean;
}

export function localPlacement(input: PlacementInput): KvPlacement {
  const id = readBootId();
  return {
    pool: input.poolOnHost ? 'host' : 'device',
    ...(input.poolOnHost || input.deviceKind === undefined ? {} : { deviceKind: input.deviceKind }),
    hostname: hostname(),
    ...(id !== undefined ? { bootId: id } : {}),
    ...(input.poolOnHost || input.gpuId === undefined ? {} : { gpuId: input.gpuId }),
    ucxCuda: input.ucxCuda,
  };
}
