import { describe, expect, it } from 'vitest';
import { KvEventLog } from '../../workers/block-manager/kv-event-log.js';
import { Scheduler } from '../../workers/scheduler/scheduler.js';
import type { KvEventData } from '../../proto/wire.js';
import { addSeq, drive, range } from './builders.js';

/** The simplest possible consumer: a set of block hashes, as a router's indexer keeps per worker. */
function applyEvents(set: Set<string>, events: readonly KvEventData[]): Set<string> {
  for (const e of events) {
    if (e.type === 'stored') for (const b of e.blocks) set.add(b.blockHash);
    else if (e.type === 'removed') for (const h of e.blockHashes) set.delete(h);
    else set.clear();
  }
  return set;
}

/** A seeded LCG so the workload is the same on every run. */
function rng(seed: number): () => number {
  let x = seed >>> 0;
  return () => ((x = (Math.imul(x, 1664525) + 1013904223) >>> 0) / 4294967296);
}

/** Runs a churny workload (shared prefixes, small pool → evictions and preemptions) and logs every event. */
function churn(s: Scheduler, log: KvEventLog, rounds: number, seed: number): void {
  const rand = rng(seed);
  const prefixes = [range(1, 40), range(500, 24), range(900, 8)];
  for (let r = 0; r < rounds; r++) {
    for (let i = 0; i < 4; i++) {
      const p = prefixes[Math.floor(rand() * prefixes.length)]!;
      const tail = range(2000 + Math.floor(rand() * 5000), 1 + Math.floor(rand() * 20));
      addSeq(s, [...p.slice(0, 4 + Math.floor(rand() * p.length)), ...tail], 1 + Math.floor(rand() * 12), r * 10 + i);
    }
    drive(s);
    log.append(s.blockManager.drainEvents());
  }
}

describe('KvEventLog', () => {
  it('numbers events from 0 without gaps and stamps the worker id', () => {
    const log = new KvEventLog({ workerId: '00000000000000ab' });
    const out = log.append([{ type: 'cleared' }, { type: 'removed', blockHashes: ['1'] }]);
    const more = log.append([{ type: 'cleared' }]);
    expect([...out, ...more].map((e) => e.eventId)).toEqual([0, 1, 2]);
    expect(out[0]!.workerId).toBe('00000000000000ab');
    expect(log.nextEventId).toBe(3);
  });

  it('replays an inclusive range, clips past the end, and says too_old before the window', () => {
    const log = new KvEventLog({ workerId: '0', capacity: 4 });
    for (let i = 0; i < 10; i++) log.append([{ type: 'removed', blockHashes: [String(i)] }]);
    const r = log.replay(7, 8);
    expect(r.type === 'events' && r.events.map((e) => e.eventId)).toEqual([7, 8]);
    const tail = log.replay(6);
    expect(tail.type === 'events' && tail.events.map((e) => e.eventId)).toEqual([6, 7, 8, 9]);
    expect(log.replay(5)).toEqual({ type: 'too_old', oldestEventId: 6, nextEventId: 10 });
    const none = log.replay(10);
    expect(none.type === 'events' && none.events).toEqual([]);
  });

  it('keeps the last 1024 events by default', () => {
    const log = new KvEventLog({ workerId: '0' });
    for (let i = 0; i < 1500; i++) log.append([{ type: 'cleared' }]);
    expect(log.oldestEventId).toBe(1500 - 1024);
    const r = log.replay(1500 - 1024);
    expect(r.type === 'events' && r.events.length).toBe(1024);
    expect(log.replay(1500 - 1025).type).toBe('too_old');
  });

  it('dump lists parents before children, grouping each walked chain into one event', () => {
    const log = new KvEventLog({ workerId: '0' });
    log.append([
      { type: 'stored', parentHash: '1', blocks: [{ blockHash: '2', tokensHash: 't2' }, { blockHash: '3', tokensHash: 't3' }] },
      { type: 'stored', blocks: [{ blockHash: '1', tokensHash: 't1' }] },
      { type: 'stored', parentHash: '1', blocks: [{ blockHash: '4', tokensHash: 't4' }] },
    ]);
    const dump = log.dump();
    expect(dump.nextEventId).toBe(3);
    expect(dump.events).toEqual([
      { type: 'stored', blocks: [{ blockHash: '1', tokensHash: 't1' }, { blockHash: '2', tokensHash: 't2' }] },
      { type: 'stored', parentHash: '2', blocks: [{ blockHash: '3', tokensHash: 't3' }] },
      { type: 'stored', parentHash: '1', blocks: [{ blockHash: '4', tokensHash: 't4' }] },
    ]);
  });

  it("replaying a worker's events from 0, or applying its dump, reproduces exactly its block set", () => {
    const s = new Scheduler({ numBlocks: 24, blockSize: 4, maxNumBatchedTokens: 32 });
    const log = new KvEventLog({ workerId: '0', capacity: 1_000_000 });
    const router = new Set<string>();
    let seen = 0;
    for (let round = 0; round < 6; round++) {
      churn(s, log, 5, 11 + round);
      const r = log.replay(seen);
      if (r.type !== 'events') throw new Error('unexpected too_old');
      applyEvents(router, r.events.map((e) => e.data));
      seen = log.nextEventId;
      const truth = s.blockManager.cachedBlockHashes();
      expect(router).toEqual(truth);
      expect(applyEvents(new Set(), log.dump().events)).toEqual(truth);
    }
    // The workload really exercised eviction and preemption.
    const all = log.replay(0);
    expect(all.type === 'events' && all.events.some((e) => e.data.type === 'removed')).toBe(true);
    expect(s.numPreemptions).toBeGreaterThan(0);
    expect(s.blockManager.numActiveBlocks).toBe(0);
  });

  it('a router that joins late rebuilds from the dump plus the events after it', () => {
    const s = new Scheduler({ numBlocks: 24, blockSize: 4, maxNumBatchedTokens: 32 });
    const log = new KvEventLog({ workerId: '0' });
    churn(s, log, 6, 3);
    const dump = log.dump();
    const router = applyEvents(new Set(), dump.events);
    churn(s, log, 2, 4);
    const r = log.replay(dump.nextEventId);
    if (r.type !== 'events') throw new Error('replay window overrun');
    expect(r.events.length).toBeGreaterThan(0);
    applyEvents(router, r.events.map((e) => e.data));
    expect(router).toEqual(s.blockManager.cachedBlockHashes());
  });
});
