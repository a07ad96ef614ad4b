/**
 * The decode side of a hand-off (docs/disaggregation.md step 2): pull the prompt's blocks
 * from the prefill worker's pool into the blocks the scheduler allocated, then ALWAYS tell the
 * prefill worker to release them, whether the pull worked or not.
 *
 *   EngineLoop admits a kvTransfer request → importKv(job)
 *      agent.pull(remote blocks [firstBlock..], local blocks) ─ ok ─▶ verify? ─▶ true (KV in place)
 *                                                              └ fails ──────▶ false (recompute)
 *      then release(source) (fire and forget; a dead prefill worker just times out its pins)
 *   request ends → settle(source): release if no pull ever ran (aborted while waiting)
 */
import type { KvLayoutDescriptor, KvPlacement, KvTransferParams, KvTransport } from '../../proto/wire.js';
import type { KvImporter, KvImportJob } from '../engine-loop/index.js';
import {
  chooseTransport,
  compareLayouts,
  legacyPlacement,
  parsePlacement,
  peerLayout,
  type KvPool,
  type KvTransferAgent,
  type KvTransferDescriptor,
  type LayoutCompatibility,
} from '../kv-transfer/index.js';
import { pullConverted } from './converting-pull.js';
import type { KvPrefetcher } from './kv-prefetch.js';

/** What a pull did to the bytes: nothing, or which conversion (block-convert.ts). */
export type KvConversion = 'none' | 'block_size' | 'dtype' | 'block_size+dtype';

export interface KvImportOutcome {
  ok: boolean;
  /** Blocks and bytes pulled (0 when nothing was needed or the pull failed). */
  blocks: number;
  bytes: number;
  seconds: number;
  /** How the bytes moved (transport-choice.ts) and whether they were converted. */
  transport?: KvTransport;
  conversion?: KvConversion;
  /** Why the prompt is recomputed, when it is. */
  error?: unknown;
  /** The blocks came from a layer-wise prefetch (seconds: waiting for its last layers). */
  streamed?: boolean;
}

export interface KvImportServiceOptions {
  agent: KvTransferAgent;
  pool: KvPool;
  /**
   * The local pool's layout as data. With it, a hand-off from a pool of another block size or
   * element type (same model shape) is read into staging and converted; without it (the
   * mocker), only equal layout names pull.
   */
  layout?: KvLayoutDescriptor;
  /** The model's e4m3 KV scales, [layer][K, V], for conversions to or from an fp8_e4m3 pool (default 1.0). */
  kvScales?: ArrayLike<number>;
  /** Where the local pool lives (for the transport named in outcomes); a host pool if unset. */
  placement?: KvPlacement;
  /** Calls `{ns}/prefill/kv_release` on source.prefillInstanceId. Errors are reported, not thrown. */
  release(source: KvTransferParams): Promise<void>;
  /**
   * Checks the pulled bytes (the mocker's stamps): the first position that is wrong, or -1.
   * A mismatch makes the sequence recompute.
   */
  verify?(job: KvImportJob): number;
  /**
   * A source with a device pool (`kvDeviceHandle`) serves UCX reads from a host copy it makes
   * on request: called before such a read (`{ns}/prefill/kv_stage`); rejects if it failed.
   */
  stage?(source: KvTransferParams): Promise<void>;
  /** Layer-wise streaming: blocks a `kv_prefetch` already copied are adopted instead of pulled. */
  prefetcher?: KvPrefetcher;
  /** Per pull; keep it below the prefill workers' --kv-release-timeout. Default 10 s. */
  pullTimeoutMs?: number;
  onOutcome?(job: KvImportJob, outcome: KvImportOutcome): void;
  onReleaseError?(source: KvTransferParams, err: unknown): void;
}

export const DEFAULT_PULL_TIMEOUT_MS = 10_000;

export class KvImportService implements KvImporter {
  /** Transfer ids whose release was sent, until their request ends. */
  private readonly released = new Set<string>();
  /** Pulls in flight, and those whose request ended meanwhile (forgotten when the pull ends). */
  private readonly pulling = new Set<string>();
  private readonly endedWhilePulling = new Set<string>();
  numImports = 0;
  numFallbacks = 0;
  numVerifyFailures = 0;

  constructor(private readonly options: KvImportServiceOptions) {}

  async importKv(job: KvImportJob): Promise<boolean> {
    const id = job.source.transferId;
    this.pulling.add(id);
    const outcome = await this.pull(job);
    this.pulling.delete(id);
    this.releaseOnce(job.source);
    if (this.endedWhilePulling.delete(id)) this.released.delete(id);
    if (outcome.ok) this.numImports++;
    else this.numFallbacks++;
    this.options.onOutcome?.(job, outcome);
    return outcome.ok;
  }

