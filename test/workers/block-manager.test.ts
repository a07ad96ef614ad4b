import { describe, expect, it } from 'vitest';
import { BlockManager } from '../../workers/block-manager/block-manager.js';
import { blockHashes } from '../../router/hashing.js';
import type { Sequence } from '../../workers/sequence.js';
import { range, seq } from './builders.js';

const BS = 4;

/** Admits a sequence and marks its whole prompt computed, as one full prefill step would. */
function prefill(bm: BlockManager, s: Sequence): number {
  const hit = bm.findPrefixHit(s);
  expect(bm.allocate(s, hit, s.numTokens - hit.numTokens)).toBe(true);
  s.numComputedTokens = s.numTokens;
  bm.commitComputed(s);
  return hit.numTokens;
}

function hashStr(tokens: number[]): string[] {
  return blockHashes(tokens, BS).seq.map((h) => h.toString());
}

describe('BlockManager', () => {
  it('stores full blocks under the chained hashes of router/hashing and announces them', () => {
    const bm = new BlockManager({ numBlocks: 8, blockSize: BS });
    const a = seq(range(1, 10)); // 2 full blocks + 2 tokens
    expect(prefill(bm, a)).toBe(0);
    expect(a.numBlocks).toBe(3);
    expect(bm.numActiveBlocks).toBe(3);
    const expected = hashStr(range(1, 10));
    expect([...bm.cachedBlockHashes()].sort()).toEqual([...expected].sort());
    const local = blockHashes(range(1, 10), BS).local.map((h) => h.toString());
    expect(bm.drainEvents()).toEqual([
      {
        type: 'stored',
        blocks: [
          { blockHash: expected[0], tokensHash: local[0] },
          { blockHash: expected[1], tokensHash: local[1] },
        ],
      },
    ]);
  });

  it('prefix hit: a shared prompt prefix reuses the same blocks with refcount 2', () => {
    const bm = new BlockManager({ numBlocks: 8, blockSize: BS });
    const a = seq(range(1, 10));
    prefill(bm, a);
    bm.drainEvents();
    const b = seq([...range(1, 8), 99, 98, 97]);
    expect(prefill(bm, b)).toBe(8);
    expect(b.blockAt(0)).toBe(a.blockAt(0));
    expect(b.blockAt(1)).toBe(a.blockAt(1));
    expect(b.blockAt(2)).not.toBe(a.blockAt(2));
    expect(bm.refCountOf(a.blockAt(0))).toBe(2);
    expect(bm.prefixCacheQueries).toBe(10 + 11);
    expect(bm.prefixCacheHits).toBe(8);
    // b's third block is partial: nothing new to announce.
    expect(bm.drainEvents()).toEqual([]);
  });

  it('prefix hit leaves at least one token to compute', () => {
    const bm = new BlockManager({ numBlocks: 8, blockSize: BS });
    prefill(bm, seq(range(1, 8)));
    // Exactly two cached blocks long: only the first may hit, the last token must be computed.
    expect(bm.findPrefixHit(seq(range(1, 8))).numTokens).toBe(4);
    expect(bm.findPrefixHit(seq(range(1, 9))).numTokens).toBe(8);
  });

  it('a hash hit with different token ids (a collision) is not a hit', () => {
    const bm = new BlockManager({ numBlocks: 8, blockSize: BS });
    prefill(bm, seq(range(1, 9)));
    // A real XXH3 collision cannot be produced, so seed the sequence's hash cache with the
    // cached block's hash, as a colliding block would compute it.
    const impostor = seq(range(500, 9));
    impostor.seqHashes.push(...blockHashes(range(1, 9), BS).seq);
    impostor.localHashes.push(...blockHashes(range(1, 9), BS).local);
    expect(bm.findPrefixHit(impostor).numTokens).toBe(0);
  });

  it('a different first block breaks the chain even when later blocks match', () => {
    const bm = new BlockManager({ numBlocks: 8, blockSize: BS });
    prefill(bm, seq(range(1, 12)));
    expect(bm.findPrefixHit(seq([0, ...range(2, 11)])).numTokens).toBe(0);
  });

  it('eviction order: freed cached blocks are reused least recently freed first, deepest block first', () => {
    const bm = new BlockManager({ numBlocks: 6, blockSize: BS });
    const a = seq(range(100, 8));
    const b = seq(range(200, 8));
    prefill(bm, a);
    prefill(bm, b);
    const [a0, a1, b0, b1] = [a.blockAt(0), a.blockAt(1), b.blockAt(0), b.blockAt(1)];
    bm.free(a);
    bm.free(b);
    // Two never-used blocks first, then a's (freed earlier), child before parent, then b's.
    expect(bm.freeOrder().slice(2)).toEqual([a1, a0, b1, b0]);
    bm.drainEvents();

    const c = seq(range(300, 16)); // needs 4 fresh blocks: 2 empty + a's 2 cached
    prefill(bm, c);
    const aHashes = hashStr(range(100, 8));
    expect(bm.drainEvents()[0]).toEqual({ type: 'removed', blockHashes: [aHashes[1], aHashes[0]] });
    expect(bm.cachedBlockHashes().has(aHashes[0]!)).toBe(false);
    // b survived the eviction and still hits.
    expect(bm.findPrefixHit(seq([...range(200, 8), 5])).numTokens).toBe(8);
  });

  it('a hit on a freed cached block takes it back out of the free list', () => {
    const bm = new BlockManager({ numBlocks: 4, blockSize: BS });
    const a = seq(range(1, 8));
    prefill(bm, a);
    const a0 = a.blockAt(0);
    bm.free(a);
    expect(bm.numActiveBlocks).toBe(0);
    const b = seq(range(1, 6)); // hits block 0 only
    expect(prefill(bm, b)).toBe(4);
    expect(b.blockAt(0)).toBe(a0);
    expect(bm.freeOrder()).not.toContain(a0);
    expect(bm.numActiveBlocks).toBe(2);
  });

  it('partial blocks go to the head of the free list so cached blocks survive longer', () => {
    const bm = new BlockManager({ numBlocks: 4, blockSize: BS });
    const a = seq(range(1, 6)); // one full block + one partial
    prefill(bm, a);
    const [full, partial] = [a.blockAt(0), a.blockAt(1)];
    bm.free(a);
    const order = bm.freeOrder();
    expect(order[0]).toBe(partial);
    expect(order[order.length - 1]).toBe(full);
  });

  it('running out of blocks is a normal result: canAllocate false and allocate changes nothing', () => {
    const bm = new BlockManager({ numBlocks: 4, blockSize: BS });
    const big = seq(range(1, 17)); // 5 blocks
    const hit = bm.findPrefixHit(big);
    expect(bm.canAllocate(big, hit, 17)).toBe(false);
    expect(bm.allocate(big, hit, 17)).toBe(false);
    expect(big.numBlocks).toBe(0);
    expect(bm.numFreeBlocks).toBe(4);

    const s = seq(range(1, 16)); // exactly the pool
    prefill(bm, s);
    expect(bm.canAppend(s, 1)).toBe(false);
    expect(bm.appendSlots(s, 1)).toBe(false);
    expect(s.numBlocks).toBe(4);
  });

  it('counts cached free blocks a hit reclaims when checking capacity', () => {
    const bm = new BlockManager({ numBlocks: 4, blockSize: BS });
    const a = seq(range(1, 12));
    prefill(bm, a);
    bm.free(a); // 3 cached free blocks + 1 empty
    const b = seq([...range(1, 12), ...range(50, 5)]); // 17 tokens: 3 hit + 2 fresh = 5 > 4
    const hit = bm.findPrefixHit(b);
    expect(hit.numTokens).toBe(12);
    expect(bm.canAllocate(b, hit, 5)).toBe(false);
    const c = seq([...range(1, 12), 50, 51]); // 3 hit + 1 fresh = 4
    expect(bm.canAllocate(c, bm.findPrefixHit(c), 2)).toBe(true);
  });

  it('decode growth hashes a block once it fills and chains it to its parent', () => {
    const bm = new BlockManager({ numBlocks: 8, blockSize: BS });
    const a = seq(range(1, 6));
    prefill(bm, a);
    bm.drainEvents();
    for (const t of [7, 8]) {
      a.appendToken(t);
      expect(bm.appendSlots(a, 1)).toBe(true);
      a.numComputedTokens += 1;
      bm.commitComputed(a);
    }
    const hashes = hashStr(range(1, 8));
    const events = bm.drainEvents();
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({ type: 'stored', parentHash: hashes[0], blocks: [{ blockHash: hashes[1] }] });
  });

  it('the same prefix computed twice at once is cached once and announced once', () => {
    const bm = new BlockManager({ numBlocks: 8, blockSize: BS });
    const a = seq(range(1, 5));
    const b = seq(range(1, 5));
    for (const s of [a, b]) expect(bm.allocate(s, bm.findPrefixHit(s), 5)).toBe(true);
    for (const s of [a, b]) {
      s.numComputedTokens = 5;
      bm.commitComputed(s);
    }
    expect(bm.numCachedBlocks).toBe(1);
    expect(bm.drainEvents()).toHaveLength(1);
    const [bFull, bPartial] = [b.blockAt(0), b.blockAt(1)];
    expect(bFull).not.toBe(a.blockAt(0));
    bm.free(b);
    // b's duplicate block holds nothing reusable: it goes to the head with the partial one.
    expect(bm.freeOrder().slice(0, 2)).toEqual([bFull, bPartial]);
  });

  it('resetPrefixCache forgets every hash and emits Cleared', () => {
    const bm = new BlockManager({ numBlocks: 8, blockSize: BS });
    prefill(bm, seq(range(1, 9)));
    bm.drainEvents();
    bm.resetPrefixCache();
    expect(bm.numCachedBlocks).toBe(0);
    expect(bm.drainEvents()).toEqual([{ type: 'cleared' }]);
    expect(bm.findPrefixHit(seq(range(1, 9))).numTokens).toBe(0);
  });

  it('with prefix caching off nothing is hashed, hit or announced', () => {
    const bm = new BlockManager({ numBlocks: 8, blockSize: BS, enablePrefixCaching: false });
    prefill(bm, seq(range(1, 9)));
    expect(prefill(bm, seq(range(1, 9)))).toBe(0);
    expect(bm.drainEvents()).toEqual([]);
  });
  it('seqHashAt: the chained hash of a full block, hashed lazily without touching the pool', () => {
    const bm = new BlockManager({ numBlocks: 8, blockSize: BS });
    const s = seq(range(1, 10));
    expect(bm.seqHashAt(s, 1).toString()).toBe(hashStr(range(1, 10))[1]);
    expect(s.seqHashes.length).toBe(2);
    expect(() => bm.seqHashAt(s, 2)).toThrow(RangeError); // tokens 8..9 are not a full block
    expect(bm.numFreeBlocks).toBe(8);
    expect(bm.drainEvents()).toEqual([]);
  });
});
