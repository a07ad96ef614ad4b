/**
 * u64 block hashes between their wire form (decimal strings, proto/wire.ts) and the index's
 * form (two u32 halves in typed arrays). The apply path parses every hash of every KV event,
 * so this replaces `BigInt(text)`: no allocation, no exceptions.
 */

const TWO_32 = 4294967296;
const INV_TWO_32 = 1 / TWO_32;
// 10^15 = K_HI·2^32 + K_LO (10^15 = 2^15·5^15 is exact in a double, so is the split).
const K_HI = Math.floor(1e15 * INV_TWO_32);
const K_LO = 1e15 - K_HI * TWO_32;

/**
 * Parses into `out[at]` = high half, `out[at + 1]` = low half (as int32 bit patterns: the
 * index's key form, see u64-table.ts). A class so that the tables it feeds can be per owner.
 */
export class U64Parser {
  /**
   * Parse a u64 decimal (digits only, 1–20 of them, value ≤ 2^64 − 1; leading zeros allowed).
   * False for anything else, leaving `out` unchanged.
   *
   * The digits are read as three independent small-integer chunks (value = c2·10^15 + c1·10^8
   * + c0) and combined in exact double arithmetic: a per-digit carry into 32-bit halves would
   * put a division on every digit's dependency chain (≈ 4× slower).
   */
  parse(text: string, out: Int32Array, at: number): boolean {
    if (typeof text !== 'string') return false;
    const n = text.length;
    if (n === 0 || n > 20) return false;
    const s0 = n > 8 ? n - 8 : 0;
    const s1 = n > 15 ? n - 15 : 0;
    let c2 = 0;
    let c1 = 0;
    let c0 = 0;
    for (let i = 0; i < s1; i++) {
      const d = text.charCodeAt(i) - 48;
      if (d >>> 0 > 9) return false;
      c2 = c2 * 10 + d;
    }
    for (let i = s1; i < s0; i++) {
      const d = text.charCodeAt(i) - 48;
      if (d >>> 0 > 9) return false;
      c1 = c1 * 10 + d;
    }
    for (let i = s0; i < n; i++) {
      const d = text.charCodeAt(i) - 48;
      if (d >>> 0 > 9) return false;
      c0 = c0 * 10 + d;
    }
    // c1·10^8 + c0 < 10^15 < 2^53 and c2 < 10^5: every product and sum below is exact.
    const m = c1 * 1e8 + c0;
    const mHi = Math.floor(m * INV_TWO_32);
    let lo = m - mHi * TWO_32 + c2 * K_LO;
    const carry = Math.floor(lo * INV_TWO_32);
    lo -= carry * TWO_32;
    const hi = mHi + c2 * K_HI + carry;
    if (hi >= TWO_32) return false;
    out[at] = hi;
    out[at + 1] = lo;
    return true;
  }
}

const TEN_10 = 1e10;

/** Canonical decimal string of the u64 `hi`·2^32 + `lo` (halves as unsigned u32). */
export function formatU64(hi: number, lo: number): string {
  hi >>>= 0;
  lo >>>= 0;
  if (hi === 0) return lo.toString();
  // Long division by 10^10 over 16-bit limbs: every intermediate stays below 2^53.
  let r = 0;
  let q = 0;
  for (const limb of [hi >>> 16, hi & 0xffff, lo >>> 16, lo & 0xffff]) {
    const cur = r * 65536 + limb;
    const d = Math.floor(cur / TEN_10);
    r = cur - d * TEN_10;
    q = q * 65536 + d;
  }
  const low = r.toString();
  return q === 0 ? low : q.toString() + '0000000000'.slice(low.length) + low;
}

/** The u64 as a bigint (cold paths: dumps, tests). */
export function u64ToBigint(hi: number, lo: number): bigint {
  return (BigInt(hi >>> 0) << 32n) | BigInt(lo >>> 0);
}
