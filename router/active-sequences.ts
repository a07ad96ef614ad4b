/**
 * `ActiveSequences`: the router's own view of what it has sent to each worker and not yet
 * seen finish. It fills the gap between a route decision and the worker's next load report.
 *
 * Per worker:
 *   activeBlocks          distinct full prompt blocks of its active sequences (a block shared
 *                         by several sequences counts once: refcount per sequence hash) plus one
 *                         private block per sequence (its partial tail / the block decode writes)
 *   pendingPrefillBlocks  blocks still to prefill: Σ max(0, requestBlocks − overlapBlocks) over
 *                         sequences whose first token has not come back
 *   pendingPrefillTokens  the same in tokens
 *   adapters              Multi-LoRA: in-flight sequences per adapter (lora_id), which the
 *                         worker's `--max-loras` slots must fit to run at once (`loraSlotWait`)
 *
 * Every change is an `ActiveSequenceUpdate` (plain data) applied through `apply`, so a router
 * replica can replay another replica's updates received on `router_sync` and reach the same
 * numbers. Entries not finished within `ttlMs` of their last update expire (by `nowMs`).
 */
import type { InstanceId } from '../proto/wire.js';

export type ActiveSequenceUpdate =
  | {
      type: 'add';
      requestId: string;
      workerId: InstanceId;
      /** Sequence hashes of the request's full prompt blocks. */
      blockHashes: readonly bigint[];
      promptTokens: number;
      /** Leading blocks the worker already had cached when routed. */
      overlapBlocks: number;
      /** Multi-LoRA: the request's adapter (its lora_id); absent = base model. */
      loraId?: number;
    }
  | { type: 'prefill_done'; requestId: string }
  | { type: 'free'; requestId: string };

export interface WorkerActiveLoad {
  activeSequences: number;
  activeBlocks: number;
  pendingPrefillBlocks: number;
  pendingPrefillTokens: number;
}

export interface ActiveSequencesOptions {
  blockSize: number;
  /** A sequence with no update for this long is presumed lost and freed. */
  ttlMs: number;
}

interface SequenceEntry {
  workerId: InstanceId;
  blockHashes: readonly bigint[];
  prefillBlocks: number;
  prefillTokens: number;
  prefillDone: boolean;
  expiresAtMs: number;
  loraId: number | undefined;
}

class WorkerBook {
  readonly refs = new Map<bigint, number>();
  sequences = 0;
  pendingPrefillBlocks = 0;
  pendingPrefillTokens = 0;
  /** Multi-LoRA: in-flight sequences per lora_id (an adapter leaves when its count is 0). */
  readonly adapters = new Map<number, number>();
}

const EMPTY_LOAD: WorkerActiveLoad = Object.freeze({
  activeSequences: 0,
  activeBlocks: 0,
  pendingPrefillBlocks: 0,
  pendingPrefillTokens: 0,
});

export class ActiveSequences {
  private readonly entries = new Map<string, SequenceEntry>();
  private readonly books = new Map<InstanceId, WorkerBook>();
  private expiryQueue: Array<{ requestId: string; atMs: number }> = [];
  private expiryHead = 0;

  constructor(private readonly options: ActiveSequencesOptions) {}

  /** Apply one update; false when it changed nothing (duplicate add, unknown request). */
  apply(update: ActiveSequenceUpdate, nowMs: number): boolean {
    switch (update.type) {
      case 'add':
        return this.add(update, nowMs);
      case 'prefill_done':
        return this.markPrefillDone(update.requestId, nowMs);
      case 'free':
        return this.free(update.requestId);
    }
  }

  load(workerId: InstanceId): WorkerActiveLoad {
    const b = this.books.get(workerId);
    if (b === undefined) return EMPTY_LOAD;
    return {
      activeSequences: b.sequences,
      activeBlocks: b.refs.size + b.sequences,
      pendingPrefillBlocks: b.pendingPrefillBlocks,
      pendingPrefillTokens: b.pendingPrefillTokens,
    };
  }

