/**
 * Workers that just failed with 'unavailable' are kept out of routing for a cooldown. After a
 * kill -9 the worker's card stays in discovery until its lease expires (up to the TTL); without
 * this every new request would try the dead worker first and pay a failed connect plus a
 * migration. A draining worker answers 'unavailable' too, and is kept out the same way until
 * its card goes. Pure: callers pass the clock.
 */
import type { InstanceId } from '../proto/wire.js';

export class WorkerHealth {
  private readonly downUntil = new Map<InstanceId, number>();

  constructor(readonly cooldownMs: number) {}

  markDown(instanceId: InstanceId, nowMs: number): void {
    this.downUntil.set(instanceId, nowMs + this.cooldownMs);
  }

  isDown(instanceId: InstanceId, nowMs: number): boolean {
    const until = this.downUntil.get(instanceId);
    if (until === undefined) return false;
    if (until > nowMs) return true;
    this.downUntil.delete(instanceId);
    return false;
  }

  /** Candidates not in cooldown; all of them when every one is (a guess beats a refusal). */
  filter(candidates: InstanceId[], nowMs: number): InstanceId[] {
    const up = this.up(candidates, nowMs);
    return up.length > 0 ? up : candidates;
  }

  /**
   * Candidates not in cooldown, possibly none. A retry uses this: a worker that just answered
   * 'unavailable' (dead, or draining: "server is draining") must never be picked again for it.
   */
  up(candidates: InstanceId[], nowMs: number): InstanceId[] {
    if (this.downUntil.size === 0) return candidates;
    return candidates.filter((id) => !this.isDown(id, nowMs));
  }
}
