/**
 * The grammar IR: what every front end (JSON Schema, regex, choice, EBNF, tool-call formats)
 * compiles to, and what the automaton builder consumes. Rules reference each other by name, so
 * recursion (nested JSON, `$ref`) is a reference, never an expansion.
 *
 * Characters are Unicode code points; the automaton builder expands a class to UTF-8 byte
 * sequences, so a byte-level BPE token that ends mid-character is matched byte by byte.
 */
export type Expr =
  | { kind: 'empty' }
  /** An exact string, as UTF-8 bytes. */
  | { kind: 'literal'; bytes: Uint8Array }
  /**
   * One code point in (or, when negated, not in) the inclusive ranges, flattened as
   * [lo0, hi0, lo1, hi1, ...] and sorted. Negation is over U+0000..U+10FFFF minus surrogates.
   */
  | { kind: 'chars'; ranges: number[]; negated: boolean }
  | { kind: 'seq'; items: Expr[] }
  | { kind: 'alt'; items: Expr[] }
  /** `max` may be Infinity. */
  | { kind: 'repeat'; item: Expr; min: number; max: number }
  | { kind: 'ref'; name: string };

export interface Grammar {
  /** Name of the start rule. */
  root: string;
  rules: Map<string, Expr>;
}

const encoder = new TextEncoder();

export const empty: Expr = { kind: 'empty' };
export function literal(text: string): Expr {
  return { kind: 'literal', bytes: encoder.encode(text) };
}
export function chars(ranges: number[], negated = false): Expr {
  return { kind: 'chars', ranges, negated };
}
export function seq(...items: Expr[]): Expr {
  return items.length === 1 ? items[0]! : { kind: 'seq', items };
}
export function alt(...items: Expr[]): Expr {
  return items.length === 1 ? items[0]! : { kind: 'alt', items };
}
export function repeat(item: Expr, min: number, max = Infinity): Expr {
  return { kind: 'repeat', item, min, max };
}
export function ref(name: string): Expr {
  return { kind: 'ref', name };
}
