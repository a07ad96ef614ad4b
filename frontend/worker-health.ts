/**
 * Workers that just failed with 'unavailable' are kept out of routing for a cooldown. After a
 * kill -9 the worker's card stays in discovery until its lease expires (up to the TTL); without
 * this every new request would try the dead worker first and pay a failed connect plus a
 * migration. A draining worker answers 'unavailable' too, and is kept out the same way until
 * its card goes.
 *
 * A refused connection is definite (nothing listens at the instance's address: the process is
 * gone, and a restarted one registers a new instance): such an instance is `gone`, never
 * guessed at, not even when every candidate is down. Pure: callers pass the clock.
 */
import type { InstanceId } from '../proto/wire.js';
import { ConnectRefusedError } from '../runtime/errors.js';

/** How long a gone instance stays excluded: far past any lease TTL, after which its card has gone too. */
export const GONE_MS = 10 * 60_000;

export class WorkerHealth {
  private readonly downUntil = new Map<InstanceId, number>();
  private readonly goneUntil = new Map<InstanceId, number>();

  constructor(
    readonly cooldownMs: number,
    readonly goneMs = GONE_MS,
  ) {}

  markDown(instanceId: InstanceId, nowMs: number): void {
    this.downUntil.set(instanceId, nowMs + this.cooldownMs);
  }

  /** The instance's process is gone (its connection was refused). */
  markGone(instanceId: InstanceId, nowMs: number): void {
    // Expired entries go here, so the map holds at most the instances gone within `goneMs`.
    for (const [id, until] of this.goneUntil) if (until <= nowMs) this.goneUntil.delete(id);
    this.goneUntil.set(instanceId, nowMs + this.goneMs);
  }

  /** A failed attempt: gone when the connection was refused, else down for the cooldown. */
  markFailed(instanceId: InstanceId, cause: unknown, nowMs: number): void {
    if (cause instanceof ConnectRefusedError) this.markGone(instanceId, nowMs);
    else this.markDown(instanceId, nowMs);
  }

  isGone(instanceId: InstanceId, nowMs: number): boolean {
    const until = this.goneUntil.get(instanceId);
    return until !== undefined && until > nowMs;
  }

  isDown(instanceId: InstanceId, nowMs: number): boolean {
    if (this.isGone(instanceId, nowMs)) return true;
    const until = this.downUntil.get(instanceId);
    if (until === undefined) return false;
    if (until > nowMs) return true;
    this.downUntil.delete(instanceId);
    return false;
  }

  /**
   * Candidates not in cooldown; when every one is, those merely in cooldown (a guess beats a
   * refusal), never a gone one.
   */
  filter(candidates: InstanceId[], nowMs: number): InstanceId[] {
    const up = this.up(candidates, nowMs);
    if (up.length > 0 || this.goneUntil.size === 0) return up.length > 0 ? up : candidates;
    return candidates.filter((id) => !this.isGone(id, nowMs));
  }

  /**
   * Candidates not in cooldown, possibly none. A retry uses this: a worker that just answered
   * 'unavailable' (dead, or draining: "server is draining") must never be picked again for it.
   */
  up(candidates: InstanceId[], nowMs: number): InstanceId[] {
    if (this.downUntil.size === 0 && this.goneUntil.size === 0) return candidates;
    return candidates.filter((id) => !this.isDown(id, nowMs));
  }
}
