/**
 * XXH3-64 with a fixed seed for 9–128-byte inputs, batched in WebAssembly: a 4k-token prompt's
 * 256 local hashes and 256 chained sequence hashes are two calls instead of 512 N-API
 * crossings (@node-rs/xxhash costs ≈ 0.1–0.25 µs per call; the hashing itself is ≈ 20 ns).
 *
 * Only the two short-input paths of XXH3 are implemented, exactly as in xxHash's xxhash.h
 * (XXH3_len_9to16_64b, XXH3_len_17to128_64b, XXH3_avalanche, XXH3_mul128_fold64); the default
 * secret's first 128 bytes are below. For seeded short inputs XXH3 adds the seed to the default
 * secret, so the module is built for one seed with the seeded secret words folded into
 * constants. Block sizes outside 3–32 tokens fall back to @node-rs/xxhash (see BlockHasher).
 * Checked against xxHash's published vectors and @node-rs/xxhash in test/router/hashing.test.ts,
 * and self-checked once when a batch is created.
 */
import { xxh3 } from '@node-rs/xxhash';
import {
  add32, add64, and64, call, encodeModule, eqz32, extendU32, get, gtU32, I32, I64, i32c, i64c, leU32, load64, loopUntil,
  mul64, or64, ret, rotl64, select64, set, shl64, shrU64, store64, sub32, when, xor64, type Code, type FuncDef,
} from './wasm-encoder.js';

/** XXH3's kSecret, bytes 0–127 (all the 9–128-byte paths read). */
const K_SECRET = Uint8Array.from([
  0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
  0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
  0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
  0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
  0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
  0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
  0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
  0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
]);
const PRIME64_1 = 0x9e3779b185ebca87n;
const AVALANCHE = 0x165667919e3779f9n;
const M64 = (1n << 64n) - 1n;
const M32 = 0xffffffffn;

const secret64 = (offset: number): bigint => new DataView(K_SECRET.buffer).getBigUint64(offset, true);

// Function indices in the module.
const FOLD = 0;
const AVAL = 1;
const H9TO16 = 2;
const H17TO128 = 3;
const HASH_AT = 4;

