/**
 * Code-point sets as sorted, disjoint, inclusive ranges flattened [lo0, hi0, lo1, hi1, ...]:
 * the form `chars` takes in the IR. Surrogates (U+D800..U+DFFF) are never members, because
 * they are not characters a UTF-8 output can contain.
 */
export const MAX_CODE_POINT = 0x10ffff;
const SURROGATE_LO = 0xd800;
const SURROGATE_HI = 0xdfff;

/** Sort, merge overlapping/adjacent ranges, and drop surrogates. */
export function normalizeRanges(ranges: readonly number[]): number[] {
  const pairs: Array<[number, number]> = [];
  for (let i = 0; i + 1 < ranges.length; i += 2) {
    const lo = ranges[i]!;
    const hi = ranges[i + 1]!;
    if (lo > hi) continue;
    // Split around the surrogate block.
    if (lo < SURROGATE_LO) pairs.push([lo, Math.min(hi, SURROGATE_LO - 1)]);
    if (hi > SURROGATE_HI) pairs.push([Math.max(lo, SURROGATE_HI + 1), hi]);
  }
  pairs.sort((a, b) => a[0] - b[0]);
  const out: number[] = [];
  for (const [lo, hi] of pairs) {
    const n = out.length;
    if (n > 0 && lo <= out[n - 1]! + 1) {
      out[n - 1] = Math.max(out[n - 1]!, hi);
    } else {
      out.push(lo, hi);
    }
  }
  return out;
}

export function unionRanges(a: readonly number[], b: readonly number[]): number[] {
  return normalizeRanges([...a, ...b]);
}

/** Every character (U+0000..U+10FFFF minus surrogates) not in `set`. */
export function complementRanges(set: readonly number[]): number[] {
  const norm = normalizeRanges(set);
  const out: number[] = [];
  let next = 0;
  for (let i = 0; i < norm.length; i += 2) {
    if (norm[i]! > next) out.push(next, norm[i]! - 1);
    next = norm[i + 1]! + 1;
  }
  if (next <= MAX_CODE_POINT) out.push(next, MAX_CODE_POINT);
  return normalizeRanges(out);
}

export function subtractRanges(a: readonly number[], b: readonly number[]): number[] {
  return intersectRanges(a, complementRanges(b));
}

export function intersectRanges(a: readonly number[], b: readonly number[]): number[] {
  const x = normalizeRanges(a);
  const y = normalizeRanges(b);
  const out: number[] = [];
  let i = 0;
  let j = 0;
  while (i < x.length && j < y.length) {
    const lo = Math.max(x[i]!, y[j]!);
    const hi = Math.min(x[i + 1]!, y[j + 1]!);
    if (lo <= hi) out.push(lo, hi);
    if (x[i + 1]! < y[j + 1]!) i += 2;
    else j += 2;
  }
  return out;
}

export function rangesContain(set: readonly number[], cp: number): boolean {
  for (let i = 0; i < set.length; i += 2) {
    if (cp >= set[i]! && cp <= set[i + 1]!) return true;
  }
  return false;
}

/** ECMAScript `\d`, `\w`, `\s` (with the `u` flag, no `i`). */
export const DIGIT: readonly number[] = [0x30, 0x39];
export const WORD: readonly number[] = normalizeRanges([0x30, 0x39, 0x41, 0x5a, 0x5f, 0x5f, 0x61, 0x7a]);
export const SPACE: readonly number[] = normalizeRanges([
  0x09, 0x0d, 0x20, 0x20, 0xa0, 0xa0, 0x1680, 0x1680, 0x2000, 0x200a, 0x2028, 0x2029, 0x202f, 0x202f, 0x205f,
  0x205f, 0x3000, 0x3000, 0xfeff, 0xfeff,
]);
/** What ECMAScript's `.` excludes: the line terminators. */
export const LINE_TERMINATORS: readonly number[] = normalizeRanges([0x0a, 0x0a, 0x0d, 0x0d, 0x2028, 0x2029]);
export const ANY_CHAR: readonly number[] = complementRanges([]);
