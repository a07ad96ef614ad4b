import { xxh3 } from '@node-rs/xxhash';
import { describe, expect, it } from 'vitest';
import { BlockHasher } from '../../router/block-hasher.js';
import { blockHashes, chainHash, KV_HASH_SEED, localBlockHashes, sequenceHashes, xxh3Seeded } from '../../router/hashing.js';
import { Xxh3Wasm } from '../../router/xxh3-wasm.js';
import { SeededRandom } from '../../runtime/random.js';

const PRIME32 = 2654435761n;
const PRIME64 = 11400714785074694797n;

/** xxHash's sanity buffer (cli/xsum_sanity_check.c, XSUM_fillTestBuffer). */
function sanityBuffer(len: number): Uint8Array {
  const buf = new Uint8Array(len);
  let gen = PRIME32;
  for (let i = 0; i < len; i++) {
    buf[i] = Number(gen >> 56n);
    gen = BigInt.asUintN(64, gen * PRIME64);
  }
  return buf;
}

// XSUM_XXH3_testdata from xxHash's cli/xsum_sanity_check.c: XXH3_64bits_withSeed(buffer, len, seed).
const XXH3_VECTORS: Array<[len: number, seed: bigint, hash: bigint]> = [
  [0, 0n, 0x2d06800538d394c2n],
  [0, PRIME64, 0xa8a6b918b2f0364an],
  [1, 0n, 0xc44bdff4074eecdbn],
  [1, PRIME64, 0x032be332dd766ef8n],
  [6, 0n, 0x27b56a84cd2d7325n],
  [6, PRIME64, 0x84589c116ab59ab9n],
  [12, 0n, 0xa713daf0dfbb77e7n],
  [12, PRIME64, 0xe7303e1b2336de0en],
  [24, 0n, 0xa3fe70bf9d3510ebn],
  [24, PRIME64, 0x850e80fc35bdd690n],
  [48, 0n, 0x397da259ecba1f11n],
  [48, PRIME64, 0xadc2cbaa44acc616n],
  [80, 0n, 0xbcdefbbb2c47c90an],
  [80, PRIME64, 0xc6dd0cb699532e73n],
  [195, 0n, 0xcd94217ee362ec3an],
  [195, PRIME64, 0xba68003d370cb3d9n],
  [403, 0n, 0xcdeb804d65c6dea4n],
  [403, PRIME64, 0x6259f6ecfd6443fdn],
  [512, 0n, 0x617e49599013cb6bn],
  [512, PRIME64, 0x3ce457de14c27708n],
  [2048, 0n, 0xdd59e2c3a5f038e0n],
  [2048, PRIME64, 0x66f81670669ababcn],
  [2099, 0n, 0xc6b9d9b3fc9ac765n],
  [2099, PRIME64, 0x184f316843663974n],
  [2240, 0n, 0x6e73a90539cf2948n],
  [2240, PRIME64, 0x757ba8487d1b5247n],
  [2367, 0n, 0xcb37aeb9e5d361edn],
  [2367, PRIME64, 0xd2db3415b942b42an],
];

/** Reference encoding straight from docs/design.md, independent of hashing.ts's buffers. */
function u32le(values: readonly number[]): Uint8Array {
  const view = new DataView(new ArrayBuffer(values.length * 4));
  values.forEach((v, i) => view.setUint32(i * 4, v, true));
  return new Uint8Array(view.buffer);
}
function u64le(values: readonly bigint[]): Uint8Array {
  const view = new DataView(new ArrayBuffer(values.length * 8));
  values.forEach((v, i) => view.setBigUint64(i * 8, v, true));
  return new Uint8Array(view.buffer);
}

describe('XXH3-64 library against the published xxHash sanity vectors', () => {
  const buffer = sanityBuffer(2367);
  it.each(XXH3_VECTORS)('len %i seed %s', (len, seed, hash) => {
    expect(xxh3.xxh64(buffer.subarray(0, len), seed)).toBe(hash);
  });

  it('xxh3Seeded is XXH3-64 with the project seed 1337', () => {
    expect(KV_HASH_SEED).toBe(1337n);
    const bytes = buffer.subarray(0, 64);
    expect(xxh3Seeded(bytes)).toBe(xxh3.xxh64(bytes, 1337n));
    expect(xxh3Seeded(bytes)).not.toBe(xxh3.xxh64(bytes, 0n));
  });
});

