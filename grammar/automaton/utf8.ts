/**
 * Code-point ranges as UTF-8 byte-range sequences, so the automaton runs over bytes and a
 * byte-level BPE token that ends in the middle of a character is matched byte by byte.
 * Each sequence is 1–4 inclusive byte ranges; every code point of [lo, hi] encodes to exactly
 * one sequence, and every byte string a sequence matches is a valid encoding of one of them.
 */

const MAX_FOR_LENGTH = [0x7f, 0x7ff, 0xffff];

function encode(cp: number): number[] {
  if (cp < 0x80) return [cp];
  if (cp < 0x800) return [0xc0 | (cp >> 6), 0x80 | (cp & 0x3f)];
  if (cp < 0x10000) return [0xe0 | (cp >> 12), 0x80 | ((cp >> 6) & 0x3f), 0x80 | (cp & 0x3f)];
  return [0xf0 | (cp >> 18), 0x80 | ((cp >> 12) & 0x3f), 0x80 | ((cp >> 6) & 0x3f), 0x80 | (cp & 0x3f)];
}

/**
 * Split [lo, hi] until each piece has one encoding length and its encodings differ only in
 * trailing bytes that sweep their full continuation range; such a piece is one byte-range
 * sequence (the first and last encodings, byte-wise).
 */
function split(lo: number, hi: number, out: Array<Array<[number, number]>>): void {
  if (lo > hi) return;
  for (const max of MAX_FOR_LENGTH) {
    if (lo <= max && hi > max) {
      split(lo, max, out);
      split(max + 1, hi, out);
      return;
    }
  }
  if (hi < 0x80) {
    out.push([[lo, hi]]);
    return;
  }
  for (let i = 1; i < 4; i++) {
    const m = (1 << (6 * i)) - 1;
    if ((lo & ~m) !== (hi & ~m)) {
      if ((lo & m) !== 0) {
        split(lo, lo | m, out);
        split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) !== m) {
        split(lo, (hi & ~m) - 1, out);
        split(hi & ~m, hi, out);
        return;
      }
    }
  }
  const a = encode(lo);
  const b = encode(hi);
  out.push(a.map((x, i) => [x, b[i]!] as [number, number]));
}

/** Byte-range sequences for normalized code-point ranges [lo0, hi0, lo1, hi1, ...] (no surrogates). */
export function utf8Sequences(ranges: readonly number[]): Array<Array<[number, number]>> {
  const out: Array<Array<[number, number]>> = [];
  for (let i = 0; i + 1 < ranges.length; i += 2) split(ranges[i]!, ranges[i + 1]!, out);
  return out;
}
