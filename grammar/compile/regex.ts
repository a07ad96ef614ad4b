/**
 * ECMAScript regular expressions (the subset that is a regular language) to IR over code
 * points, with `u`-flag semantics: `.` is any code point but a line terminator, `\d\w\s` are
 * ASCII/Unicode as in JS, `\uXXXX\uXXXX` surrogate pairs combine.
 *
 * Supported: literals, escapes (`\d \D \w \W \s \S \n \r \t \v \f \0 \xHH \uHHHH \u{H..}
 * \cX`, escaped punctuation), classes with ranges and negation, `.`, groups (capturing, named,
 * `(?:)`), `|`, quantifiers `* + ? {m} {m,} {m,n}` (lazy forms are the same language), and
 * anchors `^`/`$` only at the start/end of a top-level alternative.
 * Not regular, or not worth faking: backreferences, lookaround, `\b`/`\B`, `\p{..}`, flags.
 */
import { GrammarError } from '../contract.js';
import { type Expr, alt, chars, literal, repeat, seq } from '../ir.js';
import {
  ANY_CHAR,
  DIGIT,
  LINE_TERMINATORS,
  SPACE,
  WORD,
  complementRanges,
  normalizeRanges,
  subtractRanges,
  unionRanges,
} from './char-set.js';

/** One top-level alternative and whether it was anchored at each end. */
export interface RegexBranch {
  expr: Expr;
  anchoredStart: boolean;
  anchoredEnd: boolean;
}

/** The pattern as top-level branches (so a caller can decide what an unanchored end means). */
export function parseRegex(source: string, context = 'regex'): RegexBranch[] {
  return new RegexParser(source, context).parse();
}

/** The whole text must match (anchors at the ends are accepted and change nothing). */
export function compileRegexFull(source: string, context = 'regex'): Expr {
  return alt(...parseRegex(source, context).map((b) => b.expr));
}

/** ECMAScript's "any character" including line terminators, for unanchored ends. */
export const ANY_STRING: Expr = repeat(chars([...ANY_CHAR]), 0);

/**
 * Unanchored search semantics (JSON Schema `pattern`): a branch not anchored at the start may
 * be preceded by anything, one not anchored at the end followed by anything.
 */
export function compileRegexSearch(source: string, context: string): Expr {
  return alt(
    ...parseRegex(source, context).map((b) =>
      seq(...(b.anchoredStart ? [] : [ANY_STRING]), b.expr, ...(b.anchoredEnd ? [] : [ANY_STRING])),
    ),
  );
}

const cp = (c: string): number => c.codePointAt(0)!;

class RegexParser {
  private readonly cps: number[];
  private pos = 0;

  constructor(
    private readonly source: string,
    private readonly context: string,
  ) {
    this.cps = Array.from(source, (c) => c.codePointAt(0)!);
  }

  private invalid(what: string, at = this.pos): never {
    throw new GrammarError('invalid_regex', `${this.context}: ${what} at position ${at} in /${this.source}/`);
  }

  private unsupported(what: string, at = this.pos): never {
    throw new GrammarError('unsupported_feature', `${this.context}: ${what} are not supported (at position ${at} in /${this.source}/)`);
  }

  private peek(offset = 0): number | undefined {
    return this.cps[this.pos + offset];
  }

  private eat(c: string): boolean {
    if (this.peek() === cp(c)) {
      this.pos++;
      return true;
    }
    return false;
  }

  parse(): RegexBranch[] {
    const branches: RegexBranch[] = [];
    for (;;) {
      const anchoredStart = this.eat('^');
      const items = this.parseSequence(true);
      let anchoredEnd = false;
      if (this.peek() === cp('$')) {
        this.pos++;
        anchoredEnd = true;
        if (this.peek() !== undefined && this.peek() !== cp('|')) this.unsupported('anchors other than at the ends of the pattern', this.pos - 1);
      }
      branches.push({ expr: seq(...items), anchoredStart, anchoredEnd });
      if (this.peek() === undefined) break;
      if (this.eat('|')) continue;
      if (this.peek() === cp(')')) this.invalid('unmatched ")"');
      this.invalid('unexpected character');
    }
    return branches;
  }

  /** Terms until `|`, `)`, end, or (top level) a `$` that may end the branch. */
  private parseSequence(topLevel: boolean): Expr[] {
    const items: Expr[] = [];
    for (;;) {
      const c = this.peek();
      if (c === undefined || c === cp('|') || c === cp(')')) return items;
      if (c === cp('$')) {
        if (topLevel) return items;
        this.unsupported('anchors other than at the ends of the pattern');
      }
      if (c === cp('^')) this.unsupported('anchors other than at the ends of the pattern');
      const start = this.pos;
      const atom = this.parseAtom();
      items.push(this.parseQuantifiers(atom, start));
    }
  }

