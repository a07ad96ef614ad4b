/**
 * The compact JSON lexicon every JSON front end shares: string characters (with the escapes
 * JSON allows), bounded numbers, and the generic "any JSON value" rules.
 *
 * Bounds, so that a model sampling at random can always finish:
 * - integers: at most 15 significant digits (`MAX_INT_DIGITS`), no leading zeros, no `-0`;
 * - numbers: that integer part, an optional fraction of 1..15 digits, an optional exponent
 *   `e`/`E`, sign, 1..2 digits (so every value is finite);
 * - no whitespace between tokens (compact output).
 * One "character" unit of a string is one code point: a raw character or one escape, and the
 * `\uXXXX` escape never names a surrogate, so `minLength`/`maxLength` (which count code points)
 * count exactly what the grammar counts.
 */
import { type Expr, alt, chars, literal, ref, repeat, seq } from '../ir.js';
import { normalizeRanges, subtractRanges } from './char-set.js';
import type { RuleSet } from './rule-set.js';

export const MAX_INT_DIGITS = 15;
export const MAX_FRACTION_DIGITS = 15;
export const MAX_EXPONENT_DIGITS = 2;

const cp = (c: string): number => c.codePointAt(0)!;

/** Code points that cannot appear raw inside a JSON string: controls, `"` and `\`. */
export const JSON_STRING_SPECIALS: readonly number[] = normalizeRanges([0x00, 0x1f, 0x22, 0x22, 0x5c, 0x5c]);

const HEX = chars([cp('0'), cp('9'), cp('A'), cp('F'), cp('a'), cp('f')]);
const HEX_NOT_D = chars([cp('0'), cp('9'), cp('A'), cp('C'), cp('E'), cp('F'), cp('a'), cp('c'), cp('e'), cp('f')]);

/** `\uXXXX` for any non-surrogate XXXX: first digit not d/D, or d/D followed by 0-7. */
const UNICODE_ESCAPE = seq(
  literal('\\u'),
  alt(seq(HEX_NOT_D, HEX), seq(chars([cp('D'), cp('D'), cp('d'), cp('d')]), chars([cp('0'), cp('7')]))),
  HEX,
  HEX,
);

/** One JSON string character: a raw code point other than the specials, or an escape. */
export const JSON_STRING_CHAR: Expr = alt(
  chars([...JSON_STRING_SPECIALS], true),
  seq(literal('\\'), chars(normalizeRanges([cp('"'), cp('"'), cp('/'), cp('/'), cp('\\'), cp('\\'), cp('b'), cp('b'), cp('f'), cp('f'), cp('n'), cp('n'), cp('r'), cp('r'), cp('t'), cp('t')]))),
  UNICODE_ESCAPE,
);

export const DIGIT_EXPR: Expr = chars([cp('0'), cp('9')]);
const NONZERO_DIGIT: Expr = chars([cp('1'), cp('9')]);

/** Non-negative integer without leading zeros, up to MAX_INT_DIGITS digits. */
export const UNSIGNED_INT: Expr = alt(literal('0'), seq(NONZERO_DIGIT, repeat(DIGIT_EXPR, 0, MAX_INT_DIGITS - 1)));
/** A fraction whose value is not zero-valued at the end: `.` digits ending in 1-9. */
export const NONZERO_FRACTION: Expr = seq(literal('.'), repeat(DIGIT_EXPR, 0, MAX_FRACTION_DIGITS - 1), NONZERO_DIGIT);
const FRACTION: Expr = seq(literal('.'), repeat(DIGIT_EXPR, 1, MAX_FRACTION_DIGITS));
const EXPONENT: Expr = seq(chars([cp('E'), cp('E'), cp('e'), cp('e')]), repeat(chars([cp('+'), cp('+'), cp('-'), cp('-')]), 0, 1), repeat(DIGIT_EXPR, 1, MAX_EXPONENT_DIGITS));

export const JSON_INTEGER: Expr = alt(literal('0'), seq(repeat(literal('-'), 0, 1), NONZERO_DIGIT, repeat(DIGIT_EXPR, 0, MAX_INT_DIGITS - 1)));
export const JSON_NUMBER: Expr = seq(repeat(literal('-'), 0, 1), UNSIGNED_INT, repeat(FRACTION, 0, 1), repeat(EXPONENT, 0, 1));

/** A JSON string literal for `text` (compact, as JSON.stringify writes it). */
export function jsonLiteral(value: unknown): Expr {
  return literal(JSON.stringify(value));
}

/** The generic JSON rules, created once per grammar on first use. */
export interface GenericJsonRules {
  value: string;
  object: string;
  string: string;
}

const genericCache = new WeakMap<RuleSet, GenericJsonRules>();

export function genericJson(rules: RuleSet): GenericJsonRules {
  const cached = genericCache.get(rules);
  if (cached) return cached;
  const value = rules.reserve('json-value');
  const object = rules.reserve('json-object');
  const array = rules.reserve('json-array');
  const string = rules.add('json-string', seq(literal('"'), repeat(JSON_STRING_CHAR, 0), literal('"')));
  const member = seq(ref(string), literal(':'), ref(value));
  rules.define(object, seq(literal('{'), repeat(seq(member, repeat(seq(literal(','), member), 0)), 0, 1), literal('}')));
  rules.define(array, seq(literal('['), repeat(seq(ref(value), repeat(seq(literal(','), ref(value)), 0)), 0, 1), literal(']')));
  rules.define(
    value,
    alt(ref(object), ref(array), ref(string), JSON_NUMBER, literal('true'), literal('false'), literal('null')),
  );
  const out = { value, object, string };
  genericCache.set(rules, out);
  return out;
}

/**
 * Rewrite an expression over string *content* code points into the JSON-escaped text that
 * encodes it inside a JSON string: a class loses `"`, `\` and controls and gains their escapes
 * (`\"`, `\\`, `\n`, ..., `\u00XX`); literals are escaped as JSON.stringify does. The language
 * after JSON.parse is exactly the input language.
 */
export function jsonEscapeContent(expr: Expr): Expr {
  switch (expr.kind) {
    case 'empty':
      return expr;
    case 'literal': {
      const text = new TextDecoder().decode(expr.bytes);
      return literal(JSON.stringify(text).slice(1, -1));
    }
    case 'chars': {
      const ranges = expr.negated ? subtractRanges([0, 0x10ffff], expr.ranges) : expr.ranges;
      const safe = subtractRanges(ranges, JSON_STRING_SPECIALS);
      const items: Expr[] = [];
      if (safe.length > 0) items.push(chars(safe));
      for (let i = 0; i < ranges.length; i += 2) {
        for (let c = ranges[i]!; c <= Math.min(ranges[i + 1]!, 0x5c); c++) {
          if (c <= 0x1f || c === 0x22 || c === 0x5c) items.push(literal(JSON.stringify(String.fromCodePoint(c)).slice(1, -1)));
        }
      }
      if (items.length === 0) return chars([]);
      return alt(...items);
    }
    case 'seq':
      return seq(...expr.items.map(jsonEscapeContent));
    case 'alt':
      return alt(...expr.items.map(jsonEscapeContent));
    case 'repeat':
      return repeat(jsonEscapeContent(expr.item), expr.min, expr.max);
    case 'ref':
      throw new Error('jsonEscapeContent: references are not expected inside a regex');
  }
}
