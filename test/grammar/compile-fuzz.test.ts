import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { compileSpec } from '../../grammar/compile/index.js';
import { CompileBudget, GrammarError, validateSpec } from '../../grammar/index.js';
import type { StructuredOutputSpec } from '../../proto/wire.js';
import { CancelledError } from '../../runtime/errors.js';
import { matches, randomInstance, rng, makeAjv } from './compile-ir-tools.js';
import { SCHEMA_CORPUS } from './schema-corpus.js';

// ~20 structurally varied schemas from the corpus: every random walk over the IR must parse
// and validate, and the reference matcher must accept what the walker produced.
const FUZZED = SCHEMA_CORPUS.filter((_, i) => i % 3 === 0 || i >= SCHEMA_CORPUS.length - 8);

describe('compiled JSON schemas: random members of the IR language validate (fast-check seeds)', () => {
  const ajv = makeAjv();
  for (const { name, schema } of FUZZED) {
    it(name, () => {
      const grammar = compileSpec({ kind: 'json_schema', schema });
      const validate = ajv.compile(schema);
      fc.assert(
        fc.property(fc.integer(), fc.integer({ min: 2, max: 14 }), (seed, depth) => {
          const text = randomInstance(grammar, rng(seed), depth);
          expect(matches(grammar, text)).toBe(true);
          const value: unknown = JSON.parse(text);
          expect(validate(value), `${text}: ${JSON.stringify(validate.errors)}`).toBe(true);
        }),
        { numRuns: 60, seed: 16 },
      );
    });
  }

  it('regex outputs match the same pattern under JavaScript RegExp', () => {
    const patterns = ['[a-f0-9]{4,8}', '(ab|cd)*e?', '\\d{3}-\\w+', '[^x]{2}\\.[A-Z]'];
    for (const p of patterns) {
      const grammar = compileSpec({ kind: 'regex', pattern: p });
      const re = new RegExp(`^(?:${p})$`, 'u');
      fc.assert(
        fc.property(fc.integer(), (seed) => {
          const text = randomInstance(grammar, rng(seed));
          expect(re.test(text), `${p} vs ${JSON.stringify(text)}`).toBe(true);
        }),
        { numRuns: 100, seed: 16 },
      );
    }
  });
});

describe('compile budgets (issue 23): random grammars under random budgets', () => {
  /** A regex of `alts` branches `[a-z]{k}qN` with k up to `width`: states grow with both. */
  const regexOf = (alts: number, width: number): StructuredOutputSpec => ({
    kind: 'regex',
    pattern: '(' + Array.from({ length: alts }, (_, i) => `[a-z]{${i % (width + 1)}}q${i}`).join('|') + ')',
  });
  const noTimeLimit = 60_000;

  it('a compile either succeeds or is refused with a GrammarError: a memory budget names itself, and more memory never refuses what less allowed', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 120 }), fc.integer({ min: 0, max: 30 }), fc.integer({ min: 1, max: 2_000_000 }), (alts, width, bytes) => {
        const spec = regexOf(alts, width);
        const run = (memoryBytes: number): unknown => {
          try {
            validateSpec(spec, new CompileBudget({ timeoutMs: noTimeLimit, memoryBytes }));
            return undefined;
          } catch (err) {
            return err;
          }
        };
        const err = run(bytes);
        if (err !== undefined) {
          expect(err).toBeInstanceOf(GrammarError);
          expect((err as GrammarError).kind).toBe('budget_exceeded');
          expect((err as GrammarError).message).toMatch(/memory budget of [\d.]+ MB \(--grammar-compile-memory-mb\)/);
        } else {
          expect(run(bytes * 2)).toBeUndefined();
        }
      }),
      { numRuns: 80, seed: 23 },
    );
  });

  it('a set cancel flag stops any compile with CancelledError; an expired deadline with the time budget named', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 200 }), fc.integer({ min: 0, max: 40 }), (alts, width) => {
        const spec = regexOf(alts, width);
        const flag = new Int32Array(new SharedArrayBuffer(4));
        Atomics.store(flag, 0, 1);
        expect(() => validateSpec(spec, new CompileBudget({ timeoutMs: noTimeLimit, memoryBytes: 1 << 30 }, flag))).toThrow(CancelledError);
        expect(() => validateSpec(spec, new CompileBudget({ timeoutMs: -1, memoryBytes: 1 << 30 }))).toThrow(/time budget of -1 ms \(--grammar-compile-timeout-ms\)/);
      }),
      { numRuns: 40, seed: 23 },
    );
  });
});
