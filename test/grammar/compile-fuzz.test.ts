import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { compileSpec } from '../../grammar/compile/index.js';
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
