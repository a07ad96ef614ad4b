import { describe, expect, it } from 'vitest';
import { ActiveSequences, type ActiveSequenceUpdate } from '../../router/active-sequences.js';
import { updateFromWire, updateToWire } from '../../router/router-sync.js';

const BS = 16;
const add = (requestId: string, workerId: string, blocks: number[], promptTokens: number, overlapBlocks = 0): ActiveSequenceUpdate => ({
  type: 'add',
  requestId,
  workerId,
  blockHashes: blocks.map(BigInt),
  promptTokens,
  overlapBlocks,
});

describe('ActiveSequences', () => {
  it('counts blocks shared by sequences once per worker', () => {
    const s = new ActiveSequences({ blockSize: BS, ttlMs: 1000 });
    // r1: blocks 1,2,3,4 (64 tokens + 5 = 69 tokens); r2 shares 1,2,3 then has 9.
    s.apply(add('r1', 'w', [1, 2, 3, 4], 69), 0);
    s.apply(add('r2', 'w', [1, 2, 3, 9], 64), 0);
    // distinct full blocks {1,2,3,4,9} = 5, plus one private tail block per sequence = 7
    expect(s.load('w').activeBlocks).toBe(7);
    s.apply({ type: 'free', requestId: 'r1' }, 1);
    expect(s.load('w').activeBlocks).toBe(4 + 1);
    // Another worker's identical blocks are its own.
    s.apply(add('r3', 'v', [1, 2, 3, 9], 64), 1);
    expect(s.load('v').activeBlocks).toBe(5);
    expect(s.load('w').activeBlocks).toBe(5);
  });

  it('pending prefill is the uncached part until the first token', () => {
    const s = new ActiveSequences({ blockSize: BS, ttlMs: 1000 });
    // 100 tokens = ceil(100/16) = 7 blocks; 4 cached → 3 blocks and 100 − 64 = 36 tokens to prefill
    s.apply(add('r1', 'w', [1, 2, 3, 4, 5, 6], 100, 4), 0);
    expect(s.load('w')).toEqual({ activeSequences: 1, activeBlocks: 7, pendingPrefillBlocks: 3, pendingPrefillTokens: 36 });
    s.apply({ type: 'prefill_done', requestId: 'r1' }, 5);
    expect(s.load('w')).toMatchObject({ pendingPrefillBlocks: 0, pendingPrefillTokens: 0, activeBlocks: 7 });
    s.apply({ type: 'free', requestId: 'r1' }, 6);
    expect(s.load('w')).toEqual({ activeSequences: 0, activeBlocks: 0, pendingPrefillBlocks: 0, pendingPrefillTokens: 0 });
  });

  it('a duplicate add or an unknown request changes nothing', () => {
    const s = new ActiveSequences({ blockSize: BS, ttlMs: 1000 });
    expect(s.apply(add('r1', 'w', [1], 16), 0)).toBe(true);
    expect(s.apply(add('r1', 'w', [1], 16), 0)).toBe(false);
    expect(s.apply({ type: 'free', requestId: 'nope' }, 0)).toBe(false);
    expect(s.load('w').activeSequences).toBe(1);
  });

  it('stale entries expire by nowMs; an update pushes the expiry out', () => {
    const s = new ActiveSequences({ blockSize: BS, ttlMs: 1000 });
    s.apply(add('r1', 'w', [1], 16), 0);
    s.apply(add('r2', 'w', [2], 16), 0);
    s.apply({ type: 'prefill_done', requestId: 'r2' }, 500);
    expect(s.expire(999)).toEqual([]);
    expect(s.expire(1000)).toEqual(['r1']);
    expect(s.load('w').activeSequences).toBe(1);
    expect(s.expire(1499)).toEqual([]);
    expect(s.expire(1500)).toEqual(['r2']);
    expect(s.load('w').activeBlocks).toBe(0);
  });

  it('removeWorker forgets its sequences', () => {
    const s = new ActiveSequences({ blockSize: BS, ttlMs: 1000 });
    s.apply(add('r1', 'w', [1], 16), 0);
    s.apply(add('r2', 'v', [1], 16), 0);
    expect(s.removeWorker('w')).toEqual(['r1']);
    expect(s.has('r1')).toBe(false);
    expect(s.load('v').activeSequences).toBe(1);
  });

  it('updates are data: replaying them (through the wire form) on a replica gives the same load', () => {
    const a = new ActiveSequences({ blockSize: BS, ttlMs: 1000 });
    const b = new ActiveSequences({ blockSize: BS, ttlMs: 1000 });
    const updates: ActiveSequenceUpdate[] = [
      add('r1', 'w', [1, 2, 3], 50, 2),
      add('r2', 'w', [1, 2, 7], 48, 0),
      { type: 'prefill_done', requestId: 'r1' },
      add('r3', 'v', [5], 20, 1),
      { type: 'free', requestId: 'r2' },
    ];
    for (const u of updates) {
      a.apply(u, 0);
      const wire = JSON.parse(JSON.stringify(updateToWire(u)));
      b.apply(updateFromWire(wire)!, 0);
    }
    expect(b.load('w')).toEqual(a.load('w'));
    expect(b.load('v')).toEqual(a.load('v'));
    expect(a.load('w')).toEqual({ activeSequences: 1, activeBlocks: 4, pendingPrefillBlocks: 0, pendingPrefillTokens: 0 });
  });

  it('rejects malformed sync payloads', () => {
    expect(updateFromWire({ type: 'add', requestId: 'r', workerId: 'w', blockHashes: ['x'], promptTokens: 1, overlapBlocks: 0 })).toBeUndefined();
    expect(updateFromWire({ type: 'add', requestId: 'r', workerId: 'w', blockHashes: [], promptTokens: -1, overlapBlocks: 0 })).toBeUndefined();
    expect(updateFromWire(null)).toBeUndefined();
    expect(updateFromWire({ type: 'free', requestId: 'r' })).toEqual({ type: 'free', requestId: 'r' });
  });
});
