/** The supervisor's restart policy, driven with a fake clock (times in ms). */
import { describe, expect, it } from 'vitest';
import { RestartBackoff, backoffDelayMs, type RestartPolicy } from '../../runtime/supervisor/index.js';

const POLICY: RestartPolicy = { initialDelayMs: 500, maxDelayMs: 4000, multiplier: 2, healthyAfterMs: 10_000 };

describe('restart policy', () => {
  it('backoff: 500 × 2^(n-1) capped at 4000 → 500, 1000, 2000, 4000, 4000', () => {
    expect([1, 2, 3, 4, 5].map((n) => backoffDelayMs(POLICY, n))).toEqual([500, 1000, 2000, 4000, 4000]);
  });

  it('consecutive fast crashes (1 s runs) grow the delay up to the cap', () => {
    const backoff = new RestartBackoff(POLICY);
    let now = 0;
    const delays: number[] = [];
    for (let i = 0; i < 5; i++) {
      const started = now;
      now += 1000;
      const d = backoff.onUnexpectedExit(started, now);
      expect(d.kind).toBe('restart');
      if (d.kind === 'restart') {
        expect(d.attempt).toBe(i + 1);
        delays.push(d.delayMs);
        now += d.delayMs;
      }
    }
    expect(delays).toEqual([500, 1000, 2000, 4000, 4000]);
  });

  it('a run that lasted healthyAfterMs (10 s) resets the streak: the next crash waits 500 ms again', () => {
    const backoff = new RestartBackoff(POLICY);
    expect(backoff.onUnexpectedExit(0, 100)).toEqual({ kind: 'restart', attempt: 1, delayMs: 500 });
    expect(backoff.onUnexpectedExit(600, 700)).toEqual({ kind: 'restart', attempt: 2, delayMs: 1000 });
    expect(backoff.onUnexpectedExit(1700, 1700 + 10_000)).toEqual({ kind: 'restart', attempt: 1, delayMs: 500 });
    expect(backoff.streak).toBe(1);
  });

  it('maxFastCrashes 3: restarts after crashes 1 and 2, gives up at the 3rd fast crash', () => {
    const backoff = new RestartBackoff({ ...POLICY, maxFastCrashes: 3 });
    expect(backoff.onUnexpectedExit(0, 10).kind).toBe('restart');
    expect(backoff.onUnexpectedExit(510, 520).kind).toBe('restart');
    expect(backoff.onUnexpectedExit(1520, 1530)).toEqual({ kind: 'give_up', crashes: 3 });
  });

  it('maxFastCrashes never counts a healthy run: a crash after 10 s restarts even at the limit', () => {
    const backoff = new RestartBackoff({ ...POLICY, maxFastCrashes: 2 });
    expect(backoff.onUnexpectedExit(0, 10).kind).toBe('restart');
    expect(backoff.onUnexpectedExit(1000, 11_000)).toEqual({ kind: 'restart', attempt: 1, delayMs: 500 });
    expect(backoff.onUnexpectedExit(12_000, 12_010)).toEqual({ kind: 'give_up', crashes: 2 });
  });
});
