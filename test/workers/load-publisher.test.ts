/**
 * What a worker publishes on `load_metrics` (workers/process/load-publisher.ts): throttled, but
 * the last report of a burst always goes out, and an idle worker keeps re-sending its load.
 * Fake timers: the arithmetic of each case is in its name.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { LoadMetrics } from '../../proto/wire.js';
import { LoadPublisher } from '../../workers/process/load-publisher.js';

const report = (numRunning: number): LoadMetrics => ({
  workerId: '00000000000000aa', numRunning, numWaiting: 0, kvUsage: 0, activeBlocks: numRunning, totalBlocks: 64, queuedPrefillTokens: 0, timestampMs: 0,
});

describe('LoadPublisher', () => {
  let sent: { at: number; running: number }[];
  let current: LoadMetrics;
  let pub: LoadPublisher;
  beforeEach(() => {
    vi.useFakeTimers({ now: 0 });
    sent = [];
    current = report(0);
    pub = new LoadPublisher({ minIntervalMs: 100, heartbeatMs: 1000, publish: (m) => sent.push({ at: Date.now(), running: m.numRunning }) });
    pub.start(() => current);
  });
  afterEach(() => {
    pub.close();
    vi.useRealTimers();
  });

  it('interval 100 ms: steps at 0, 10, 20 (3 → 4 → 0 running) send 3 at 0 and the held 0 at 100', () => {
    pub.offer(report(3));
    vi.advanceTimersByTime(10);
    pub.offer(report(4));
    vi.advanceTimersByTime(10);
    pub.offer(report(0)); // the worker went idle: no step follows
    expect(sent).toEqual([{ at: 0, running: 3 }]);
    vi.advanceTimersByTime(80);
    expect(sent).toEqual([{ at: 0, running: 3 }, { at: 100, running: 0 }]);
    vi.advanceTimersByTime(400);
    expect(sent).toHaveLength(2); // nothing new until the heartbeat
  });

  it('heartbeat 1000 ms: an idle worker re-sends its current load, the first ≥ 1 s after the last report', () => {
    pub.offer(report(2));
    current = report(0);
    vi.advanceTimersByTime(999);
    expect(sent.map((s) => s.running)).toEqual([2]);
    vi.advanceTimersByTime(600);
    expect(sent.map((s) => s.running)).toEqual([2, 0]);
    expect(sent[1]!.at).toBeGreaterThanOrEqual(1000);
    expect(sent[1]!.at).toBeLessThanOrEqual(1500);
    vi.advanceTimersByTime(3000);
    // Every gap between reports stays within 1.5 heartbeats, well inside the 3 s staleness.
    for (let i = 1; i < sent.length; i++) expect(sent[i]!.at - sent[i - 1]!.at).toBeLessThanOrEqual(1500);
  });

  it('interval 0: every report goes out at once', () => {
    const all = new LoadPublisher({ minIntervalMs: 0, heartbeatMs: 1000, publish: (m) => sent.push({ at: Date.now(), running: m.numRunning }) });
    all.start(() => current);
    all.offer(report(1));
    all.offer(report(2));
    all.offer(report(0));
    expect(sent.map((s) => s.running).slice(0, 3)).toEqual([1, 2, 0]);
    all.close();
  });

  it('after close nothing is sent, held or heartbeat', () => {
    pub.offer(report(1));
    pub.offer(report(0));
    pub.close();
    vi.advanceTimersByTime(5000);
    expect(sent.map((s) => s.running)).toEqual([1]);
  });
});
