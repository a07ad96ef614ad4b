/**
 * Transfer counters the worker process exports as tandem_worker_kv_transfer_*. Plain numbers
 * so that this folder does not depend on prom-client: the worker reads them on scrape, or
 * subscribes with `onTransfer` to feed its own histogram.
 */
import type { ErrorCode } from '../../runtime/errors.js';

/** Upper bounds (seconds) of the duration histogram buckets; +Inf is implicit. */
export const TRANSFER_SECONDS_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10] as const;

export interface TransferEvent {
  ok: boolean;
  bytes: number;
  seconds: number;
  blocks: number;
  /** Gets issued after coalescing. */
  ranges: number;
  code?: ErrorCode;
}

export interface KvTransferCountersSnapshot {
  bytesTotal: number;
  transfersOk: number;
  transfersFailed: number;
  failuresByCode: Partial<Record<ErrorCode, number>>;
  blocksTotal: number;
  secondsTotal: number;
  /** Cumulative counts per bucket of TRANSFER_SECONDS_BUCKETS, then +Inf. */
  secondsBuckets: number[];
  /** Bandwidth of the most recent successful transfer, GB/s (1e9 bytes). */
  lastGbps: number;
  inflight: number;
}

export class KvTransferCounters {
  bytesTotal = 0;
  transfersOk = 0;
  transfersFailed = 0;
  blocksTotal = 0;
  secondsTotal = 0;
  lastGbps = 0;
  inflight = 0;
  private readonly failures = new Map<ErrorCode, number>();
  private readonly buckets = new Float64Array(TRANSFER_SECONDS_BUCKETS.length + 1);
  private readonly listeners: Array<(event: TransferEvent) => void> = [];

  /** Called for every finished transfer, after the counters moved. */
  onTransfer(listener: (event: TransferEvent) => void): () => void {
    this.listeners.push(listener);
    return () => {
      const i = this.listeners.indexOf(listener);
      if (i >= 0) this.listeners.splice(i, 1);
    };
  }

  started(): void {
    this.inflight++;
  }

  record(event: TransferEvent): void {
    this.inflight = Math.max(0, this.inflight - 1);
    if (event.ok) {
      this.transfersOk++;
      this.bytesTotal += event.bytes;
      this.blocksTotal += event.blocks;
      this.secondsTotal += event.seconds;
      if (event.seconds > 0) this.lastGbps = event.bytes / event.seconds / 1e9;
      let b = 0;
      while (b < TRANSFER_SECONDS_BUCKETS.length && event.seconds > TRANSFER_SECONDS_BUCKETS[b]!) b++;
      this.buckets[b]!++;
    } else {
      this.transfersFailed++;
      const code = event.code ?? 'internal';
      this.failures.set(code, (this.failures.get(code) ?? 0) + 1);
    }
    for (const listener of this.listeners) listener(event);
  }

  snapshot(): KvTransferCountersSnapshot {
    const cumulative: number[] = [];
    let sum = 0;
    for (const count of this.buckets) cumulative.push((sum += count));
    return {
      bytesTotal: this.bytesTotal,
      transfersOk: this.transfersOk,
      transfersFailed: this.transfersFailed,
      failuresByCode: Object.fromEntries(this.failures) as Partial<Record<ErrorCode, number>>,
      blocksTotal: this.blocksTotal,
      secondsTotal: this.secondsTotal,
      secondsBuckets: cumulative,
      lastGbps: this.lastGbps,
      inflight: this.inflight,
    };
  }
}
