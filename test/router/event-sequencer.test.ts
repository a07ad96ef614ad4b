import { describe, expect, it } from 'vitest';
import type { KvEvent } from '../../proto/wire.js';
import { EventSequencer } from '../../router/event-sequencer.js';

const ev = (eventId: number, workerId = 'w'): KvEvent => ({ workerId, eventId, data: { type: 'cleared' } });
const ids = (events: readonly KvEvent[]) => events.map((e) => e.eventId);

/** A sequencer already live for worker 'w' at next event id `next`. */
function live(next = 0, opts = {}): EventSequencer {
  const s = new EventSequencer(opts);
  s.discover('w', 0);
  s.acceptDump('w', next, 0);
  return s;
}

describe('EventSequencer', () => {
  it('asks for a full dump when a worker is first seen, once', () => {
    const s = new EventSequencer();
    expect(s.discover('w', 0)).toEqual([{ type: 'request_dump', workerId: 'w' }]);
    expect(s.discover('w', 0)).toEqual([]);
    // An event from a worker discovery has not told us about yet also triggers a dump.
    expect(s.accept(ev(5, 'x'), 0)).toEqual({ ready: [], actions: [{ type: 'request_dump', workerId: 'x' }] });
  });

  it('buffers live events until the dump, then applies those the dump does not cover', () => {
    const s = new EventSequencer();
    s.discover('w', 0);
    for (const id of [1, 2, 3, 4]) expect(s.accept(ev(id), 0).ready).toEqual([]);
    const verdict = s.acceptDump('w', 3, 0); // the dump reflects events 0..2
    expect(verdict.accepted).toBe(true);
    expect(ids(verdict.ready)).toEqual([3, 4]);
    expect(verdict.actions).toEqual([]);
    expect(s.nextEventId('w')).toBe(5);
  });

  it('applies in-order events immediately and drops duplicates', () => {
    const s = live();
    expect(ids(s.accept(ev(0), 0).ready)).toEqual([0]);
    expect(ids(s.accept(ev(1), 0).ready)).toEqual([1]);
    expect(ids(s.accept(ev(1), 0).ready)).toEqual([]);
    expect(s.stats().duplicatesDropped).toBe(1);
  });

  it('on a gap asks for exactly the missing range, then drains once it is filled', () => {
    const s = live();
    s.accept(ev(0), 0);
    s.accept(ev(1), 0);
    // 2 and 3 are lost; 4 arrives.
    expect(s.accept(ev(4), 10)).toEqual({
      ready: [],
      actions: [{ type: 'request_replay', workerId: 'w', fromEventId: 2, toEventId: 3 }],
    });
    // More live events while the replay is outstanding: no duplicate request.
    expect(s.accept(ev(5), 11).actions).toEqual([]);
    expect(ids(s.accept(ev(2), 12).ready)).toEqual([2]);
    expect(ids(s.accept(ev(3), 12).ready)).toEqual([3, 4, 5]);
    expect(s.stats()).toMatchObject({ gapsDetected: 1, gapsRecovered: 1, bufferedEvents: 0 });
  });

  it('a second gap behind the first is asked for after the first is filled', () => {
    const s = live();
    s.accept(ev(2), 0); // gap [0,1]
    s.accept(ev(5), 0); // gap [3,4] too
    expect(ids(s.accept(ev(0), 0).ready)).toEqual([0]);
    const step = s.accept(ev(1), 0);
    expect(ids(step.ready)).toEqual([1, 2]);
    expect(step.actions).toEqual([{ type: 'request_replay', workerId: 'w', fromEventId: 3, toEventId: 4 }]);
  });

  it('falls back to a dump when the worker answers too_old', () => {
    const s = live();
    s.accept(ev(7), 0);
    expect(s.replayTooOld('w', 1)).toEqual([{ type: 'request_dump', workerId: 'w' }]);
    expect(s.nextEventId('w')).toBeUndefined();
    expect(ids(s.acceptDump('w', 7, 2).ready)).toEqual([7]);
  });

  it('asks for a dump when too many events wait behind a gap', () => {
    const s = live(0, { maxBufferedEvents: 3 });
    s.accept(ev(1), 0);
    s.accept(ev(2), 0);
    s.accept(ev(3), 0);
    expect(s.accept(ev(4), 0).actions).toEqual([{ type: 'request_dump', workerId: 'w' }]);
  });

  it('re-asks after retryAfterMs and escalates a failing replay to a dump', () => {
    const s = live(0, { retryAfterMs: 100, maxReplayAttempts: 2 });
    s.accept(ev(3), 0);
    expect(s.tick(99)).toEqual([]);
    expect(s.tick(100)).toEqual([{ type: 'request_replay', workerId: 'w', fromEventId: 0, toEventId: 2 }]);
    expect(s.tick(200)).toEqual([{ type: 'request_dump', workerId: 'w' }]);
    expect(s.tick(300)).toEqual([{ type: 'request_dump', workerId: 'w' }]);
  });

  it('ignores a dump older than what was already applied', () => {
    const s = live(0);
    for (const id of [0, 1, 2, 3]) s.accept(ev(id), 0);
    expect(s.acceptDump('w', 2, 0).accepted).toBe(false);
    expect(s.nextEventId('w')).toBe(4);
  });
});