  /**
   * In-flight overlap: how many leading blocks of `seqHashes` (a request's sequence hashes)
   * some active sequence on `workerId` also holds. Those blocks are being computed (or kept)
   * there now, so a request routed there finds them cached by the time it is scheduled, even
   * before the worker's KV events say so.
   *
   * The booked set is prefix-closed: a sequence hash names its whole prefix, and a booked
   * sequence books all of its leading blocks, so "seqHashes[i] is booked" holds for a leading
   * run of i and a binary search finds its end in O(log n) lookups.
   */
  sharedPrefixBlocks(workerId: InstanceId, seqHashes: readonly bigint[]): number {
    const refs = this.books.get(workerId)?.refs;
    if (refs === undefined || seqHashes.length === 0 || !refs.has(seqHashes[0]!)) return 0;
    let lo = 1; // seqHashes[0..lo) are booked
    let hi = seqHashes.length; // seqHashes[hi..) are not (or out of range)
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (refs.has(seqHashes[mid]!)) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /**
   * Multi-LoRA: distinct adapters in flight on `workerId`, counting `loraId` as one more if
   * none of its sequences is there yet. A worker runs at most its `--max-loras` distinct
   * adapters at once; its scheduler holds a sequence of a further adapter, and every adapter
   * sequence behind it, until a running adapter drains (workers/scheduler/admission.ts). So
   * past the slots this count says how many drains a request routed there waits for.
   */
  adaptersWith(workerId: InstanceId, loraId: number): number {
    const a = this.books.get(workerId)?.adapters;
    if (a === undefined) return 1;
    return a.size + (a.has(loraId) ? 0 : 1);
  }

  has(requestId: string): boolean {
    return this.entries.has(requestId);
  }

  workerOf(requestId: string): InstanceId | undefined {
    return this.entries.get(requestId)?.workerId;
  }

  get size(): number {
    return this.entries.size;
  }

  /** Free every sequence whose TTL ran out by `nowMs`; returns their request ids. */
  expire(nowMs: number): string[] {
    const expired: string[] = [];
    let h = this.expiryHead;
    const q = this.expiryQueue;
    while (h < q.length && q[h]!.atMs <= nowMs) {
      const { requestId, atMs } = q[h++]!;
      const e = this.entries.get(requestId);
      // A later update pushed a newer expiry; this queue item is stale.
      if (e === undefined || e.expiresAtMs !== atMs) continue;
      this.free(requestId);
      expired.push(requestId);
    }
    this.expiryHead = h;
    if (h >= 1024 && h * 2 >= q.length) {
      this.expiryQueue = q.slice(h);
      this.expiryHead = 0;
    }
    return expired;
  }

  /** Drop all bookkeeping for a worker that went away. Returns the freed request ids. */
  removeWorker(workerId: InstanceId): string[] {
    const freed: string[] = [];
    for (const [id, e] of this.entries) if (e.workerId === workerId) freed.push(id);
    for (const id of freed) this.entries.delete(id);
    this.books.delete(workerId);
    return freed;
  }

  private add(u: Extract<ActiveSequenceUpdate, { type: 'add' }>, nowMs: number): boolean {
    if (this.entries.has(u.requestId)) return false;
    const bs = this.options.blockSize;
    const requestBlocks = Math.ceil(u.promptTokens / bs);
    const cached = Math.min(u.overlapBlocks, requestBlocks);
    const entry: SequenceEntry = {
      workerId: u.workerId,
      blockHashes: u.blockHashes,
      prefillBlocks: requestBlocks - cached,
      prefillTokens: Math.max(0, u.promptTokens - cached * bs),
      prefillDone: false,
      expiresAtMs: nowMs + this.options.ttlMs,
      loraId: u.loraId,
    };
    this.entries.set(u.requestId, entry);
    let book = this.books.get(u.workerId);
    if (book === undefined) this.books.set(u.workerId, (book = new WorkerBook()));
    book.sequences++;
    book.pendingPrefillBlocks += entry.prefillBlocks;
    book.pendingPrefillTokens += entry.prefillTokens;
    if (u.loraId !== undefined) book.adapters.set(u.loraId, (book.adapters.get(u.loraId) ?? 0) + 1);
    const refs = book.refs;
    for (let i = 0; i < u.blockHashes.length; i++) {
      const h = u.blockHashes[i]!;
      refs.set(h, (refs.get(h) ?? 0) + 1);
    }
    this.expiryQueue.push({ requestId: u.requestId, atMs: entry.expiresAtMs });
    return true;
  }

  private markPrefillDone(requestId: string, nowMs: number): boolean {
    const e = this.entries.get(requestId);
    if (e === undefined || e.prefillDone) return false;
    e.prefillDone = true;
    const book = this.books.get(e.workerId);
    if (book !== undefined) {
      book.pendingPrefillBlocks -= e.prefillBlocks;
      book.pendingPrefillTokens -= e.prefillTokens;
    }
    e.expiresAtMs = nowMs + this.options.ttlMs;
    this.expiryQueue.push({ requestId, atMs: e.expiresAtMs });
    return true;
  }

  private free(requestId: string): boolean {
    const e = this.entries.get(requestId);
    if (e === undefined) return false;
    this.entries.delete(requestId);
    const book = this.books.get(e.workerId);
    if (book === undefined) return true;
    book.sequences--;
    if (!e.prefillDone) {
      book.pendingPrefillBlocks -= e.prefillBlocks;
      book.pendingPrefillTokens -= e.prefillTokens;
    }
    if (e.loraId !== undefined) {
      const n = book.adapters.get(e.loraId) ?? 1;
      if (n <= 1) book.adapters.delete(e.loraId);
      else book.adapters.set(e.loraId, n - 1);
    }
    const refs = book.refs;
    for (let i = 0; i < e.blockHashes.length; i++) {
      const h = e.blockHashes[i]!;
      const n = refs.get(h)!;
      if (n <= 1) refs.delete(h);
      else refs.set(h, n - 1);
    }
    if (book.sequences === 0) this.books.delete(e.workerId);
    return true;
  }
}
