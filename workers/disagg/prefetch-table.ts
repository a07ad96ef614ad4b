/**
 * The bookkeeping every layer-wise prefetcher shares (kv-prefetch.ts for host pools,
 * device-kv-prefetch.ts for device pools): the streams in flight or waiting for their decode
 * request, keyed by transfer id, each holding some staging (`R`: a host pool, device blocks).
 *
 *   add ─▶ stream runs ─┬─ landed: waits for take() (the decode request), or expires after expireMs
 *                       └─ failed: dropped at once, staging released when the stream settles
 *   take(id) ─▶ the caller owns the entry: awaits `done`, uses the staging, releases it
 *   close() ─▶ every stream aborted, staging released as each settles
 *
 * Staging is released exactly once, and never while its stream may still write into it.
 */
import type { KvLayerProgressSlot, KvTransferParams } from '../../proto/wire.js';
import type { KvImportJob } from '../engine-loop/index.js';
import type { KvTransferAgent } from '../kv-transfer/index.js';
import { remoteLayerSource, slotFromWire } from './layer-progress-region.js';
import { streamLayers, type LayerStreamResult } from './layer-ready.js';
import type { LayerRange } from './layer-stream.js';

/** What a decode worker's `kv_prefetch` serves with: a host-pool or a device-pool prefetcher. */
export interface LayerPrefetcher {
  /** Starts copying; false when this hand-off cannot stream here (the decode request then copies it whole). */
  start(source: KvTransferParams): boolean;
  /** The decode request for a prefetched transfer; 'none' when nothing was prefetched for it. */
  adopt(job: KvImportJob): Promise<'adopted' | 'failed' | 'none'>;
  readonly size: number;
  close(): void;
}

export interface PrefetchEntry<R> {
  source: KvTransferParams;
  staging: R;
  /** The stream's result, or undefined when it failed. */
  done: Promise<LayerStreamResult | undefined>;
}

export interface PrefetchHooks {
  onStreamed?(source: KvTransferParams, result: LayerStreamResult): void;
  onFailed?(source: KvTransferParams, err: unknown, open: number): void;
}

interface Entry<R> extends PrefetchEntry<R> {
  abort: AbortController;
  timer: NodeJS.Timeout;
}

export class PrefetchTable<R> {
  private readonly entries = new Map<string, Entry<R>>();
  numStarted = 0;
  numExpired = 0;

  constructor(
    private readonly expireMs: number,
    private readonly release: (staging: R) => void,
    private readonly hooks: PrefetchHooks = {},
  ) {}

  get size(): number {
    return this.entries.size;
  }

  has(transferId: string): boolean {
    return this.entries.has(transferId);
  }

  /** Starts `run` (the stream; it must stop copying once `signal` aborts) for this hand-off. */
  add(source: KvTransferParams, staging: R, run: (signal: AbortSignal) => Promise<LayerStreamResult>): void {
    const abort = new AbortController();
    let failedEarly = false;
    const done = run(abort.signal)
      .then(
        (result) => {
          this.hooks.onStreamed?.(source, result);
          return result;
        },
        (err: unknown) => {
          // Nothing to adopt: the decode request (if it comes) copies whole or recomputes.
          if (this.take(source.transferId) !== undefined) failedEarly = true;
          this.hooks.onFailed?.(source, err, this.entries.size);
          return undefined;
        },
      )
      .finally(() => {
        if (failedEarly) this.release(staging);
      });
    const timer = setTimeout(() => {
      if (this.take(source.transferId) === undefined) return;
      this.numExpired++;
      abort.abort();
      void done.then(() => this.release(staging));
    }, this.expireMs);
    timer.unref();
    this.entries.set(source.transferId, { source, staging, abort, done, timer });
    this.numStarted++;
  }

  /** The entry, now the caller's (it releases the staging when done with it). */
  take(transferId: string): PrefetchEntry<R> | undefined {
    const entry = this.entries.get(transferId);
    if (entry === undefined) return undefined;
    this.entries.delete(transferId);
    clearTimeout(entry.timer);
    return entry;
  }

  /** Worker shutdown: stop every stream (staging goes back as each settles). */
  close(): void {
    for (const [id, entry] of [...this.entries]) {
      this.take(id);
      entry.abort.abort();
      void entry.done.then(() => this.release(entry.staging));
    }
  }
}

/**
 * A prefetch's stream: the prefill's progress slot polled over UCX every millisecond, each
 * layer range handed to `copy` once it is ready; no copy starts after `signal` aborts.
 */
export async function streamFromSlot(
  agent: KvTransferAgent,
  slot: KvLayerProgressSlot,
  timeoutMs: number,
  signal: AbortSignal,
  copy: (range: LayerRange) => Promise<void>,
): Promise<LayerStreamResult> {
  const progress = remoteLayerSource(agent, slotFromWire(slot), { intervalMs: 1, timeoutMs, signal });
  try {
    return await streamLayers({
      source: progress,
      copy: async (range) => {
        if (signal.aborted) throw new Error('prefetch dropped');
        await copy(range);
      },
    });
  } finally {
    progress.close();
  }
}
