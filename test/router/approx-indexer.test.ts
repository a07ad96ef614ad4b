/**
 * `ApproxIndexer`, the index for workers without KV events: the `KvIndexer` contract
 * (kv-indexer.contract.ts) fed by `record` (what the router does after each routing decision)
 * with a TTL, then what only the approximate index has.
 */
import { describe, expect, it } from 'vitest';
import { ApproxIndexer } from '../../router/approx-indexer.js';
import { blockHashes } from '../../router/hashing.js';
import { prompt } from './fixtures.js';
import { kvIndexerContract } from './kv-indexer.contract.js';

const BS = 4;
const TTL = 1000;
const localOf = (p: readonly number[]) => blockHashes(p, BS).local;

kvIndexerContract('ApproxIndexer (routing decisions, TTL)', () => ({
  blockSize: BS,
  ttlMs: TTL,
  create: () => {
    const index = new ApproxIndexer({ ttlMs: TTL });
    return {
      index,
      store: (id, p, nowMs) => index.record(id, localOf(p), nowMs),
      advance: (nowMs) => void index.expire(nowMs),
      removeWorker: (id) => index.removeWorker(id),
      evict: { unsupported: 'nobody reports evictions without KV events; blocks leave by TTL' },
      clear: { unsupported: 'nobody reports a cleared cache without KV events' },
      blocksOf: { unsupported: 'learned from local hashes only, so sequence hashes are never known' },
      roundTrip: { unsupported: 'no snapshots: the assumptions are relearned from new routing decisions' },
    };
  },
}));

describe('ApproxIndexer', () => {
  it('expire reports how many (worker, block) entries it dropped', () => {
    const index = new ApproxIndexer({ ttlMs: TTL });
    index.record('a', localOf(prompt(1, 3 * BS, 1, 0)), 0);
    index.record('b', localOf(prompt(1, 2 * BS, 1, 0)), 10);
    expect(index.expire(TTL - 1)).toBe(0);
    expect(index.expire(TTL)).toBe(3);
    expect(index.expire(TTL + 10)).toBe(2);
  });

  it('a queued expiry of a removed worker does not drop a reused slot and node id that were refreshed', () => {
    const index = new ApproxIndexer({ ttlMs: TTL });
    const first = localOf(prompt(1, 2 * BS, 1, 0));
    const second = localOf(prompt(2, 2 * BS, 2, 0));
    index.record('a', first, 0);
    index.removeWorker('a'); // frees slot 0 and both node ids; their queue items stay (due at TTL)
    index.record('b', second, 0); // slot 0 and the same node ids again
    index.record('b', second, 500); // refreshed: due at TTL + 500
    expect(index.expire(TTL)).toBe(0);
    expect(index.findMatches(second).depths).toEqual(new Map([['b', 2]]));
    expect(index.expire(TTL + 500)).toBe(2);
    expect(index.stats()).toMatchObject({ nodes: 0, entries: 0, workers: 1 });
  });

  it('a decimal hash that is not a u64 ends the recorded chain there', () => {
    const index = new ApproxIndexer({ ttlMs: TTL });
    index.record('a', ['5', '6', 'x', '8'], 0);
    expect(index.findMatches(['5', '6', '7', '8']).depths).toEqual(new Map([['a', 2]]));
    expect(index.stats()).toMatchObject({ nodes: 2, entries: 2 });
  });
});
