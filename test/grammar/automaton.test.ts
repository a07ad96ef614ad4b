/**
 * The automaton and its token masks against independent oracles:
 *  - completeness: random members of each grammar's language (the IR walker of
 *    compile-ir-tools.ts, which never touches the automaton) are accepted token by token,
 *    every token allowed by the mask before it is taken, EOS allowed exactly at the end;
 *  - mask = acceptToken: at every step the mask (precomputed classes, relaxed filter, memo)
 *    allows exactly the tokens a fork of the matcher accepts byte by byte;
 *  - soundness: mask-guided random generation always ends in output that the reference
 *    matcher accepts and, for schemas, that parses and validates under ajv.
 */
import { describe, expect, it } from 'vitest';
import {
  GrammarCache,
  GrammarError,
  bitmaskWords,
  compileSpec,
  validateSpec,
  type ForkableMatcher,
  type Grammar,
  type Vocabulary,
} from '../../grammar/index.js';
import type { StructuredOutputSpec } from '../../proto/wire.js';
import { makeAjv, matches, randomInstance, rng } from './compile-ir-tools.js';
import { SCHEMA_CORPUS } from './schema-corpus.js';
import { generate, isAllowed, testVocabulary, tokenize } from './automaton-tools.js';

interface Case {
  name: string;
  spec: StructuredOutputSpec;
  grammar: Grammar;
  schema?: unknown;
}

const cases: Case[] = [
  ...SCHEMA_CORPUS.map((c) => {
    const spec: StructuredOutputSpec = { kind: 'json_schema', schema: c.schema };
    return { name: `schema: ${c.name}`, spec, grammar: compileSpec(spec), schema: c.schema };
  }),
  ...['[0-9]{3}-[0-9]{4}', '(yes|no|maybe)', '[a-z]+@[a-z]+\\.(com|org)', 'é+[^a-z]{2}', '(ab|a)*c'].map((pattern) => {
    const spec: StructuredOutputSpec = { kind: 'regex', pattern };
    return { name: `regex: ${pattern}`, spec, grammar: compileSpec(spec) };
  }),
  ...[['positive', 'negative', 'neutral'], ['red', 'green', 'light green']].map((choices) => {
    const spec: StructuredOutputSpec = { kind: 'choice', choices };
    return { name: `choice: ${choices.join('/')}`, spec, grammar: compileSpec(spec) };
  }),
  (() => {
    const ebnf = 'root ::= expr\nexpr ::= term ("+" term)*\nterm ::= num | "(" expr ")"\nnum ::= [0-9]+';
    const spec: StructuredOutputSpec = { kind: 'grammar', ebnf };
    return { name: 'ebnf: arithmetic', spec, grammar: compileSpec(spec) };
  })(),
  (() => {
    const spec: StructuredOutputSpec = {
      kind: 'tool_calls',
      format: 'hermes',
      parallel: true,
      tools: [
        { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
        { name: 'add', parameters: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } }, required: ['a', 'b'] } },
      ],
    };
    return { name: 'tool calls: hermes, two tools', spec, grammar: compileSpec(spec) };
  })(),
];

const rand0 = rng(7);
const samples = new Map<string, string[]>(cases.map((c) => [c.name, [0, 1, 2].map(() => randomInstance(c.grammar, rand0, 6))]));
const vocab: Vocabulary = testVocabulary([...samples.values()].flat(), rng(11));
const cache = new GrammarCache();
const matcherOf = (c: Case): ForkableMatcher => cache.compile(c.spec, vocab).matcher();
const eos = vocab.eosTokenIds[0]!;

