import { describe, expect, it } from 'vitest';
import { GrammarError } from '../../grammar/contract.js';
import { compileSpec } from '../../grammar/compile/index.js';
import { matches } from './compile-ir-tools.js';

const schemaGrammar = (schema: unknown) => compileSpec({ kind: 'json_schema', schema });
const accepts = (schema: unknown, ok: string[], bad: string[]): void => {
  const g = schemaGrammar(schema);
  for (const s of ok) expect(matches(g, s), `should accept ${s}`).toBe(true);
  for (const s of bad) expect(matches(g, s), `should reject ${s}`).toBe(false);
};
const errorOf = (schema: unknown): GrammarError => {
  try {
    schemaGrammar(schema);
  } catch (e) {
    expect(e).toBeInstanceOf(GrammarError);
    return e as GrammarError;
  }
  throw new Error('expected a GrammarError');
};

describe('json_schema compiler: language', () => {
  it('strings: compact, escapes allowed, raw controls and lone-surrogate escapes rejected', () => {
    accepts(
      { type: 'string' },
      ['""', '"abc"', '"a\\"b"', '"\\\\"', '"\\n\\t\\/"', '"\\u00e9"', '"é中😀"'],
      ['"a', 'abc', '"\n"', '"\\x"', '"\\ud800"', '"\\uDFFF"', ' "a"', '"a" '],
    );
  });

  it("OpenAPI nullable (what the openai SDK's zod helper writes): the schema or null", () => {
    accepts({ type: 'string', nullable: true }, ['null', '"a"'], ['1', 'nul']);
    accepts({ type: 'integer', minimum: 1, maximum: 5, nullable: false }, ['3'], ['null', '6']);
    accepts({ type: 'object', properties: { n: { type: 'string', nullable: true } }, required: ['n'] }, ['{"n":null}', '{"n":"x"}'], ['{}']);
    expect(errorOf({ type: 'string', nullable: 'yes' }).message).toMatch(/"nullable" must be a boolean/);
  });

  it('minLength/maxLength count code points, an escape counts once', () => {
    accepts({ type: 'string', minLength: 2, maxLength: 3 }, ['"ab"', '"\\n\\t"', '"😀😀😀"', '"a\\u0041b"'], ['"a"', '"abcd"', '""']);
  });

  it('integers: no leading zeros, no -0, at most 15 digits', () => {
    accepts({ type: 'integer' }, ['0', '-1', '123', '999999999999999'], ['-0', '01', '1.0', '1e3', '1000000000000000', '+1']);
  });

  it('numbers: fraction and a two-digit exponent', () => {
    accepts({ type: 'number' }, ['0', '-0.5', '1.25e10', '3E-99', '2e+5'], ['.5', '1.', '1e', '1e100', '01.5', 'NaN']);
  });

  it('integer bounds [12, 345] by digit ranges: worked edges', () => {
    accepts(
      { type: 'integer', minimum: 12, maximum: 345 },
      ['12', '19', '20', '99', '100', '299', '300', '339', '340', '345'],
      ['11', '0', '9', '346', '350', '400', '1000', '-12'],
    );
  });

  it('integer bounds across zero, exclusive and fractional bounds', () => {
    accepts({ type: 'integer', minimum: -15, maximum: 7 }, ['-15', '-10', '-1', '0', '7'], ['-16', '-20', '8', '-0']);
    accepts({ type: 'integer', exclusiveMinimum: 0, exclusiveMaximum: 10 }, ['1', '9'], ['0', '10']);
    accepts({ type: 'integer', minimum: 0.5, maximum: 3.5 }, ['1', '3'], ['0', '4']);
    accepts({ type: 'integer', maximum: -7 }, ['-7', '-100'], ['-6', '0', '7']);
  });

  it('number bounds: fractions on the right side of each integer bound', () => {
    accepts({ type: 'number', minimum: 0, maximum: 1 }, ['0', '1', '0.5', '0.999'], ['1.5', '1.01', '-0.1', '2', '1.0', '1e0']);
    accepts({ type: 'number', exclusiveMinimum: -1, exclusiveMaximum: 1 }, ['0', '-0.5', '0.9'], ['-1', '1', '-1.5']);
    accepts({ type: 'number', minimum: -273 }, ['-273', '-272.5', '0', '1000.25'], ['-273.5', '-274']);
  });

  it('objects: declared order, optional members skippable, commas correct', () => {
    const schema = {
      type: 'object',
      properties: { a: { type: 'integer' }, b: { type: 'integer' }, c: { type: 'integer' } },
      required: ['b'],
      additionalProperties: false,
    };
    accepts(schema, ['{"b":1}', '{"a":1,"b":2}', '{"b":2,"c":3}', '{"a":1,"b":2,"c":3}'], ['{}', '{"a":1}', '{"b":1,"a":2}', '{,"b":1}', '{"b":1,}', '{"a":1,"b":2,"d":3}', '{ "b":1}']);
  });

  it('all-optional objects allow {} and any ordered subset', () => {
    accepts({ type: 'object', properties: { x: { type: 'null' }, y: { type: 'null' } } }, ['{}', '{"x":null}', '{"y":null}', '{"x":null,"y":null}'], ['{"y":null,"x":null}', '{,}']);
  });

  it('non-strict objects are narrowed to their declared properties', () => {
    accepts({ type: 'object', properties: { id: { type: 'integer' } }, required: ['id'] }, ['{"id":1}'], ['{"id":1,"x":2}']);
  });

  it('objects without properties: free, closed, or a map', () => {
    accepts({ type: 'object' }, ['{}', '{"a":[1,{"b":null}]}'], ['[]', '{"a"}']);
    accepts({ type: 'object', additionalProperties: false }, ['{}'], ['{"a":1}']);
    accepts({ type: 'object', additionalProperties: { type: 'boolean' } }, ['{}', '{"a":true,"b":false}'], ['{"a":1}']);
  });

  it('arrays: minItems/maxItems', () => {
    accepts({ type: 'array', items: { type: 'integer' }, minItems: 1, maxItems: 3 }, ['[1]', '[1,2,3]'], ['[]', '[1,2,3,4]', '[1,]', '[,1]']);
    accepts({ type: 'array', items: { type: 'integer' } }, ['[]', '[1,2,3,4,5,6,7]'], ['[1 ,2]']);
    accepts({ type: 'array', maxItems: 0 }, ['[]'], ['[1]']);
  });

  it('prefixItems: tuple positions then items for the rest', () => {
    accepts(
      { type: 'array', prefixItems: [{ type: 'string' }, { type: 'integer' }], items: { type: 'boolean' }, minItems: 1 },
      ['["a"]', '["a",1]', '["a",1,true,false]'],
      ['[]', '[1]', '["a",true]', '["a",1,2]'],
    );
    accepts({ type: 'array', prefixItems: [{ type: 'null' }], items: false }, ['[]', '[null]'], ['[null,null]']);
  });

  it('enum and const are compact JSON literals, filtered by type', () => {
    accepts({ enum: ['a', 1, null, { k: [1] }] }, ['"a"', '1', 'null', '{"k":[1]}'], ['"b"', '{"k": [1]}', '2']);
    accepts({ type: 'string', enum: ['a', 1] }, ['"a"'], ['1']);
    accepts({ const: 'x"y' }, ['"x\\"y"'], ['"x"']);
  });

  it('type arrays and anyOf', () => {
    accepts({ type: ['string', 'null'] }, ['"s"', 'null'], ['1']);
    accepts({ anyOf: [{ type: 'boolean' }, { type: 'integer', minimum: 5, maximum: 6 }] }, ['true', '5', '6'], ['4', '"5"']);
    accepts({ oneOf: [{ type: 'string' }, { type: 'null' }] }, ['"a"', 'null'], ['1']);
  });

  it('$ref/$defs and recursion through "#"', () => {
    const tree = {
      $defs: { node: { type: 'object', properties: { kids: { type: 'array', items: { $ref: '#/$defs/node' } } }, required: ['kids'], additionalProperties: false } },
      $ref: '#/$defs/node',
    };
    accepts(tree, ['{"kids":[]}', '{"kids":[{"kids":[{"kids":[]}]},{"kids":[]}]}'], ['{"kids":[{}]}', '{}']);
    const list = { type: 'object', properties: { next: { anyOf: [{ $ref: '#' }, { type: 'null' }] } }, required: ['next'], additionalProperties: false };
    accepts(list, ['{"next":null}', '{"next":{"next":{"next":null}}}'], ['{"next":{}}']);
  });

  it('pattern: unanchored search unless anchored, content JSON-escaped', () => {
    accepts({ type: 'string', pattern: 'ab' }, ['"ab"', '"xxabyy"', '"\\nab"'], ['"a"', '"ba"']);
    accepts({ type: 'string', pattern: '^ab' }, ['"ab"', '"abzz"'], ['"xab"']);
    accepts({ type: 'string', pattern: '^a|b$' }, ['"a"', '"azz"', '"zzb"'], ['"za"', '"bz"']);
    accepts({ type: 'string', pattern: '^["\\\\]$' }, ['"\\""', '"\\\\"'], ['"""', '"\\"']);
    accepts({ type: 'string', pattern: '^\\n$' }, ['"\\n"'], ['"\n"']);
  });

  it('formats: date rejects impossible days, uuid/ipv4 shapes', () => {
    accepts({ type: 'string', format: 'date' }, ['"2024-01-31"', '"2023-04-30"', '"2024-02-28"'], ['"2024-02-30"', '"2024-04-31"', '"2024-13-01"', '"2024-00-10"', '"2024-02-29"']);
    accepts({ type: 'string', format: 'ipv4' }, ['"0.0.0.0"', '"255.255.255.255"', '"10.2.30.199"'], ['"256.0.0.1"', '"01.1.1.1"', '"1.1.1"']);
    accepts({ type: 'string', format: 'uuid' }, ['"123e4567-e89b-12d3-a456-426614174000"'], ['"123e4567e89b12d3a456426614174000"']);
    accepts({ type: 'string', format: 'time' }, ['"23:59:59Z"', '"00:00:00.5+01:30"'], ['"24:00:00Z"', '"12:00:00"']);
  });

  it('descriptive keywords are ignored', () => {
    accepts({ type: 'integer', title: 't', description: 'd', default: 1, examples: [1], $comment: 'c', deprecated: true }, ['1'], ['"1"']);
  });
});

