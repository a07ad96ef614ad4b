/**
 * Numeric bounds as regular languages. `minimum`/`maximum` (and the exclusive forms) on
 * integers, and integer-valued bounds on numbers, compile to digit-range constructions:
 * [12, 345] = 1[2-9] | [2-9][0-9] | [1-2][0-9][0-9] | 3[0-3][0-9] | 34[0-5].
 *
 * A number x = ±(n + f) with integer part n and fraction f (f > 0 iff a fraction is written,
 * and a written fraction ends in 1-9 so it is never zero). For integer bounds L, U:
 *   x >= L  <=>  n >= L (f > 0) or n >= L (f = 0);   x > L  <=>  n >= L (f > 0) or n >= L+1 (f = 0)
 *   x <= U  <=>  n <= U-1 (f > 0) or n <= U (f = 0); x < U  <=>  n <= U-1 (both)
 * (for x >= 0; the negative half uses the same rules on -x with the bounds swapped).
 * Numbers with bounds carry no exponent, so the digit bound keeps them finite and exact.
 */
import { type Expr, alt, chars, literal, repeat, seq } from '../ir.js';
import { MAX_INT_DIGITS, NONZERO_FRACTION } from './json-lexical.js';

export const MAX_BOUNDED_INT = 10 ** MAX_INT_DIGITS - 1;

export interface Bound {
  value: number;
  exclusive: boolean;
}

const digitClass = (lo: number, hi: number): Expr => chars([0x30 + lo, 0x30 + hi]);

/** Equal-length digit strings lo <= hi: every string of that length between them. */
function sameLength(lo: string, hi: string): Expr {
  if (lo.length === 0) return seq();
  const a = Number(lo[0]);
  const b = Number(hi[0]);
  const restLen = lo.length - 1;
  if (a === b) return seq(literal(lo[0]!), sameLength(lo.slice(1), hi.slice(1)));
  const loRest = lo.slice(1);
  const hiRest = hi.slice(1);
  const nines = '9'.repeat(restLen);
  const zeros = '0'.repeat(restLen);
  const items: Expr[] = [];
  // Whole sub-ranges collapse: a..b with full tails is one class followed by free digits.
  const loFull = loRest === zeros;
  const hiFull = hiRest === nines;
  const firstMid = loFull ? a : a + 1;
  const lastMid = hiFull ? b : b - 1;
  if (!loFull) items.push(seq(literal(lo[0]!), sameLength(loRest, nines)));
  if (firstMid <= lastMid) items.push(seq(digitClass(firstMid, lastMid), repeat(digitClass(0, 9), restLen, restLen)));
  if (!hiFull) items.push(seq(literal(hi[0]!), sameLength(zeros, hiRest)));
  return alt(...items);
}

/** Decimal integers in [lo, hi] (0 <= lo <= hi), no leading zeros; null when empty. */
export function unsignedIntRange(lo: number, hi: number): Expr | null {
  hi = Math.min(hi, MAX_BOUNDED_INT);
  if (lo > hi) return null;
  const loStr = String(lo);
  const hiStr = String(hi);
  const items: Expr[] = [];
  for (let len = loStr.length; len <= hiStr.length; len++) {
    const from = len === loStr.length ? loStr : '1' + '0'.repeat(len - 1);
    const to = len === hiStr.length ? hiStr : '9'.repeat(len);
    items.push(sameLength(from, to));
  }
  return alt(...items);
}

interface Parts {
  /** integer-part range for values written without a fraction */
  whole: [number, number];
  /** integer-part range for values written with a (non-zero) fraction */
  frac: [number, number];
}

/** The (n, f) ranges for x = n + f >= 0 with bounds lower/upper (null = none). */
function nonNegativeParts(lower: Bound | null, upper: Bound | null): Parts {
  let wholeLo = 0;
  let fracLo = 0;
  let wholeHi = Infinity;
  let fracHi = Infinity;
  if (lower) {
    wholeLo = Math.max(wholeLo, lower.exclusive ? lower.value + 1 : lower.value);
    fracLo = Math.max(fracLo, lower.value);
  }
  if (upper) {
    wholeHi = upper.exclusive ? upper.value - 1 : upper.value;
    fracHi = upper.value - 1;
  }
  return { whole: [wholeLo, wholeHi], frac: [fracLo, fracHi] };
}

function partsExpr(parts: Parts, withFraction: boolean, positiveOnly: boolean): Expr[] {
  const items: Expr[] = [];
  const whole = unsignedIntRange(Math.max(parts.whole[0], positiveOnly ? 1 : 0), parts.whole[1]);
  if (whole) items.push(whole);
  if (withFraction) {
    const frac = unsignedIntRange(Math.max(parts.frac[0], 0), parts.frac[1]);
    if (frac) items.push(seq(frac, NONZERO_FRACTION));
  }
  return items;
}

/**
 * Numbers (or integers, withFraction false) x with integer bounds; null when no value within
 * the digit bound satisfies them. Bounds must already be integers.
 */
export function boundedNumber(lower: Bound | null, upper: Bound | null, withFraction: boolean): Expr | null {
  const items: Expr[] = [];
  // x >= 0 half: only if the upper bound admits some non-negative value.
  if (!upper || upper.value > 0 || (upper.value === 0 && !upper.exclusive)) {
    items.push(...partsExpr(nonNegativeParts(lower, upper), withFraction, false));
  }
  // x < 0 half: m = -x > 0, bounded by m <= -L (lower) and m >= -U (upper).
  if (!lower || lower.value < 0) {
    const mLower = upper ? { value: -upper.value, exclusive: upper.exclusive } : null;
    const mUpper = lower ? { value: -lower.value, exclusive: lower.exclusive } : null;
    const neg = partsExpr(nonNegativeParts(mLower, mUpper), withFraction, true);
    if (neg.length > 0) items.push(seq(literal('-'), alt(...neg)));
  }
  return items.length === 0 ? null : alt(...items);
}