/** The module's functions for `seed`, in WAT-like folded form. */
function functions(seed: bigint): FuncDef[] {
  const lo = (x: Code) => and64(x, i64c(M32));
  const hi = (x: Code) => shrU64(x, i64c(32n));
  // XXH3_mul128_fold64: low ^ high half of the 128-bit product, from four 32×32 products.
  const fold: FuncDef = {
    params: [I64, I64], results: [I64], locals: [I64, I64, I64], // 2 lolo, 3 hilo, 4 cross
    body: [
      set(2, mul64(lo(get(0)), lo(get(1)))),
      set(3, mul64(hi(get(0)), lo(get(1)))),
      set(4, add64(add64(hi(get(2)), lo(get(3))), mul64(lo(get(0)), hi(get(1))))),
      xor64(or64(shl64(get(4), i64c(32n)), lo(get(2))), add64(add64(hi(get(3)), hi(get(4))), mul64(hi(get(0)), hi(get(1))))),
    ],
  };
  const avalanche: FuncDef = {
    params: [I64], results: [I64], locals: [],
    body: [
      set(0, xor64(get(0), shrU64(get(0), i64c(37n)))),
      set(0, mul64(get(0), i64c(AVALANCHE))),
      xor64(get(0), shrU64(get(0), i64c(32n))),
    ],
  };
  // XXH3_len_9to16_64b on (first 8 bytes, last 8 bytes, length).
  const bitflip1 = ((secret64(24) ^ secret64(32)) + seed) & M64;
  const bitflip2 = ((secret64(40) ^ secret64(48)) - seed) & M64;
  const bswap = (x: number, tmp: number): Code[] => [
    set(tmp, or64(shl64(and64(get(x), i64c(0x00ff00ff00ff00ffn)), i64c(8n)), and64(shrU64(get(x), i64c(8n)), i64c(0x00ff00ff00ff00ffn)))),
    set(tmp, or64(shl64(and64(get(tmp), i64c(0x0000ffff0000ffffn)), i64c(16n)), and64(shrU64(get(tmp), i64c(16n)), i64c(0x0000ffff0000ffffn)))),
    set(tmp, rotl64(get(tmp), i64c(32n))),
  ];
  const h9to16: FuncDef = {
    params: [I64, I64, I64], results: [I64], locals: [I64], // 3 swapped
    body: [
      set(0, xor64(get(0), i64c(bitflip1))),
      set(1, xor64(get(1), i64c(bitflip2))),
      ...bswap(0, 3),
      call(AVAL, add64(add64(add64(get(2), get(3)), get(1)), call(FOLD, get(0), get(1)))),
    ],
  };
  // XXH3_len_17to128_64b on (pointer, length): mix16B pairs from both ends, seed folded in.
  const p = get(0);
  const len = get(1);
  const mix = (addr: Code, offset: number, secretOffset: number): Code =>
    call(FOLD,
      xor64(load64(addr, offset), i64c((secret64(secretOffset) + seed) & M64)),
      xor64(load64(addr, offset + 8), i64c((secret64(secretOffset + 8) - seed) & M64)));
  const fromEnd = (back: number): Code => add32(p, sub32(len, i32c(back)));
  const acc = (m: Code): Code => set(2, add64(get(2), m));
  const h17to128: FuncDef = {
    params: [I32, I32], results: [I64], locals: [I64], // 2 acc
    body: [
      set(2, mul64(extendU32(len), i64c(PRIME64_1))),
      when(gtU32(len, i32c(32)), [
        when(gtU32(len, i32c(64)), [
          when(gtU32(len, i32c(96)), [acc(mix(p, 48, 96)), acc(mix(fromEnd(64), 0, 112))]),
          acc(mix(p, 32, 64)), acc(mix(fromEnd(48), 0, 80)),
        ]),
        acc(mix(p, 16, 32)), acc(mix(fromEnd(32), 0, 48)),
      ]),
      acc(mix(p, 0, 0)), acc(mix(fromEnd(16), 0, 16)),
      call(AVAL, get(2)),
    ],
  };
  const hashAt: FuncDef = {
    params: [I32, I32], results: [I64], locals: [],
    body: [select64(leU32(len, i32c(16)), call(H9TO16, load64(p), load64(fromEnd(8)), extendU32(len)), call(H17TO128, p, len))],
    export: 'hash',
  };
  // local(src, n, len, dst): n consecutive len-byte inputs → n u64 at dst.
  const local: FuncDef = {
    params: [I32, I32, I32, I32], results: [], locals: [],
    body: [loopUntil(eqz32(get(1)), [
      store64(get(3), call(HASH_AT, get(0), get(2))),
      set(0, add32(get(0), get(2))),
      set(3, add32(get(3), i32c(8))),
      set(1, sub32(get(1), i32c(1))),
    ])],
    export: 'local',
  };
  // seq(src, n, dst, hasParent, parent): chained sequence hashes of n local hashes at src.
  const step = (v: Code): Code[] => [
    set(4, v),
    store64(get(2), get(4)),
    set(0, add32(get(0), i32c(8))),
    set(2, add32(get(2), i32c(8))),
    set(1, sub32(get(1), i32c(1))),
  ];
  const seq: FuncDef = {
    params: [I32, I32, I32, I32, I64], results: [], locals: [],
    body: [
      when(eqz32(get(3)), [when(eqz32(get(1)), [ret()]), ...step(load64(get(0)))]),
      loopUntil(eqz32(get(1)), step(call(H9TO16, get(4), load64(get(0)), i64c(16n)))),
    ],
    export: 'seq',
  };
  return [fold, avalanche, h9to16, h17to128, hashAt, local, seq];
}

