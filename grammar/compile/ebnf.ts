/**
 * GBNF-style EBNF (llama.cpp's grammar format) to IR. A rule is `name ::= expr`; its body runs
 * until the next `name ::=` (so bodies may span lines freely). Expressions: "strings" with
 * escapes (\n \r \t \\ \" \' \[ \] \xHH \uHHHH \UHHHHHHHH), 'strings', char classes `[a-z]`
 * `[^"\\]`, `.` (any character), rule references, `( ... )`, `|`, postfix `* + ?`, `{m}`,
 * `{m,}`, `{m,n}`; `#` comments to end of line. Rule names are letters, digits, `-`, `_`.
 * The start rule is `root`.
 */
import { GrammarError } from '../contract.js';
import { type Expr, alt, chars, literal, ref, repeat, seq } from '../ir.js';
import { ANY_CHAR, normalizeRanges, subtractRanges } from './char-set.js';
import type { Grammar } from '../ir.js';

const cp = (c: string): number => c.codePointAt(0)!;
const isNameChar = (c: number | undefined): boolean =>
  c !== undefined && ((c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || c === 0x2d || c === 0x5f);

export function compileEbnf(source: string): Grammar {
  return new EbnfParser(source).parse();
}

class EbnfParser {
  private readonly cps: number[];
  private pos = 0;
  /** code-point offsets where each line starts, for error messages */
  private readonly lineStarts: number[] = [0];
  private readonly refs: Array<{ name: string; at: number }> = [];

  constructor(source: string) {
    this.cps = Array.from(source, (c) => c.codePointAt(0)!);
    this.cps.forEach((c, i) => {
      if (c === 0x0a) this.lineStarts.push(i + 1);
    });
  }

  private line(at: number): number {
    let line = 0;
    while (line + 1 < this.lineStarts.length && this.lineStarts[line + 1]! <= at) line++;
    return line + 1;
  }

  private fail(what: string, at = this.pos): never {
    throw new GrammarError('invalid_grammar', `grammar: ${what} (line ${this.line(at)})`);
  }

  parse(): Grammar {
    const rules = new Map<string, Expr>();
    const definedAt = new Map<string, number>();
    this.skipSpace();
    while (this.pos < this.cps.length) {
      const at = this.pos;
      const name = this.parseName();
      if (name === null) this.fail('expected a rule name');
      this.skipSpace();
      if (!this.eatText('::=')) this.fail(`expected "::=" after rule name "${name}"`);
      if (definedAt.has(name)) this.fail(`rule "${name}" is defined twice`, at);
      definedAt.set(name, at);
      rules.set(name, this.parseAlternatives(at));
      this.skipSpace();
      if (this.pos < this.cps.length && this.cps[this.pos] === cp(')')) this.fail('unmatched ")"');
    }
    if (!rules.has('root')) throw new GrammarError('invalid_grammar', 'grammar: no "root" rule (the start rule must be named root)');
    for (const r of this.refs) {
      if (!rules.has(r.name)) this.fail(`rule "${r.name}" is not defined`, r.at);
    }
    return { root: 'root', rules };
  }

  private skipSpace(): void {
    for (;;) {
      const c = this.cps[this.pos];
      if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) this.pos++;
      else if (c === cp('#')) {
        while (this.pos < this.cps.length && this.cps[this.pos] !== 0x0a) this.pos++;
      } else return;
    }
  }

  private eatText(text: string): boolean {
    const t = Array.from(text, (c) => c.codePointAt(0)!);
    if (t.every((c, i) => this.cps[this.pos + i] === c)) {
      this.pos += t.length;
      return true;
    }
    return false;
  }

  private parseName(): string | null {
    const start = this.pos;
    while (isNameChar(this.cps[this.pos])) this.pos++;
    return this.pos > start ? String.fromCodePoint(...this.cps.slice(start, this.pos)) : null;
  }

  /** Is the text at pos the start of the next rule (`name ::=`)? */
  private atRuleStart(): boolean {
    const save = this.pos;
    const name = this.parseName();
    this.skipSpace();
    const yes = name !== null && this.eatText('::=');
    this.pos = save;
    return yes;
  }

  private parseAlternatives(ruleAt: number): Expr {
    const items: Expr[] = [this.parseSequence(ruleAt)];
    for (;;) {
      this.skipSpace();
      if (this.cps[this.pos] !== cp('|')) break;
      this.pos++;
      items.push(this.parseSequence(ruleAt));
    }
    return alt(...items);
  }

  private parseSequence(ruleAt: number): Expr {
    const items: Expr[] = [];
    for (;;) {
      this.skipSpace();
      const c = this.cps[this.pos];
      if (c === undefined || c === cp('|') || c === cp(')')) break;
      if (isNameChar(c) && this.atRuleStart()) break;
      const atom = this.parseAtom(ruleAt);
      items.push(this.parsePostfix(atom));
    }
    return seq(...items);
  }

  private parsePostfix(atom: Expr): Expr {
    let expr = atom;
    for (;;) {
      const c = this.cps[this.pos];
      if (c === cp('*')) expr = repeat(expr, 0);
      else if (c === cp('+')) expr = repeat(expr, 1);
      else if (c === cp('?')) expr = repeat(expr, 0, 1);
      else if (c === cp('{')) {
        const at = this.pos;
        const m = /^\{\s*(\d+)\s*(,\s*(\d*)\s*)?\}/.exec(String.fromCodePoint(...this.cps.slice(this.pos, this.pos + 32)));
        if (!m) this.fail('malformed {m,n} repetition', at);
        const min = Number(m[1]);
        const max = m[2] === undefined ? min : m[3] === '' ? Infinity : Number(m[3]);
        if (max < min) this.fail(`repetition {${min},${max}} has max below min`, at);
        this.pos += Array.from(m[0]).length;
        expr = repeat(expr, min, max);
        continue;
      } else return expr;
      this.pos++;
    }
  }

  private parseAtom(ruleAt: number): Expr {
    const at = this.pos;
    const c = this.cps[this.pos]!;
    if (c === cp('"') || c === cp("'")) return this.parseString(c);
    if (c === cp('[')) return this.parseClass();
    if (c === cp('.')) {
      this.pos++;
      return chars([...ANY_CHAR]);
    }
    if (c === cp('(')) {
      this.pos++;
      const inner = this.parseAlternatives(ruleAt);
      this.skipSpace();
      if (this.cps[this.pos] !== cp(')')) this.fail('unterminated "("', at);
      this.pos++;
      return inner;
    }
    const name = this.parseName();
    if (name !== null) {
      this.refs.push({ name, at });
      return ref(name);
    }
    this.fail(`unexpected character "${String.fromCodePoint(c)}"`);
  }

  private parseString(quote: number): Expr {
    const at = this.pos;
    this.pos++;
    let text = '';
    for (;;) {
      const c = this.cps[this.pos];
      if (c === undefined || c === 0x0a) this.fail('unterminated string', at);
      if (c === quote) {
        this.pos++;
        return literal(text);
      }
      text += String.fromCodePoint(this.parseChar());
    }
  }

  /** One possibly-escaped character inside a string or class. */
  private parseChar(): number {
    const at = this.pos;
    const c = this.cps[this.pos++]!;
    if (c !== cp('\\')) return c;
    const e = this.cps[this.pos++];
    switch (e) {
      case cp('n'):
        return 0x0a;
      case cp('r'):
        return 0x0d;
      case cp('t'):
        return 0x09;
      case cp('x'):
        return this.hex(2, at);
      case cp('u'):
        return this.hex(4, at);
      case cp('U'):
        return this.hex(8, at);
      case cp('\\'):
      case cp('"'):
      case cp("'"):
      case cp('['):
      case cp(']'):
      case cp('-'):
      case cp('^'):
        return e;
      default:
        this.fail(`unknown escape "\\${e === undefined ? '' : String.fromCodePoint(e)}"`, at);
    }
  }

  private hex(n: number, at: number): number {
    const text = String.fromCodePoint(...this.cps.slice(this.pos, this.pos + n));
    if (text.length !== n || !/^[0-9a-fA-F]+$/.test(text)) this.fail('malformed hexadecimal escape', at);
    this.pos += n;
    const v = parseInt(text, 16);
    if (v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) this.fail('escape is not a Unicode scalar value', at);
    return v;
  }

  private parseClass(): Expr {
    const at = this.pos;
    this.pos++;
    const negated = this.cps[this.pos] === cp('^');
    if (negated) this.pos++;
    const ranges: number[] = [];
    for (;;) {
      const c = this.cps[this.pos];
      if (c === undefined) this.fail('unterminated character class', at);
      if (c === cp(']')) {
        this.pos++;
        break;
      }
      const lo = this.parseChar();
      let hi = lo;
      if (this.cps[this.pos] === cp('-') && this.cps[this.pos + 1] !== undefined && this.cps[this.pos + 1] !== cp(']')) {
        this.pos++;
        hi = this.parseChar();
        if (hi < lo) this.fail('character range out of order', at);
      }
      ranges.push(lo, hi);
    }
    const set = normalizeRanges(ranges);
    return chars(negated ? subtractRanges([...ANY_CHAR], set) : set);
  }
}
