/**
 * `BlockHasher`: the same hashes as hashing.ts (`blockHashes`), computed for the router's hot
 * path. For block sizes of 3–32 tokens (12–128-byte inputs, the default 16 included) a whole
 * prompt is hashed in two WebAssembly calls (`Xxh3Wasm`: local hashes, then the chain); other
 * sizes, or a runtime without WebAssembly, use @node-rs/xxhash one block per call with reusable
 * scratch buffers. Both give identical results (test/router/hashing.test.ts).
 *
 * One hasher per router instance: results are copied out as bigints, so its scratch memory is
 * free again as soon as a call returns.
 */
import { xxh3 } from '@node-rs/xxhash';
import { KV_HASH_SEED, loraLocalHash } from './hashing.js';
import { Xxh3Wasm, XXH3_WASM_MAX_BYTES, XXH3_WASM_MIN_BYTES } from './xxh3-wasm.js';

export class BlockHasher {
  private readonly tokenWords: Uint32Array;
  private readonly tokenBytes: Uint8Array;
  private readonly pair = new BigUint64Array(2);
  private readonly pairBytes = new Uint8Array(this.pair.buffer);
  private readonly wasm: Xxh3Wasm | undefined;

  constructor(readonly blockSize: number, options: { native?: boolean } = {}) {
    this.tokenWords = new Uint32Array(blockSize);
    this.tokenBytes = new Uint8Array(this.tokenWords.buffer);
    const bytes = blockSize * 4;
    const fits = bytes >= XXH3_WASM_MIN_BYTES && bytes <= XXH3_WASM_MAX_BYTES;
    this.wasm = fits && options.native !== true ? Xxh3Wasm.create(KV_HASH_SEED) : undefined;
  }

  /** Which implementation hashes: 'wasm' (batched) or 'native' (@node-rs/xxhash per block). */
  get backend(): 'wasm' | 'native' {
    return this.wasm === undefined ? 'native' : 'wasm';
  }

  /** Local hashes of the full blocks of `tokens`, keyed by adapter `loraId` when given (hashing.ts loraLocalHash). */
  local(tokens: ArrayLike<number>, loraId?: number): bigint[] {
    if (loraId !== undefined) return this.local(tokens).map((h) => loraLocalHash(h, loraId));
    const n = Math.floor(tokens.length / this.blockSize);
    if (this.wasm === undefined) return this.localNative(tokens, n);
    const localAt = this.hashLocal(tokens, n);
    return readU64(this.wasm.u64, localAt >>> 3, n);
  }

  /** Sequence hashes for `localHashes`, optionally continuing from `parent`. */
  sequence(localHashes: readonly bigint[], parent?: bigint): bigint[] {
    const w = this.wasm;
    if (w === undefined) return this.sequenceNative(localHashes, parent);
    const n = localHashes.length;
    w.ensure(n * 16);
    const u64 = w.u64;
    for (let i = 0; i < n; i++) u64[i] = localHashes[i]!;
    w.seq(0, n, n * 8, parent);
    return readU64(u64, n, n);
  }

  both(tokens: ArrayLike<number>, loraId?: number): { local: bigint[]; seq: bigint[] } {
    if (loraId !== undefined) {
      const local = this.local(tokens, loraId);
      return { local, seq: this.sequence(local) };
    }
    const w = this.wasm;
    if (w === undefined) {
      const local = this.localNative(tokens, Math.floor(tokens.length / this.blockSize));
      return { local, seq: this.sequenceNative(local) };
    }
    const n = Math.floor(tokens.length / this.blockSize);
    const localAt = this.hashLocal(tokens, n);
    const seqAt = localAt + n * 8;
    w.seq(localAt, n, seqAt, undefined);
    return { local: readU64(w.u64, localAt >>> 3, n), seq: readU64(w.u64, seqAt >>> 3, n) };
  }

  /** Copy tokens (as u32, like `>>> 0`) into WASM memory and hash `n` blocks; returns the byte offset of the hashes. */
  private hashLocal(tokens: ArrayLike<number>, n: number): number {
    const w = this.wasm!;
    // The partial tail block is copied too (one bulk copy beats a per-token loop) but not hashed.
    const localAt = (tokens.length * 4 + 7) & ~7;
    w.ensure(localAt + n * 16);
    w.u32.set(tokens);
    w.local(0, n, this.blockSize * 4, localAt);
    return localAt;
  }

  private localNative(tokens: ArrayLike<number>, n: number): bigint[] {
    const bs = this.blockSize;
    const out: bigint[] = new Array(n);
    const words = this.tokenWords;
    for (let b = 0; b < n; b++) {
      const base = b * bs;
      for (let i = 0; i < bs; i++) words[i] = tokens[base + i]! >>> 0;
      out[b] = xxh3.xxh64(this.tokenBytes, KV_HASH_SEED);
    }
    return out;
  }

  private sequenceNative(localHashes: readonly bigint[], parent?: bigint): bigint[] {
    const out: bigint[] = new Array(localHashes.length);
    const pair = this.pair;
    let prev = parent;
    for (let i = 0; i < localHashes.length; i++) {
      const local = localHashes[i]!;
      if (prev === undefined) {
        prev = local;
      } else {
        pair[0] = prev;
        pair[1] = local;
        prev = xxh3.xxh64(this.pairBytes, KV_HASH_SEED);
      }
      out[i] = prev;
    }
    return out;
  }
}

function readU64(u64: BigUint64Array, at: number, n: number): bigint[] {
  const out: bigint[] = new Array(n);
  for (let i = 0; i < n; i++) out[i] = u64[at + i]!;
  return out;
}