interface Exports {
  hash(ptr: number, len: number): bigint;
  local(src: number, n: number, len: number, dst: number): void;
  seq(src: number, n: number, dst: number, hasParent: number, parent: bigint): void;
}

// The WebAssembly JS API, typed locally: tsconfig's lib has no WebAssembly declarations.
interface WasmMemory {
  readonly buffer: ArrayBuffer;
  grow(pages: number): number;
}
interface WasmApi {
  Module: new (bytes: Uint8Array) => object;
  Instance: new (module: object, imports: object) => { exports: unknown };
  Memory: new (descriptor: { initial: number }) => WasmMemory;
}
const wasmApi = (globalThis as { WebAssembly?: WasmApi }).WebAssembly;

const modules = new Map<bigint, object>();

/** Smallest and largest input the WASM paths cover. */
export const XXH3_WASM_MIN_BYTES = 9;
export const XXH3_WASM_MAX_BYTES = 128;

/**
 * One instance with its own memory. Callers write inputs through `u32`/`u64`, call `local`/
 * `seq` with byte offsets, and read results through `u64`. Views are replaced on growth.
 */
export class Xxh3Wasm {
  u32!: Uint32Array;
  u64!: BigUint64Array;
  private readonly memory: WasmMemory;
  private readonly fns: Exports;

  private constructor(readonly seed: bigint, api: WasmApi) {
    let mod = modules.get(seed);
    if (mod === undefined) modules.set(seed, (mod = new api.Module(encodeModule(functions(seed)))));
    this.memory = new api.Memory({ initial: 1 });
    this.fns = new api.Instance(mod, { env: { mem: this.memory } }).exports as Exports;
    this.refreshViews();
  }

  /**
   * A verified instance, or undefined where WebAssembly is unavailable (e.g. --jitless) or
   * disagrees with @node-rs/xxhash on a probe of every supported length (never expected).
   */
  static create(seed: bigint): Xxh3Wasm | undefined {
    if (wasmApi === undefined) return undefined;
    try {
      const h = new Xxh3Wasm(seed, wasmApi);
      return h.selfCheck() ? h : undefined;
    } catch {
      return undefined;
    }
  }

  /** Make sure `bytes` bytes of memory exist. */
  ensure(bytes: number): void {
    const have = this.memory.buffer.byteLength;
    if (bytes <= have) return;
    this.memory.grow(Math.ceil((bytes - have) / 65536));
    this.refreshViews();
  }

  /** XXH3-64 of the `len` bytes at `ptr` (9 ≤ len ≤ 128). */
  hash(ptr: number, len: number): bigint {
    return BigInt.asUintN(64, this.fns.hash(ptr, len));
  }

  /** `n` consecutive `len`-byte inputs at byte `src` → `n` hashes at byte `dst` (8-aligned). */
  local(src: number, n: number, len: number, dst: number): void {
    this.fns.local(src, n, len, dst);
  }

  /** Chained sequence hashes of the `n` local hashes at `src` → `dst`, after `parent` if given. */
  seq(src: number, n: number, dst: number, parent: bigint | undefined): void {
    this.fns.seq(src, n, dst, parent === undefined ? 0 : 1, parent === undefined ? 0n : BigInt.asIntN(64, parent));
  }

  private refreshViews(): void {
    this.u32 = new Uint32Array(this.memory.buffer);
    this.u64 = new BigUint64Array(this.memory.buffer);
  }

  private selfCheck(): boolean {
    const bytes = new Uint8Array(this.memory.buffer, 0, XXH3_WASM_MAX_BYTES);
    for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 167 + 13) & 0xff;
    for (let len = XXH3_WASM_MIN_BYTES; len <= XXH3_WASM_MAX_BYTES; len++) {
      if (this.hash(0, len) !== xxh3.xxh64(bytes.subarray(0, len), this.seed)) return false;
    }
    return true;
  }
}
