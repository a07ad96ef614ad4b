/**
 * The raw N-API surface of native/ucx/build/Release/tandem_ucx.node and its lazy loader.
 * Addresses and keys cross as hex strings, ranges as one Float64Array of
 * [remoteOffset, localOffset, length] triples (never per-block objects).
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { UcxUnavailableError } from './errors.js';

export interface RawAgentOptions {
  /** ucp_config_modify overrides, names without the UCX_ prefix (e.g. { TLS: 'tcp' }). */
  config?: Record<string, string>;
  /** How long the progress thread keeps polling after the last event, µs (default 50). */
  busyPollUs?: number;
  /** Issue coalesced ranges longer than this as several gets (default 0: never split). */
  maxGetBytes?: number;
}

export interface RawRegion {
  id: number;
  /** Address of the first byte, '0x…'. */
  base: string;
  length: number;
  /** Packed remote key, hex. */
  rkey: string;
}

export interface RawAllocatedRegion extends RawRegion {
  /** UCX-owned memory; detached (byteLength 0) after deregister() or close(). */
  buffer: ArrayBuffer;
}

export interface RawReadResult {
  bytes: number;
  /** Submit to last completion, measured on the progress thread. */
  seconds: number;
}

export interface RawAgentStats {
  endpoints: number;
  closingEndpoints: number;
  inflightReads: number;
  regions: number;
  bytesRead: number;
  readsOk: number;
  readsFailed: number;
  peerFailures: number;
}

export interface RawAgent {
  address(): string;
  cudaSupported(): boolean;
  register(memory: ArrayBuffer | ArrayBufferView): RawRegion;
  allocate(bytes: number): RawAllocatedRegion;
  deregister(regionId: number): void;
  read(
    peerAddress: string,
    remoteBase: string | bigint,
    rkey: string,
    localRegionId: number,
    ranges: Float64Array,
    timeoutMs?: number,
  ): Promise<RawReadResult>;
  disconnect(peerAddress: string): void;
  stats(): RawAgentStats;
  close(): void;
}

export interface UcxAddon {
  Agent: new (options?: RawAgentOptions) => RawAgent;
  ucxVersion(): string;
}

let cached: UcxAddon | undefined;

/** Where the addon may live: $TANDEM_UCX_ADDON, then native/ucx/build/{Release,Debug}. */
export function ucxAddonCandidates(): string[] {
  const here = dirname(fileURLToPath(import.meta.url));
  // Source checkout: workers/kv-transfer -> <root>. Compiled: dist/workers/kv-transfer -> <root>.
  const roots = [resolve(here, '../..'), resolve(here, '../../..')];
  const out: string[] = [];
  if (process.env.TANDEM_UCX_ADDON) out.push(resolve(process.env.TANDEM_UCX_ADDON));
  for (const root of roots) {
    const dir = join(root, 'native/ucx/build');
    out.push(join(dir, 'Release/tandem_ucx.node'), join(dir, 'Debug/tandem_ucx.node'));
  }
  return out;
}

export function isUcxBuilt(): boolean {
  return ucxAddonCandidates().some((p) => existsSync(p));
}

/** Loads the addon once; UcxUnavailableError when it is not built. */
export function loadUcxAddon(): UcxAddon {
  if (cached !== undefined) return cached;
  const path = ucxAddonCandidates().find((p) => existsSync(p));
  if (path === undefined) {
    throw new UcxUnavailableError(
      'the UCX transfer agent is not built: run `node native/ucx/build.js` ' +
        '(needs a C++ compiler, cmake and libucx-dev)',
    );
  }
  // UCX must not patch malloc/mmap or take over fatal signals inside a V8 process: its memory
  // hooks race V8's own mappings (seen as rare start-up segfaults) and we register each pool
  // once, so its registration cache gains nothing. An explicit UCX_* setting still wins.
  process.env.UCX_MEM_MALLOC_HOOKS ??= 'no';
  process.env.UCX_MEM_EVENTS ??= 'no';
  process.env.UCX_HANDLE_ERRORS ??= 'none';
  try {
    cached = createRequire(import.meta.url)(path) as UcxAddon;
  } catch (err) {
    throw new UcxUnavailableError(`cannot load ${path}: ${(err as Error).message}`, { cause: err });
  }
  return cached;
}