  /** The request is over: release the prefill's blocks if no pull got to do it. */
  settle(source: KvTransferParams | undefined): void {
    if (source === undefined) return;
    // Never release while the pull may still read the blocks: importKv releases when it ends.
    if (this.pulling.has(source.transferId)) {
      this.endedWhilePulling.add(source.transferId);
      return;
    }
    this.releaseOnce(source);
    this.released.delete(source.transferId);
  }

  /** Moves the KV; DeviceKvImporter overrides it for device pools. */
  protected async pull(job: KvImportJob): Promise<KvImportOutcome> {
    const { source } = job;
    const n = job.localBlockIds.length;
    const bs = this.options.pool.blockBytes;
    if (n === 0) return { ok: true, blocks: 0, bytes: 0, seconds: 0 };
    const started = performance.now();
    const prefetched = (await this.options.prefetcher?.adopt(job)) ?? 'none';
    if (prefetched === 'adopted') {
      const bad = this.options.verify?.(job) ?? -1;
      if (bad < 0) return { ok: true, blocks: n, bytes: n * bs, seconds: (performance.now() - started) / 1000, streamed: true };
      this.numVerifyFailures++;
      // Wrong bytes from the stream: pull whole blocks as if nothing had been prefetched.
    }
    const remote = peerLayout(source.layout, source.kvLayout);
    const local = this.options.layout;
    const compat = remote !== undefined && local !== undefined ? compareLayouts(remote, local) : undefined;
    const transport = chooseTransport(parsePlacement(source.kvPlacement) ?? legacyPlacement(), this.options.placement ?? legacyPlacement()).transport;
    const conversion = conversionOf(compat);
    if (source.kvDeviceHandle !== undefined && this.options.stage !== undefined) {
      try {
        await this.options.stage(source);
      } catch (err) {
        return { ok: false, blocks: 0, bytes: 0, seconds: 0, transport, conversion, error: err };
      }
    }
    if (compat?.kind === 'convert') {
      try {
        const result = await pullConverted({
          agent: this.options.agent,
          source,
          remote: remote!,
          pool: this.options.pool,
          local: local!,
          localBlockIds: job.localBlockIds,
          firstBlock: job.firstBlock,
          numTokens: job.numTokens,
          timeoutMs: this.options.pullTimeoutMs ?? DEFAULT_PULL_TIMEOUT_MS,
          ...(this.options.kvScales !== undefined ? { kvScales: this.options.kvScales } : {}),
        });
        return { ok: true, blocks: n, bytes: result.bytes, seconds: result.seconds, transport, conversion };
      } catch (err) {
        return { ok: false, blocks: 0, bytes: 0, seconds: 0, transport, conversion, error: err };
      }
    }
    if (source.blockIds.length < job.firstBlock + n) {
      return { ok: false, blocks: 0, bytes: 0, seconds: 0, transport, conversion, error: new Error(`kvTransfer names ${source.blockIds.length} blocks, ${job.firstBlock + n} needed`) };
    }
    const descriptor: KvTransferDescriptor = {
      ucxWorkerAddress: source.ucxWorkerAddress,
      remoteKey: source.remoteKey,
      poolBaseAddress: source.poolBaseAddress,
      blockBytes: source.blockBytes,
      layout: source.layout,
      blockIds: source.blockIds.slice(job.firstBlock, job.firstBlock + n),
    };
    try {
      const result = await this.options.agent.pull(descriptor, this.options.pool, job.localBlockIds, {
        timeoutMs: this.options.pullTimeoutMs ?? DEFAULT_PULL_TIMEOUT_MS,
      });
      const bad = this.options.verify?.(job) ?? -1;
      if (bad >= 0) {
        this.numVerifyFailures++;
        return { ok: false, blocks: n, bytes: result.bytes, seconds: result.seconds, error: new Error(`pulled KV is wrong at position ${bad}`) };
      }
      return { ok: true, blocks: n, bytes: n * bs, seconds: result.seconds, transport, conversion };
    } catch (err) {
      return { ok: false, blocks: 0, bytes: 0, seconds: 0, transport, conversion, error: err };
    }
  }

  private releaseOnce(source: KvTransferParams): void {
    if (this.released.has(source.transferId)) return;
    this.released.add(source.transferId);
    this.options.release(source).catch((err: unknown) => this.options.onReleaseError?.(source, err));
  }
}

function conversionOf(compat: LayoutCompatibility | undefined): KvConversion {
  if (compat?.kind !== 'convert') return 'none';
  if (compat.blockSize && compat.dtype) return 'block_size+dtype';
  return compat.blockSize ? 'block_size' : 'dtype';
}
