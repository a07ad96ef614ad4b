/**
 * StopSignals (runtime/supervisor/stop-signals.ts): the first stop signal drains, the same
 * signal again within DUPLICATE_SIGNAL_MS (500 ms) is the same Ctrl-C forwarded by a wrapper,
 * anything later or different means "now".
 */
import { describe, expect, it } from 'vitest';
import { DUPLICATE_SIGNAL_MS, StopSignals } from '../../runtime/supervisor/stop-signals.js';

describe('StopSignals', () => {
  it('SIGINT at t=1000 drains; the copy npx forwards at t=1003 is a duplicate; a press at t=2000 means now', () => {
    const s = new StopSignals();
    expect(s.receive('SIGINT', 1000)).toBe('drain');
    expect(s.receive('SIGINT', 1003)).toBe('duplicate');
    expect(s.receive('SIGINT', 2000)).toBe('now');
  });

  it('the window is measured from the first signal: t=1000 + 499 is a copy, + 500 is a second press', () => {
    expect(DUPLICATE_SIGNAL_MS).toBe(500);
    const a = new StopSignals();
    a.receive('SIGINT', 1000);
    expect(a.receive('SIGINT', 1499)).toBe('duplicate');
    const b = new StopSignals();
    b.receive('SIGINT', 1000);
    expect(b.receive('SIGINT', 1500)).toBe('now');
  });

  it('another signal is never a copy: SIGINT then SIGTERM 1 ms later means now', () => {
    const s = new StopSignals();
    expect(s.receive('SIGINT', 0)).toBe('drain');
    expect(s.receive('SIGTERM', 1)).toBe('now');
  });
});
