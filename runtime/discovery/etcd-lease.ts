/**
 * One etcd lease per process, kept alive by us rather than by etcd3's `Lease` (which declares
 * loss only after 2x TTL and cannot re-grant the same id).
 *
 *   alive ──keep-alive ok──▶ alive            (every TTL/3)
 *   alive ──keep-alive fails──▶ alive, retry every RETRY_MS
 *   alive ──etcd says TTL 0 (lease gone) within the TTL──▶ re-grant the SAME id, restore records
 *   alive ──no ack for longer than the TTL──▶ lost  (hooks.onLost, once; never alive again)
 *
 * "Ack" time is when the successful keep-alive was *sent*, so the client always gives up no
 * later than etcd could expire the lease: a process never serves while etcd shows it gone.
 */
import type { Etcd3 } from 'etcd3';
import { LeaseLostError } from './errors.js';
import { closeStream, deadlineIn } from './etcd-client.js';

export interface EtcdLeaseHooks {
  /** The lease expired server-side and was re-granted with the same id: put records back. */
  restore(): Promise<void>;
  /** Keep-alive failed for longer than the TTL. Called once. */
  onLost(cause: LeaseLostError): void;
}

const RETRY_MS = 250;
const MIN_ATTEMPT_MS = 200;

export type LeaseState = 'alive' | 'lost' | 'stopped';

export class EtcdLease {
  private lastAckMs: number;
  private timer: NodeJS.Timeout | undefined;
  private stateValue: LeaseState = 'alive';
  private readonly ttlMs: number;
  private readonly intervalMs: number;

  private constructor(
    private readonly client: Etcd3,
    /** Decimal lease id as etcd3 returns it (int64 does not fit a JS number). */
    readonly id: string,
    readonly ttlSeconds: number,
    private readonly hooks: EtcdLeaseHooks,
    grantedAtMs: number,
  ) {
    this.ttlMs = ttlSeconds * 1000;
    this.intervalMs = this.ttlMs / 3;
    this.lastAckMs = grantedAtMs;
  }

  /** Grant a new lease, retrying until `connectTimeoutMs` while etcd is unreachable. */
  static async grant(client: Etcd3, ttlSeconds: number, hooks: EtcdLeaseHooks, connectTimeoutMs: number): Promise<EtcdLease> {
    if (!Number.isInteger(ttlSeconds) || ttlSeconds < 1) {
      throw new RangeError(`etcd lease TTL must be a whole number of seconds >= 1, got ${ttlSeconds}`);
    }
    const deadline = Date.now() + connectTimeoutMs;
    for (;;) {
      const sentAt = Date.now();
      try {
        const res = await client.leaseClient.leaseGrant({ TTL: ttlSeconds, ID: 0 }, deadlineIn(Math.max(MIN_ATTEMPT_MS, deadline - sentAt)));
        const lease = new EtcdLease(client, res.ID, ttlSeconds, hooks, sentAt);
        lease.schedule(lease.intervalMs);
        return lease;
      } catch (err) {
        if (Date.now() + RETRY_MS >= deadline) throw err;
        await new Promise((resolve) => setTimeout(resolve, RETRY_MS));
      }
    }
  }

  get state(): LeaseState {
    return this.stateValue;
  }

  /** Milliseconds since the last keep-alive etcd acknowledged. */
  get sinceAckMs(): number {
    return Date.now() - this.lastAckMs;
  }

  /** Stop keeping the lease alive (it then expires by TTL unless revoked). */
  stop(): void {
    if (this.stateValue === 'alive') this.stateValue = 'stopped';
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** Revoke the lease (etcd deletes its keys). A lease that is already gone is fine. */
  async revoke(timeoutMs: number): Promise<void> {
    try {
      await this.client.leaseClient.leaseRevoke({ ID: this.id }, deadlineIn(timeoutMs));
    } catch (err) {
      if (!isLeaseNotFound(err)) throw err;
    }
  }

  private schedule(delayMs: number): void {
    if (this.stateValue !== 'alive') return;
    this.timer = setTimeout(() => void this.tick(), delayMs);
  }

  private async tick(): Promise<void> {
    if (this.stateValue !== 'alive') return;
    const sentAt = Date.now();
    const left = this.lastAckMs + this.ttlMs - sentAt;
    if (left < 0) {
      this.declareLost(new LeaseLostError(`etcd lease ${this.id} not renewed for ${sentAt - this.lastAckMs} ms (ttl ${this.ttlMs} ms)`));
      return;
    }
    // Never wait past the TTL for one answer: a hung etcd must not delay the loss decision.
    const attemptMs = Math.max(MIN_ATTEMPT_MS, Math.min(this.intervalMs, left));
    try {
      const ttl = await this.keepAliveOnce(attemptMs);
      if (this.stateValue !== 'alive') return;
      if (ttl <= 0) await this.regrant(attemptMs);
      if (this.stateValue !== 'alive') return;
      this.lastAckMs = sentAt;
      this.schedule(this.intervalMs);
    } catch {
      this.schedule(RETRY_MS);
    }
  }

  /** Same id, so the instance id (and every key that embeds it) stays valid. */
  private async regrant(timeoutMs: number): Promise<void> {
    try {
      await this.client.leaseClient.leaseGrant({ TTL: this.ttlSeconds, ID: this.id }, deadlineIn(timeoutMs));
    } catch (err) {
      // "lease already exists": someone (or a racing attempt) re-granted it; carry on.
      if (!/already exists/i.test(String((err as Error)?.message))) throw err;
    }
    await this.hooks.restore();
  }

  private keepAliveOnce(timeoutMs: number): Promise<number> {
    return new Promise<number>((resolve, reject) => {
      let settled = false;
      let stream: Awaited<ReturnType<Etcd3['leaseClient']['leaseKeepAlive']>> | undefined;
      const finish = (err: Error | undefined, ttl?: number): void => {
        if (settled) return;
        settled = true;
        clearTimeout(guard);
        if (stream !== undefined) closeStream(stream);
        if (err !== undefined) reject(err);
        else resolve(ttl ?? 0);
      };
      // grpc deadlines cover the call; this guard also covers a stream that never opens.
      const guard = setTimeout(() => finish(new Error(`keep-alive timed out after ${timeoutMs} ms`)), timeoutMs + 50);
      this.client.leaseClient
        .leaseKeepAlive(deadlineIn(timeoutMs))
        .then((s) => {
          stream = s;
          if (settled) {
            closeStream(s);
            return;
          }
          s.on('data', (res) => finish(undefined, Number(res.TTL)));
          s.on('error', (err) => finish(err));
          s.on('end', () => finish(new Error('keep-alive stream ended')));
          s.write({ ID: this.id });
        })
        .catch((err: Error) => finish(err));
    });
  }

  private declareLost(cause: LeaseLostError): void {
    if (this.stateValue !== 'alive') return;
    this.stateValue = 'lost';
    clearTimeout(this.timer);
    this.hooks.onLost(cause);
  }
}

export function isLeaseNotFound(err: unknown): boolean {
  return /lease not found/i.test(String((err as Error | undefined)?.message));
}
