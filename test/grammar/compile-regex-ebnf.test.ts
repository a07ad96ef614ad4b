import { describe, expect, it } from 'vitest';
import { GrammarError } from '../../grammar/contract.js';
import { compileSpec } from '../../grammar/compile/index.js';
import type { StructuredOutputSpec } from '../../proto/wire.js';
import { matches } from './compile-ir-tools.js';

const lang = (spec: StructuredOutputSpec, ok: string[], bad: string[]): void => {
  const g = compileSpec(spec);
  for (const s of ok) expect(matches(g, s), `should accept ${JSON.stringify(s)}`).toBe(true);
  for (const s of bad) expect(matches(g, s), `should reject ${JSON.stringify(s)}`).toBe(false);
};
const fails = (spec: StructuredOutputSpec): GrammarError => {
  try {
    compileSpec(spec);
  } catch (e) {
    expect(e).toBeInstanceOf(GrammarError);
    return e as GrammarError;
  }
  throw new Error('expected a GrammarError');
};
const rx = (pattern: string): StructuredOutputSpec => ({ kind: 'regex', pattern });
const ebnf = (text: string): StructuredOutputSpec => ({ kind: 'grammar', ebnf: text });

describe('regex compiler', () => {
  it('the whole output must match; ^ and $ at the ends change nothing', () => {
    lang(rx('abc'), ['abc'], ['ab', 'abcd', 'xabc']);
    lang(rx('^abc$'), ['abc'], ['abcd']);
  });
  it('classes, ranges, negation and class escapes', () => {
    lang(rx('[a-c0-9_]+'), ['a', 'c9_'], ['d', '']);
    lang(rx('[^a-c]'), ['d', '中', '\n'], ['a', 'b']);
    lang(rx('\\d\\w\\s'), ['1a ', '9_\t'], ['a1 ', '11x']);
    lang(rx('[\\d-]+'), ['1-2'], ['a']);
    lang(rx('\\D\\W\\S'), ['a!x'], ['1!x', 'aax', 'a! ']);
  });
  it('dot excludes line terminators; escapes \\n \\t \\. \\uXXXX \\u{...} and surrogate pairs', () => {
    lang(rx('.'), ['a', '😀', '\t'], ['\n', '\r', '\u2028', '']);
    lang(rx('a\\.b\\n\\t'), ['a.b\n\t'], ['axb\n\t']);
    lang(rx('\\u0041\\u{1F600}\\uD83D\\uDE00'), ['A😀😀'], ['A']);
  });
  it('groups, alternation, quantifiers (lazy = greedy)', () => {
    lang(rx('(ab|c)+'), ['ab', 'cab', 'abcc'], ['', 'a', 'abd']);
    lang(rx('(?:x|y){2,3}'), ['xy', 'yyx'], ['x', 'xyxy']);
    lang(rx('(?<n>a){2}b?'), ['aa', 'aab'], ['a', 'aaa']);
    lang(rx('a{2,}?c*?'), ['aa', 'aaaac'], ['a']);
    lang(rx('x{,2}'), ['x{,2}'], ['x']); // not a quantifier: literal braces (Annex B)
    lang(rx('a|'), ['a', ''], ['b']);
  });
  it('unsupported features name themselves', () => {
    for (const [p, what] of [
      ['(a)\\1', 'backreferences'],
      ['\\k<n>', 'named backreferences'],
      ['a(?=b)', 'lookahead'],
      ['(?<!a)b', 'lookbehind'],
      ['\\bword', 'word-boundary'],
      ['\\p{L}', 'Unicode property'],
      ['a^b', 'anchors'],
      ['(^a)', 'anchors'],
    ] as const) {
      const e = fails(rx(p));
      expect(e.kind).toBe('unsupported_feature');
      expect(e.message).toContain(what);
    }
  });
  it('bad syntax is invalid_regex with the position', () => {
    for (const [p, what] of [
      ['(ab', 'unterminated group at position 0'],
      ['ab)', 'unmatched ")" at position 2'],
      ['*a', 'nothing to repeat at position 0'],
      ['a**', 'nothing to repeat'],
      ['[b-a]', 'range out of order in character class at position 2'],
      ['[abc', 'unterminated character class at position 0'],
      ['a{3,1}', 'numbers out of order'],
      ['\\xZZ', 'invalid hexadecimal escape at position 0'],
    ] as const) {
      const e = fails(rx(p));
      expect(e.kind).toBe('invalid_regex');
      expect(e.message).toContain(what);
    }
  });
});

describe('EBNF (GBNF) compiler', () => {
  it('rules, references, literals with escapes, classes, postfix operators, comments', () => {
    const g = ebnf(`
      # a greeting
      root ::= greeting ", " name-list "!"?
      greeting ::= "hi" | "hello"   # alternatives
      name-list ::= name ("," name){0,2}
      name ::= [A-Z] [a-z]+
    `);
    lang(g, ['hi, Bob', 'hello, Ann,Bo,Cy!'], ['hi, bob', 'hi,Bob', 'hi, Ann,Bo,Cy,Di']);
  });
  it('escapes in strings and classes, negated classes, any char, multi-line bodies', () => {
    lang(ebnf('root ::= "\\"" [^"\\\\]* "\\"" "\\n" "\\x41\\u00e9"'), ['"abc"\nAé'], ['"a"b"\nAé']);
    lang(ebnf('root ::=\n  "a"\n  | "b" .'), ['a', 'bz', 'b😀'], ['b', 'ab']);
    lang(ebnf('root ::= x{2} x{1,} x*\nx ::= "x"'), ['xxx', 'xxxxx'], ['xx']);
  });
  it('recursion works (balanced parentheses)', () => {
    lang(ebnf('root ::= ("(" root ")")*'), ['', '()', '(())()'], ['(', '())']);
  });
  it('errors: missing root, undefined rule with its line, syntax', () => {
    let e = fails(ebnf('start ::= "a"'));
    expect(e.kind).toBe('invalid_grammar');
    expect(e.message).toContain('no "root" rule');
    e = fails(ebnf('root ::= a\n\na ::= b "x"'));
    expect(e.message).toBe('grammar: rule "b" is not defined (line 3)');
    e = fails(ebnf('root ::= "abc'));
    expect(e.message).toContain('unterminated string (line 1)');
    e = fails(ebnf('root ::= ("a"'));
    expect(e.message).toContain('unterminated "("');
    e = fails(ebnf('root ::= "a"\nroot ::= "b"'));
    expect(e.message).toContain('defined twice (line 2)');
    e = fails(ebnf('root ::= [z-a]'));
    expect(e.message).toContain('out of order');
  });
});