describe('block hashing chain (docs/design.md "KV events and block hashing")', () => {
  const toks = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0xffffffff, 11];

  it('local hash is XXH3(seed 1337) of the block tokens as u32 little-endian', () => {
    const local = localBlockHashes(toks, 4);
    expect(local).toEqual([
      xxh3.xxh64(u32le([1, 2, 3, 4]), 1337n),
      xxh3.xxh64(u32le([5, 6, 7, 8]), 1337n),
      xxh3.xxh64(u32le([9, 10, 0xffffffff, 11]), 1337n),
    ]);
  });

  it('only full blocks are hashed', () => {
    expect(localBlockHashes(toks.slice(0, 11), 4)).toHaveLength(2);
    expect(localBlockHashes([1, 2, 3], 4)).toEqual([]);
  });

  it('seq[0] = local[0] and seq[i] = XXH3(seed 1337, u64 LE seq[i-1] ‖ u64 LE local[i])', () => {
    const { local, seq } = blockHashes(toks, 4);
    expect(seq[0]).toBe(local[0]);
    expect(seq[1]).toBe(xxh3.xxh64(u64le([seq[0]!, local[1]!]), 1337n));
    expect(seq[2]).toBe(xxh3.xxh64(u64le([seq[1]!, local[2]!]), 1337n));
    expect(chainHash(undefined, local[0]!)).toBe(local[0]);
  });

  it('the same block after a different prefix has the same local but a different sequence hash', () => {
    const a = blockHashes([1, 1, 1, 1, 7, 7, 7, 7], 4);
    const b = blockHashes([2, 2, 2, 2, 7, 7, 7, 7], 4);
    expect(a.local[1]).toBe(b.local[1]);
    expect(a.seq[1]).not.toBe(b.seq[1]);
  });

  it('sequenceHashes continues a chain from a parent', () => {
    const { local, seq } = blockHashes(toks, 4);
    expect(sequenceHashes(local.slice(1), seq[0])).toEqual(seq.slice(1));
  });
});

describe('Xxh3Wasm (batched XXH3-64 for 9–128-byte inputs)', () => {
  const buffer = sanityBuffer(2367);
  const inRange = XXH3_VECTORS.filter(([len]) => len >= 9 && len <= 128);

  it('covers the published vectors of its length range', () => {
    expect(inRange.map(([len]) => len)).toEqual([12, 12, 24, 24, 48, 48, 80, 80]);
  });

  it.each(inRange)('len %i seed %s matches the published XXH3-64', (len, seed, hash) => {
    const w = Xxh3Wasm.create(seed)!;
    expect(w).toBeDefined();
    w.ensure(len);
    new Uint8Array(w.u32.buffer).set(buffer.subarray(0, len));
    expect(w.hash(0, len)).toBe(hash);
  });

  it('equals @node-rs/xxhash (seed 1337) for every length 9–128 at unaligned offsets', () => {
    const w = Xxh3Wasm.create(KV_HASH_SEED)!;
    const rng = new SeededRandom(5);
    const bytes = new Uint8Array(w.u32.buffer);
    for (let len = 9; len <= 128; len++) {
      for (let k = 0; k < 4; k++) {
        const at = 1 + k * 3;
        for (let i = 0; i < len; i++) bytes[at + i] = Math.floor(rng.next() * 256);
        expect(w.hash(at, len)).toBe(xxh3.xxh64(bytes.slice(at, at + len), KV_HASH_SEED));
      }
    }
  });
});

describe('BlockHasher (the router hot path)', () => {
  it('computes exactly what hashing.ts computes', () => {
    const toks = Array.from({ length: 16 * 20 + 5 }, (_, i) => (i * 7919 + 3) % 50000);
    const hasher = new BlockHasher(16);
    expect(hasher.backend).toBe('wasm');
    const ref = blockHashes(toks, 16);
    expect(hasher.both(toks)).toEqual(ref);
    expect(hasher.sequence(ref.local.slice(3), ref.seq[2])).toEqual(ref.seq.slice(3));
  });

  it.each([3, 4, 8, 16, 32, 33, 64])('block size %i: WASM (3–32 tokens) and per-block native paths agree with the reference', (bs) => {
    const rng = new SeededRandom(bs);
    // Token values that u32 encoding must handle: 0, 2^32 − 1, negatives and > 2^32 wrap like `>>> 0`.
    const toks = Array.from({ length: bs * 40 + bs - 1 }, (_, i) => (i % 97 === 0 ? -1 : i % 89 === 0 ? 2 ** 32 + 5 : i % 83 === 0 ? 0xffffffff : Math.floor(rng.next() * 200000)));
    const ref = blockHashes(toks, bs);
    const fast = new BlockHasher(bs);
    const native = new BlockHasher(bs, { native: true });
    expect(fast.backend).toBe(bs * 4 >= 9 && bs * 4 <= 128 ? 'wasm' : 'native');
    expect(native.backend).toBe('native');
    for (const h of [fast, native]) {
      expect(h.both(toks)).toEqual(ref);
      expect(h.local(Uint32Array.from(toks.map((t) => t >>> 0)))).toEqual(ref.local);
      expect(h.sequence(ref.local.slice(7), ref.seq[6])).toEqual(ref.seq.slice(7));
      expect(h.both(toks.slice(0, bs - 1))).toEqual({ local: [], seq: [] });
    }
  });

  it('grows its memory for long prompts (128k tokens) and stays correct afterwards', () => {
    const rng = new SeededRandom(11);
    const long = Array.from({ length: 131072 }, () => Math.floor(rng.next() * 150000));
    const hasher = new BlockHasher(16);
    const ref = blockHashes(long, 16);
    expect(hasher.both(long)).toEqual(ref);
    expect(hasher.both(long.slice(0, 64))).toEqual(blockHashes(long.slice(0, 64), 16));
  });
});