describe('json_schema compiler: errors name the feature and where', () => {
  const unsupported: Array<[string, unknown, string]> = [
    ['uniqueItems', { type: 'object', properties: { tags: { type: 'array', uniqueItems: true } } }, '"uniqueItems" is not supported (at #/properties/tags)'],
    ['not', { not: { type: 'string' } }, '"not"'],
    ['if', { if: { type: 'string' }, then: { minLength: 1 } }, '"if"'],
    ['patternProperties', { type: 'object', patternProperties: { '^a': {} } }, '"patternProperties"'],
    ['multipleOf', { type: 'integer', multipleOf: 3 }, '"multipleOf"'],
    ['minProperties', { type: 'object', minProperties: 1 }, '"minProperties"'],
    ['dependentRequired', { type: 'object', dependentRequired: { a: ['b'] } }, '"dependentRequired"'],
    ['contains', { type: 'array', contains: { type: 'integer' } }, '"contains"'],
    ['unknown format', { type: 'string', format: 'hostname' }, '"format": "hostname"'],
    ['pattern with lookahead', { type: 'string', pattern: '^(?=a)a$' }, 'lookahead'],
    ['pattern with backreference', { type: 'string', pattern: '(a)\\1' }, 'backreferences'],
    ['oneOf overlapping', { oneOf: [{ type: 'number' }, { type: 'integer' }] }, '"oneOf"'],
    ['allOf of two', { allOf: [{ type: 'string' }, { minLength: 1 }] }, '"allOf" with more than one'],
    ['anyOf with siblings', { type: 'object', anyOf: [{ required: ['a'] }] }, 'alongside "anyOf"'],
    ['remote $ref', { $ref: 'http://example.com/s.json' }, '"$ref" to "http://example.com/s.json"'],
    ['non-integer number bound', { type: 'number', minimum: 0.5 }, 'non-integer'],
    ['pattern with maxLength', { type: 'string', pattern: 'a', maxLength: 3 }, 'alongside "pattern"'],
    ['tuple items', { type: 'array', items: [{ type: 'string' }] }, '"items" as an array'],
  ];
  for (const [name, schema, fragment] of unsupported) {
    it(`unsupported_feature: ${name}`, () => {
      const e = errorOf(schema);
      expect(e.kind).toBe('unsupported_feature');
      expect(e.code).toBe('invalid_argument');
      expect(e.message).toContain(fragment);
      expect(e.message.startsWith('json_schema: ')).toBe(true);
    });
  }

  const invalid: Array<[string, unknown, string]> = [
    ['dangling $ref', { $ref: '#/$defs/missing' }, '#/$defs/missing does not exist'],
    ['type not a type', { type: 'str' }, '"type" "str"'],
    ['minLength negative', { type: 'string', minLength: -1 }, '"minLength" must be a non-negative integer'],
    ['required not strings', { type: 'object', required: [1] }, '"required" must be an array of strings'],
    ['empty enum', { enum: [] }, '"enum" must be a non-empty array'],
    ['schema not an object', 42, 'a schema must be an object'],
    ['false schema', false, 'admits no value'],
    ['minItems > maxItems', { type: 'array', minItems: 3, maxItems: 1 }, '"minItems" exceeds "maxItems"'],
    ['required but closed', { type: 'object', properties: {}, required: ['a'], additionalProperties: false }, 'required property "a"'],
    ['pattern syntax', { type: 'string', pattern: '(ab' }, 'unterminated group'],
  ];
  for (const [name, schema, fragment] of invalid) {
    it(`invalid: ${name}`, () => {
      const e = errorOf(schema);
      expect(e.kind).toBe(name === 'pattern syntax' ? 'invalid_regex' : 'invalid_schema');
      expect(e.message).toContain(fragment);
    });
  }
});