  private parseQuantifiers(atom: Expr, atomStart: number): Expr {
    let expr = atom;
    for (;;) {
      const c = this.peek();
      let min: number;
      let max: number;
      if (c === cp('*')) {
        this.pos++;
        [min, max] = [0, Infinity];
      } else if (c === cp('+')) {
        this.pos++;
        [min, max] = [1, Infinity];
      } else if (c === cp('?')) {
        this.pos++;
        [min, max] = [0, 1];
      } else if (c === cp('{')) {
        const q = this.tryBraces();
        if (!q) return expr;
        [min, max] = q;
      } else {
        return expr;
      }
      if (expr !== atom) this.invalid('nothing to repeat (a quantifier follows a quantifier)');
      this.eat('?'); // lazy: same language
      expr = repeat(atom, min, max);
      void atomStart;
    }
  }

  /** `{m}`, `{m,}`, `{m,n}`; a `{` that is not one of these is a literal (Annex B). */
  private tryBraces(): [number, number] | null {
    const m = /^\{(\d+)(,(\d*))?\}/.exec(String.fromCodePoint(...this.cps.slice(this.pos, this.pos + 24)));
    if (!m) return null;
    const at = this.pos;
    this.pos += m[0].length;
    const min = Number(m[1]);
    const max = m[2] === undefined ? min : m[3] === '' ? Infinity : Number(m[3]);
    if (max < min) this.invalid('numbers out of order in {} quantifier', at);
    if (min > 10000 || (max !== Infinity && max > 10000)) this.unsupported('repetition counts above 10000', at);
    return [min, max];
  }

  private parseAtom(): Expr {
    const start = this.pos;
    const c = this.cps[this.pos++]!;
    switch (c) {
      case cp('*'):
      case cp('+'):
      case cp('?'):
        this.invalid('nothing to repeat', start);
      // falls through (invalid throws)
      case cp('{'): {
        this.pos = start;
        if (this.tryBraces()) this.invalid('nothing to repeat', start);
        this.pos = start + 1;
        return literal('{');
      }
      case cp('.'):
        return chars(complementRanges(LINE_TERMINATORS));
      case cp('['):
        return chars(this.parseClass());
      case cp('('):
        return this.parseGroup(start);
      case cp('\\'):
        return this.parseEscapeAtom();
      default:
        return literal(String.fromCodePoint(c));
    }
  }

  private parseGroup(start: number): Expr {
    if (this.eat('?')) {
      if (this.eat(':')) {
        // non-capturing
      } else if (this.peek() === cp('=') || this.peek() === cp('!')) {
        this.unsupported('lookahead assertions', start);
      } else if (this.peek() === cp('<') && (this.peek(1) === cp('=') || this.peek(1) === cp('!'))) {
        this.unsupported('lookbehind assertions', start);
      } else if (this.eat('<')) {
        while (this.peek() !== undefined && this.peek() !== cp('>')) this.pos++;
        if (!this.eat('>')) this.invalid('unterminated group name', start);
      } else {
        this.unsupported('inline modifiers and other (?...) groups', start);
      }
    }
    const branches: Expr[] = [seq(...this.parseSequence(false))];
    while (this.eat('|')) branches.push(seq(...this.parseSequence(false)));
    if (!this.eat(')')) this.invalid('unterminated group', start);
    return alt(...branches);
  }

  /** An escape outside a class: a class escape or a single character. */
  private parseEscapeAtom(): Expr {
    const start = this.pos - 1;
    const c = this.peek();
    if (c === undefined) this.invalid('\\ at end of pattern', start);
    if (c === cp('b') || c === cp('B')) this.unsupported('word-boundary assertions (\\b, \\B)', start);
    if (c >= cp('1') && c <= cp('9')) this.unsupported('backreferences', start);
    if (c === cp('k')) this.unsupported('named backreferences', start);
    const set = this.tryClassEscape();
    if (set) return chars(set);
    return literal(String.fromCodePoint(this.parseCharEscape(start)));
  }

  /** `\d \D \w \W \s \S` (the backslash already consumed); advances past the letter. */
  private tryClassEscape(): number[] | null {
    const c = this.peek();
    const table: Record<number, number[]> = {
      [cp('d')]: [...DIGIT],
      [cp('D')]: complementRanges(DIGIT),
      [cp('w')]: [...WORD],
      [cp('W')]: complementRanges(WORD),
      [cp('s')]: [...SPACE],
      [cp('S')]: complementRanges(SPACE),
    };
    if (c !== undefined && table[c]) {
      this.pos++;
      return table[c]!;
    }
    if (c === cp('p') || c === cp('P')) this.unsupported('Unicode property escapes (\\p{...})', this.pos - 1);
    return null;
  }