describe('grammar automaton: token masks', () => {
  it('accepts random members of every language token by token, each token in the mask first, EOS exactly at the end', () => {
    const mask = new Uint32Array(bitmaskWords(vocab.size));
    for (const c of cases) {
      for (const text of samples.get(c.name)!) {
        const m = matcherOf(c);
        for (const id of tokenize(vocab, text)) {
          m.fillNextTokenBitmask(mask);
          expect(isAllowed(mask, eos) ? 'eos allowed' : 'ok', `${c.name}: ${JSON.stringify(text)}`).toBe(m.canTerminate() ? 'eos allowed' : 'ok');
          expect(isAllowed(mask, id), `${c.name}: token ${JSON.stringify(Buffer.from(vocab.tokenBytes[id]!).toString('latin1'))} of ${JSON.stringify(text)}`).toBe(true);
          expect(m.acceptToken(id)).toBe(true);
        }
        expect(m.canTerminate(), `${c.name}: ${JSON.stringify(text)}`).toBe(true);
        m.fillNextTokenBitmask(mask);
        expect(isAllowed(mask, eos)).toBe(true);
        expect(m.acceptToken(eos)).toBe(true);
        expect(m.isTerminated()).toBe(true);
      }
    }
  });

  it('masks allow exactly the tokens the matcher accepts, in normal and closing mode', () => {
    const mask = new Uint32Array(bitmaskWords(vocab.size));
    const closing = new Uint32Array(bitmaskWords(vocab.size));
    let checked = 0;
    for (const c of cases) {
      const text = samples.get(c.name)![0]!;
      const m = matcherOf(c);
      const tokens = tokenize(vocab, text);
      for (let step = 0; step <= tokens.length; step++) {
        if (step % 3 === 0 || step === tokens.length) {
          m.fillNextTokenBitmask(mask);
          m.fillNextTokenBitmask(closing, { closing: true });
          const before = m.minBytesToAccept();
          let anyClosing = false;
          for (let id = 0; id < vocab.size; id++) {
            const f = m.fork();
            const ok = f.acceptToken(id);
            if (isAllowed(mask, id) !== ok) {
              const bytes = vocab.tokenBytes[id];
              throw new Error(`${c.name} after ${JSON.stringify(Buffer.from(tokens.slice(0, step).flatMap((t) => [...vocab.tokenBytes[t]!])).toString('latin1'))}: token ${id} ${bytes ? JSON.stringify(Buffer.from(bytes).toString('latin1')) : '(special)'} mask=${isAllowed(mask, id)} accept=${ok}`);
            }
            if (isAllowed(closing, id)) {
              anyClosing = true;
              expect(ok).toBe(true);
              // A closing token is on a shortest path: it brings the end exactly its length nearer.
              if (id !== eos) expect(f.minBytesToAccept()).toBe(before - vocab.tokenBytes[id]!.length);
            }
            checked++;
          }
          expect(anyClosing, c.name).toBe(true);
        }
        if (step < tokens.length) expect(m.acceptToken(tokens[step]!)).toBe(true);
      }
    }
    expect(checked).toBeGreaterThan(100_000);
  });

  it('mask-guided random generation always ends in a member of the language (JSON that validates under ajv)', () => {
    const ajv = makeAjv();
    const rand = rng(3);
    for (const c of cases) {
      const validate = c.schema === undefined ? undefined : ajv.compile(c.schema as object);
      for (let i = 0; i < 6; i++) {
        // Room for the shortest completion plus 8, 48 or 160 free tokens (a budget below the
        // shortest completion can only end in "length", as it does in the engine).
        const m = matcherOf(c);
        const budget = m.minBytesToAccept() + 1 + [8, 48, 160][i % 3]!;
        const out = generate(m, vocab, rand, budget);
        expect(out.ended, `${c.name}: ${JSON.stringify(out.text)} used ${out.tokens}/${budget}`).not.toBe('budget');
        expect(matches(c.grammar, out.text), `${c.name}: ${JSON.stringify(out.text)}`).toBe(true);
        if (validate) {
          const value: unknown = JSON.parse(out.text);
          expect(validate(value), `${c.name}: ${out.text} ${JSON.stringify(validate.errors)}`).toBe(true);
        }
      }
    }
  });

  it('closing starts early enough for what one token can commit to: parallel tool calls end within a tight budget', () => {
    // After a complete call the minimum to finish is 0, but one token (the separator, or a piece
    // like `>\n<tool_call>` that crosses it) commits to a whole new call of over 100 bytes.
    // Starting closing on the minimum (the old rule) lets a random model begin a call it cannot
    // finish; starting on the most one token can commit to never does.
    const spec: StructuredOutputSpec = {
      kind: 'tool_calls',
      format: 'hermes',
      parallel: true,
      tools: [
        {
          name: 'lookup_customer_account_history',
          parameters: { type: 'object', properties: { customer_identifier: { type: 'string' }, include_closed_accounts: { type: 'boolean' } }, required: ['customer_identifier', 'include_closed_accounts'] },
        },
      ],
    };
    const ends = (start: 'max' | 'min'): string[] => {
      const rand = rng(21);
      const out: string[] = [];
      for (let extra = 0; extra < 120; extra += 2) {
        const m = cache.compile(spec, vocab).matcher();
        out.push(generate(m, vocab, rand, m.minBytesToAccept() + 1 + extra, 16, start).ended);
      }
      return out;
    };
    expect(ends('max')).not.toContain('budget');
    expect(ends('min')).toContain('budget');
  });

  it('matches a character split across tokens byte by byte (byte-level BPE pieces that end mid-character)', () => {
    // 'é' is C3 A9: only the single-byte tokens spell it.
    const spec: StructuredOutputSpec = { kind: 'regex', pattern: 'é+' };
    const m = cache.compile(spec, vocab).matcher();
    const mask = new Uint32Array(bitmaskWords(vocab.size));
    m.fillNextTokenBitmask(mask);
    expect(isAllowed(mask, 0xc3)).toBe(true);
    expect(isAllowed(mask, 0xa9)).toBe(false);
    expect(isAllowed(mask, eos)).toBe(false);
    expect(m.acceptToken(0xc3)).toBe(true);
    m.fillNextTokenBitmask(mask);
    expect(isAllowed(mask, 0xa9)).toBe(true);
    expect(isAllowed(mask, 0xc3)).toBe(false);
    expect(isAllowed(mask, eos)).toBe(false);
    expect(m.acceptToken(0xa9)).toBe(true);
    expect(m.canTerminate()).toBe(true);
    expect(m.acceptToken(0x41)).toBe(false);
    expect(m.canTerminate()).toBe(true);
  });

  it('rejects left recursion and grammars too large to build, naming the problem', () => {
    const left = (): void => validateSpec({ kind: 'grammar', ebnf: 'root ::= list\nlist ::= list "," item | item\nitem ::= [a-z]' });
    expect(left).toThrow(GrammarError);
    expect(left).toThrow(/"list" is left-recursive/);
    const huge = (): void => validateSpec({ kind: 'regex', pattern: '([a-z]{0,1000}){0,1000}' });
    expect(huge).toThrow(/grammar too large/);
    try {
      huge();
    } catch (err) {
      expect((err as GrammarError).code).toBe('invalid_argument');
    }
  });

  it('caches compiled grammars by (vocabulary, spec), bounded', () => {
    const small = new GrammarCache(2);
    const a: StructuredOutputSpec = { kind: 'choice', choices: ['a', 'b'] };
    const b: StructuredOutputSpec = { kind: 'choice', choices: ['b', 'a'] };
    const first = small.compile(a, vocab);
    expect(small.compile({ kind: 'choice', choices: ['a', 'b'] }, vocab)).toBe(first);
    small.compile(b, vocab);
    small.compile({ kind: 'regex', pattern: 'x' }, vocab);
    expect(small.stats()).toMatchObject({ hits: 1, misses: 3, size: 2 });
    expect(small.compile(a, vocab)).not.toBe(first);
  });
});
