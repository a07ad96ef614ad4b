import { describe, expect, it } from 'vitest';
import { compileSpec } from '../../grammar/compile/index.js';
import { randomInstance, rng, makeAjv } from './compile-ir-tools.js';
import { SCHEMA_CORPUS } from './schema-corpus.js';

describe('schema corpus', () => {
  it('has at least 50 schemas, all with unique names', () => {
    expect(SCHEMA_CORPUS.length).toBeGreaterThanOrEqual(50);
    expect(new Set(SCHEMA_CORPUS.map((s) => s.name)).size).toBe(SCHEMA_CORPUS.length);
  });

  for (const { name, schema } of SCHEMA_CORPUS) {
    it(`compiles and every sampled instance validates: ${name}`, () => {
      const ajv = makeAjv();
      const validate = ajv.compile(schema);
      const grammar = compileSpec({ kind: 'json_schema', schema });
      const rand = rng(name.length * 7919 + 17);
      for (let i = 0; i < 40; i++) {
        const text = randomInstance(grammar, rand);
        let value: unknown;
        expect(() => (value = JSON.parse(text)), text).not.toThrow();
        expect(validate(value), `${text} ${JSON.stringify(validate.errors)}`).toBe(true);
      }
    });
  }
});
