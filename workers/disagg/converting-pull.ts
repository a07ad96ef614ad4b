/**
 * A pull between pools of one model shape but another block size or element type (e.g. a
 * prefill worker at --block-size 32, a decode worker at 16): the remote blocks that hold the
 * imported tokens are read into a host staging region of the remote layout, then converted
 * token by token into the local blocks (workers/kv-transfer/block-convert.ts).
 *
 *   tokens [firstBlock·Bl, numTokens) ─▶ remote blocks ⌊t/Br⌋ ─ UCX read ─▶ staging (remote layout)
 *                                                   convertTokens ─▶ local blocks (local layout)
 *
 * The staging region is the agent's allocation (UCX writes into it), one per pull, released
 * when the pull settles; nothing is written into the local pool unless the read succeeded.
 */
import type { KvTransferParams } from '../../proto/wire.js';
import { TandemError } from '../../runtime/errors.js';
import {
  blocksCovering,
  convertTokens,
  layoutBlockBytes,
  type KvLayoutDescriptor,
  type KvPool,
  type KvTransferAgent,
  type PullResult,
} from '../kv-transfer/index.js';

export interface ConvertingPull {
  agent: KvTransferAgent;
  source: KvTransferParams;
  remote: KvLayoutDescriptor;
  /** The local pool (host memory) and its layout. */
  pool: KvPool;
  local: KvLayoutDescriptor;
  /** Local blocks for absolute block indices firstBlock, firstBlock + 1, … (local block size). */
  localBlockIds: ArrayLike<number>;
  firstBlock: number;
  /** Tokens whose KV the hand-off covers, from position 0. */
  numTokens: number;
  timeoutMs: number;
  /** The model's e4m3 KV scales, [layer][K, V], where either side is fp8_e4m3 (default 1.0). */
  kvScales?: ArrayLike<number>;
}

export function poolBytes(pool: KvPool): Uint8Array {
  const b = pool.buffer;
  return b instanceof ArrayBuffer ? new Uint8Array(b) : new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
}

/** Reads and converts; `bytes` in the result are the bytes read from the peer. */
export async function pullConverted(p: ConvertingPull): Promise<PullResult> {
  const { agent, source, remote, local } = p;
  if (source.blockBytes !== layoutBlockBytes(remote)) {
    throw new TandemError('invalid_argument', `remote blocks of ${source.blockBytes} bytes do not match their layout (${layoutBlockBytes(remote)})`);
  }
  const fromToken = p.firstBlock * local.blockSize;
  const toToken = Math.min(p.numTokens, (p.firstBlock + p.localBlockIds.length) * local.blockSize);
  const span = blocksCovering(fromToken, toToken, remote.blockSize);
  if (span.numBlocks === 0) return { bytes: 0, seconds: 0, blocks: 0, ranges: 0 };
  if (source.blockIds.length < span.firstBlock + span.numBlocks) {
    throw new TandemError('invalid_argument', `kvTransfer names ${source.blockIds.length} blocks, ${span.firstBlock + span.numBlocks} needed`);
  }
  const staging = agent.allocatePool({ numBlocks: span.numBlocks, blockBytes: source.blockBytes, layout: source.layout });
  try {
    const stagingIds = Array.from({ length: span.numBlocks }, (_, i) => i);
    const result = await agent.pull(
      {
        ucxWorkerAddress: source.ucxWorkerAddress,
        remoteKey: source.remoteKey,
        poolBaseAddress: source.poolBaseAddress,
        blockBytes: source.blockBytes,
        layout: source.layout,
        blockIds: source.blockIds.slice(span.firstBlock, span.firstBlock + span.numBlocks),
      },
      staging,
      stagingIds,
      { timeoutMs: p.timeoutMs },
    );
    convertTokens(
      { bytes: poolBytes(staging), layout: remote, blockIds: stagingIds, firstBlock: span.firstBlock },
      { bytes: poolBytes(p.pool), layout: local, blockIds: p.localBlockIds, firstBlock: p.firstBlock },
      fromToken,
      toToken,
      p.kvScales,
    );
    return result;
  } finally {
    try {
      agent.releasePool(staging);
    } catch {
      // Refused only while a read into it is in flight, which a settled pull no longer has;
      // the agent frees any region left at close().
    }
  }
}
