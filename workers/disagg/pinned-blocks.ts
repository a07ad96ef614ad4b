/**
 * The prefill side's hand-off ledger: which finished prefills still hold their blocks for a
 * decode worker to pull, under which transfer id, and until when.
 *
 *   pin(seqId, numBlocks) → transferId ── kv_release(transferId) ──▶ free now
 *                                      └─ releaseTimeoutMs passes ─▶ free (unclaimed)
 *
 * A pinned entry is never freed early: the decode worker reads the blocks with one-sided RMA
 * the prefill side cannot see, so only its release call (sent after the pull settled) or the
 * timeout ends the pin. Client cancellation does not reach here.
 */
import { randomBytes } from 'node:crypto';

export type PinEndReason = 'released' | 'timeout' | 'shutdown';

export interface PinnedBlocksOptions {
  /** Frees the sequence's blocks (EngineLoop.releasePinned). */
  free(seqId: number): void;
  /** How long a pin waits for its release call; default 30 s. */
  releaseTimeoutMs?: number;
  /** Called after each pin ends (metrics, logs). */
  onEnd?(entry: { transferId: string; seqId: number; numBlocks: number; reason: PinEndReason; heldMs: number }): void;
}

interface PinEntry {
  seqId: number;
  numBlocks: number;
  pinnedAt: number;
  timer: NodeJS.Timeout;
}

export const DEFAULT_KV_RELEASE_TIMEOUT_MS = 30_000;

export class PinnedBlocks {
  readonly releaseTimeoutMs: number;
  private readonly entries = new Map<string, PinEntry>();
  private readonly prefix = randomBytes(6).toString('hex');
  private nextId = 1;
  private blocks = 0;
  /** Pins that ended by timeout since start. */
  numTimeouts = 0;

  constructor(private readonly options: PinnedBlocksOptions) {
    this.releaseTimeoutMs = options.releaseTimeoutMs ?? DEFAULT_KV_RELEASE_TIMEOUT_MS;
  }

  /** Transfers waiting for their release. */
  get size(): number {
    return this.entries.size;
  }
  /** Blocks held by those transfers (a block shared by two pins counts twice). */
  get numBlocks(): number {
    return this.blocks;
  }

  has(transferId: string): boolean {
    return this.entries.has(transferId);
  }

  /** Records a pinned sequence; the returned id is what the decode worker releases. */
  pin(seqId: number, numBlocks: number, transferId = this.newId()): string {
    const timer = setTimeout(() => this.end(transferId, 'timeout'), this.releaseTimeoutMs);
    // A pin must not keep a draining process alive; shutdown ends every pin anyway.
    timer.unref();
    this.entries.set(transferId, { seqId, numBlocks, pinnedAt: Date.now(), timer });
    this.blocks += numBlocks;
    return transferId;
  }

  /** A fresh transfer id, for a hand-off announced before its pin (layer-wise streaming). */
  newId(): string {
    return `${this.prefix}-${(this.nextId++).toString(36)}`;
  }

  /** The decode worker is done with the blocks. False for an unknown (or already ended) id. */
  release(transferId: string): boolean {
    return this.end(transferId, 'released');
  }

  /** Frees every pin now (worker shutdown). */
  releaseAll(): void {
    for (const id of [...this.entries.keys()]) this.end(id, 'shutdown');
  }

  private end(transferId: string, reason: PinEndReason): boolean {
    const entry = this.entries.get(transferId);
    if (entry === undefined) return false;
    this.entries.delete(transferId);
    clearTimeout(entry.timer);
    this.blocks -= entry.numBlocks;
    if (reason === 'timeout') this.numTimeouts++;
    this.options.free(entry.seqId);
    this.options.onEnd?.({ transferId, seqId: entry.seqId, numBlocks: entry.numBlocks, reason, heldMs: Date.now() - entry.pinnedAt });
    return true;
  }
}