  /** A single-character escape (the backslash consumed); returns the code point. */
  private parseCharEscape(start: number): number {
    const c = this.cps[this.pos++];
    if (c === undefined) this.invalid('\\ at end of pattern', start);
    switch (c) {
      case cp('n'):
        return 0x0a;
      case cp('r'):
        return 0x0d;
      case cp('t'):
        return 0x09;
      case cp('v'):
        return 0x0b;
      case cp('f'):
        return 0x0c;
      case cp('0'):
        if (this.peek() !== undefined && this.peek()! >= cp('0') && this.peek()! <= cp('9')) this.unsupported('octal escapes', start);
        return 0;
      case cp('c'): {
        const l = this.peek();
        if (l === undefined || !((l >= cp('a') && l <= cp('z')) || (l >= cp('A') && l <= cp('Z')))) this.invalid('invalid \\c escape', start);
        this.pos++;
        return l % 32;
      }
      case cp('x'):
        return this.hex(2, start);
      case cp('u'): {
        if (this.eat('{')) {
          let text = '';
          while (this.peek() !== undefined && this.peek() !== cp('}')) text += String.fromCodePoint(this.cps[this.pos++]!);
          if (!this.eat('}') || !/^[0-9a-fA-F]{1,6}$/.test(text) || parseInt(text, 16) > 0x10ffff) this.invalid('invalid \\u{...} escape', start);
          return this.notSurrogate(parseInt(text, 16), start);
        }
        const unit = this.hex(4, start);
        if (unit >= 0xd800 && unit <= 0xdbff && this.peek() === cp('\\') && this.peek(1) === cp('u')) {
          const save = this.pos;
          this.pos += 2;
          const low = this.hex(4, start);
          if (low >= 0xdc00 && low <= 0xdfff) return 0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00);
          this.pos = save;
        }
        return this.notSurrogate(unit, start);
      }
      default:
        if ((c >= cp('a') && c <= cp('z')) || (c >= cp('A') && c <= cp('Z')) || (c >= cp('0') && c <= cp('9'))) {
          this.invalid(`unknown escape \\${String.fromCodePoint(c)}`, start);
        }
        return c; // escaped punctuation stands for itself
    }
  }

  private notSurrogate(unit: number, start: number): number {
    if (unit >= 0xd800 && unit <= 0xdfff) this.unsupported('lone surrogate escapes', start);
    return unit;
  }

  private hex(digits: number, start: number): number {
    let text = '';
    for (let i = 0; i < digits; i++) {
      const c = this.peek();
      if (c === undefined || !/[0-9a-fA-F]/.test(String.fromCodePoint(c))) this.invalid('invalid hexadecimal escape', start);
      text += String.fromCodePoint(c);
      this.pos++;
    }
    return parseInt(text, 16);
  }

  /** After `[`: the class's code-point set (negation applied). */
  private parseClass(): number[] {
    const start = this.pos - 1;
    const negated = this.eat('^');
    let set: number[] = [];
    for (;;) {
      const c = this.peek();
      if (c === undefined) this.invalid('unterminated character class', start);
      if (c === cp(']')) {
        this.pos++;
        break;
      }
      const lo = this.parseClassAtom();
      if (this.peek() === cp('-') && this.peek(1) !== undefined && this.peek(1) !== cp(']')) {
        const dashAt = this.pos;
        this.pos++;
        const hi = this.parseClassAtom();
        if (typeof lo !== 'number' || typeof hi !== 'number') this.invalid('character class escape used as a range bound', dashAt);
        if (lo > hi) this.invalid('range out of order in character class', dashAt);
        set = unionRanges(set, [lo, hi]);
      } else {
        set = unionRanges(set, typeof lo === 'number' ? [lo, lo] : lo);
      }
    }
    return negated ? subtractRanges([...ANY_CHAR], set) : normalizeRanges(set);
  }

  /** One class member: a code point, or a set for `\d`-style escapes. */
  private parseClassAtom(): number | number[] {
    const c = this.cps[this.pos++]!;
    if (c !== cp('\\')) return c;
    const start = this.pos - 1;
    if (this.peek() === cp('b')) {
      this.pos++;
      return 0x08;
    }
    if (this.peek() === cp('-')) {
      this.pos++;
      return cp('-');
    }
    if (this.peek() !== undefined && this.peek()! >= cp('1') && this.peek()! <= cp('9')) this.unsupported('backreferences', start);
    const set = this.tryClassEscape();
    if (set) return set;
    return this.parseCharEscape(start);
  }
}
