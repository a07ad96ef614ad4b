/**
 * Gives a prefill or decode worker its transfer agent and a KV pool the agent allocated:
 *   - native engine: the engine's pool lives in the agent's allocation (UCX memory, shared
 *     memory where UCX can), so a peer over `sm` reads blocks with one memcpy and without this
 *     process's CPU. `setupNativeKvTransfer` allocates before loading the weights;
 *     `setupKvTransfer` moves an already loaded engine's pool there (`adoptKvPool`);
 *   - mocker: a real host pool of numBlocks × blockSize × kvBytesPerToken bytes allocated by
 *     the agent, with the mocker wrapped so computed tokens leave verifiable stamps in it.
 */
import { totalmem } from 'node:os';
import { ConfigError } from '../../runtime/errors.js';
import type { Engine } from '../engines/engine.js';
import type { NativeEngine, NativeEngineOptions } from '../engines/native/index.js';
import type { KvLayoutDescriptor, KvPlacement, ModelCard } from '../../proto/wire.js';
import {
  UcxTransferAgent,
  localPlacement,
  peerLayout,
  servableTransports,
  type KvPool,
  type KvTransferAgent,
  type KvTransferCounters,
} from '../kv-transfer/index.js';
import { StampedKvPool, StampingEngine, stampedLayoutName } from './stamped-kv.js';

export interface KvTransferSetupOptions {
  /** Mocker only: KV bytes per token of the host pool. */
  kvBytesPerToken: number;
  /** ucp_config_modify overrides without the UCX_ prefix (e.g. { TLS: 'tcp' }); env applies otherwise. */
  ucxConfig?: Record<string, string>;
  counters?: KvTransferCounters;
}

export interface KvTransferSetup {
  /** The engine to run: the mocker comes back wrapped in a StampingEngine. */
  engine: Engine;
  agent: KvTransferAgent;
  pool: KvPool;
  /** Set for the mocker: checks that pulled blocks hold the right stamps. */
  stamps?: StampedKvPool;
  /** The pool's layout as data; undefined for the mocker's stamped pool (pulls by equal name only). */
  layout?: KvLayoutDescriptor;
  /** Where the pool lives, for the transport choice and the model card. */
  placement: KvPlacement;
  close(): void;
}

/** The model card's KV fields of a prefill/decode worker: layout name and descriptor, placement, transports. */
export function kvCardFields(kv: Pick<KvTransferSetup, 'pool' | 'layout' | 'placement'>): Pick<ModelCard, 'kvLayoutName' | 'kvLayout' | 'kvPlacement' | 'kvTransports'> {
  return {
    kvLayoutName: kv.pool.layout,
    ...(kv.layout !== undefined ? { kvLayout: kv.layout } : {}),
    kvPlacement: kv.placement,
    kvTransports: servableTransports(kv.placement),
  };
}

function hostPlacement(agent: KvTransferAgent): KvPlacement {
  return localPlacement({ poolOnHost: true, ucxCuda: agent.cudaSupported });
}

export const DEFAULT_MOCKER_KV_BYTES_PER_TOKEN = 1024;

/**
 * The mocker's pool is real memory (shared memory where UCX can): refuse a size this machine
 * cannot hold up front, instead of being OOM-killed mid-start and leaving /dev/shm files behind.
 */
function assertPoolFits(numBlocks: number, blockBytes: number): void {
  const bytes = numBlocks * blockBytes;
  const limit = Math.floor(totalmem() * 0.5);
  if (bytes > limit) {
    const fits = Math.max(1, Math.floor(limit / blockBytes));
    throw new ConfigError(
      `the KV pool needs ${(bytes / 2 ** 30).toFixed(1)} GiB (${numBlocks} blocks × ${blockBytes} bytes), more than half of this machine's ` +
        `${(totalmem() / 2 ** 30).toFixed(1)} GiB; lower --num-gpu-blocks (at most ${fits} here) or --kv-bytes-per-token`,
    );
  }
}

function createAgent(options: Omit<KvTransferSetupOptions, 'kvBytesPerToken'>): KvTransferAgent {
  return UcxTransferAgent.create({
    ...(options.ucxConfig !== undefined ? { config: options.ucxConfig } : {}),
    ...(options.counters !== undefined ? { counters: options.counters } : {}),
  });
}

function withLayout(pool: KvPool): { layout?: KvLayoutDescriptor } {
  const layout = peerLayout(pool.layout);
  return layout !== undefined ? { layout } : {};
}

function poolArrayBuffer(pool: KvPool): ArrayBuffer {
  const b = pool.buffer;
  if (b instanceof ArrayBuffer && b.byteLength === pool.numBlocks * pool.blockBytes) return b;
  throw new ConfigError(`the transfer agent's pool is not one ArrayBuffer of ${pool.numBlocks} × ${pool.blockBytes} bytes`);
}

/**
 * Native engine for a prefill/decode worker, in the order that never holds two pools: agent,
 * pool size from config.json, the agent's allocation, then the weights load into it. The
 * engine must be closed before `close()` (which frees the pool); EngineLoop.close() does.
 */
export async function setupNativeKvTransfer(
  engineOptions: Omit<NativeEngineOptions, 'kvPool'>,
  options: Omit<KvTransferSetupOptions, 'kvBytesPerToken'> = {},
): Promise<KvTransferSetup & { engine: NativeEngine }> {
  const { createNativeEngine, describeNativeKvLayout, nativeKvLayoutName } = await import('../engines/native/index.js');
  const layout = describeNativeKvLayout(engineOptions);
  const agent = createAgent(options);
  try {
    assertPoolFits(layout.numBlocks, layout.kvBytesPerBlock);
    const pool = agent.allocatePool({ numBlocks: layout.numBlocks, blockBytes: layout.kvBytesPerBlock, layout: nativeKvLayoutName(layout) });
    const engine = await createNativeEngine({ ...engineOptions, numBlocks: layout.numBlocks, kvPool: poolArrayBuffer(pool) });
    return { engine, agent, pool, ...withLayout(pool), placement: hostPlacement(agent), close: () => agent.close() };
  } catch (err) {
    agent.close();
    throw err;
  }
}

export function setupKvTransfer(engine: Engine, options: KvTransferSetupOptions): KvTransferSetup {
  const agent = createAgent(options);
  try {
    if (engine.info.kind === 'native') {
      const native = engine as NativeEngine;
      // Memory given to registerPool is served by this process's progress thread (slow under
      // load over sm); an allocated pool is mapped and read by the peer directly.
      const pool = agent.allocatePool({ numBlocks: native.info.numBlocks, blockBytes: native.model.kvBytesPerBlock, layout: native.kvLayoutName });
      native.adoptKvPool(poolArrayBuffer(pool));
      return { engine, agent, pool, ...withLayout(pool), placement: hostPlacement(agent), close: () => agent.close() };
    }
    const { blockSize, numBlocks } = engine.info;
    const bytesPerToken = options.kvBytesPerToken;
    assertPoolFits(numBlocks, blockSize * bytesPerToken);
    const pool = agent.allocatePool({ numBlocks, blockBytes: blockSize * bytesPerToken, layout: stampedLayoutName(blockSize, bytesPerToken) });
    const buffer = pool.buffer instanceof ArrayBuffer ? pool.buffer : (pool.buffer.buffer as ArrayBuffer);
    const stamps = new StampedKvPool(buffer, blockSize, bytesPerToken);
    return { engine: new StampingEngine(engine, stamps), agent, pool, stamps, placement: hostPlacement(agent), close: () => agent.close() };
  } catch (err) {
    agent.close();
    throw err;
  }
}
