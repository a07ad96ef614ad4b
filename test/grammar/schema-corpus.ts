/**
 * JSON schemas every structured-output test draws on: the compiler's unit and fuzz tests, and
 * the end-to-end validity test (G-engine). Every entry compiles. They validate with ajv's
 * default (draft-07) class plus ajv-formats (the `format` entries need it).
 */
export interface CorpusSchema {
  name: string;
  schema: Record<string, unknown> | boolean;
}

const strictObject = (properties: Record<string, unknown>, required = Object.keys(properties)): Record<string, unknown> => ({
  type: 'object',
  properties,
  required,
  additionalProperties: false,
});

export const SCHEMA_CORPUS: CorpusSchema[] = [
  // scalars
  { name: 'string', schema: { type: 'string' } },
  { name: 'integer', schema: { type: 'integer' } },
  { name: 'number', schema: { type: 'number' } },
  { name: 'boolean', schema: { type: 'boolean' } },
  { name: 'null', schema: { type: 'null' } },
  { name: 'any (empty schema)', schema: {} },
  { name: 'any (true)', schema: true },
  { name: 'nullable string (type array)', schema: { type: ['string', 'null'] } },
  { name: 'string or integer or boolean', schema: { type: ['string', 'integer', 'boolean'] } },
  // strings
  { name: 'string length 2..5', schema: { type: 'string', minLength: 2, maxLength: 5 } },
  { name: 'string exactly 3', schema: { type: 'string', minLength: 3, maxLength: 3 } },
  { name: 'string at least 1', schema: { type: 'string', minLength: 1 } },
  { name: 'pattern anchored digits', schema: { type: 'string', pattern: '^[0-9]{3}-[0-9]{4}$' } },
  { name: 'pattern unanchored', schema: { type: 'string', pattern: 'ab+c' } },
  { name: 'pattern with alternation', schema: { type: 'string', pattern: '^(red|green|blue)(-[a-z]+)?$' } },
  { name: 'pattern with quotes and backslash', schema: { type: 'string', pattern: '^"[\\\\a-z]*"$' } },
  { name: 'pattern word chars', schema: { type: 'string', pattern: '^\\w+@\\w+\\.com$' } },
  { name: 'pattern any dot', schema: { type: 'string', pattern: '^.{2,4}$' } },
  { name: 'format date', schema: { type: 'string', format: 'date' } },
  { name: 'format time', schema: { type: 'string', format: 'time' } },
  { name: 'format date-time', schema: { type: 'string', format: 'date-time' } },
  { name: 'format uuid', schema: { type: 'string', format: 'uuid' } },
  { name: 'format ipv4', schema: { type: 'string', format: 'ipv4' } },
  { name: 'format email', schema: { type: 'string', format: 'email' } },
  // numbers
  { name: 'integer 1..100', schema: { type: 'integer', minimum: 1, maximum: 100 } },
  { name: 'integer -50..50', schema: { type: 'integer', minimum: -50, maximum: 50 } },
  { name: 'integer exclusive 0..10', schema: { type: 'integer', exclusiveMinimum: 0, exclusiveMaximum: 10 } },
  { name: 'integer >= 1000', schema: { type: 'integer', minimum: 1000 } },
  { name: 'integer <= -7', schema: { type: 'integer', maximum: -7 } },
  { name: 'integer fractional bounds', schema: { type: 'integer', minimum: 0.5, maximum: 3.5 } },
  { name: 'number 0..1', schema: { type: 'number', minimum: 0, maximum: 1 } },
  { name: 'number exclusive -1..1', schema: { type: 'number', exclusiveMinimum: -1, exclusiveMaximum: 1 } },
  { name: 'number >= 0', schema: { type: 'number', minimum: 0 } },
  { name: 'number -273..', schema: { type: 'number', minimum: -273 } },
  // enums and consts
  { name: 'string enum', schema: { type: 'string', enum: ['low', 'medium', 'high'] } },
  { name: 'mixed enum', schema: { enum: ['a', 1, 2.5, true, null, { k: [1, 'x'] }, [1, 2]] } },
  { name: 'enum with escapes', schema: { enum: ['say "hi"', 'back\\slash', 'new\nline', 'caf\u00e9'] } },
  { name: 'const object', schema: { const: { version: 2, tags: ['a'] } } },
  { name: 'const string', schema: { type: 'string', const: 'fixed' } },
  // arrays
  { name: 'array of strings', schema: { type: 'array', items: { type: 'string' } } },
  { name: 'array 1..3 integers', schema: { type: 'array', items: { type: 'integer' }, minItems: 1, maxItems: 3 } },
  { name: 'array exactly 2', schema: { type: 'array', items: { type: 'boolean' }, minItems: 2, maxItems: 2 } },
  { name: 'array any items', schema: { type: 'array' } },
  { name: 'array empty only', schema: { type: 'array', maxItems: 0 } },
  { name: 'array of arrays', schema: { type: 'array', items: { type: 'array', items: { type: 'number' }, maxItems: 3 }, maxItems: 3 } },
  // objects
  { name: 'strict person', schema: strictObject({ name: { type: 'string' }, age: { type: 'integer', minimum: 0, maximum: 150 } }) },
  {
    name: 'optional properties',
    schema: strictObject({ a: { type: 'string' }, b: { type: 'integer' }, c: { type: 'boolean' }, d: { type: 'null' } }, ['b']),
  },
  { name: 'all optional', schema: strictObject({ x: { type: 'integer' }, y: { type: 'integer' } }, []) },
  { name: 'non-strict object (extra keys narrowed away)', schema: { type: 'object', properties: { id: { type: 'integer' } }, required: ['id'] } },
  { name: 'free object', schema: { type: 'object' } },
  { name: 'empty closed object', schema: { type: 'object', additionalProperties: false } },
  { name: 'map of integers', schema: { type: 'object', additionalProperties: { type: 'integer' } } },
  { name: 'keys needing escapes', schema: strictObject({ 'a "quoted" key': { type: 'string' }, 'slash\\key': { type: 'integer' } }) },
  { name: 'untyped object keywords', schema: { properties: { k: { type: 'string' } }, required: ['k'] } },
  {
    name: 'nested objects',
    schema: strictObject({
      user: strictObject({ id: { type: 'string', format: 'uuid' }, email: { type: 'string', format: 'email' } }),
      meta: strictObject({ created: { type: 'string', format: 'date-time' }, tags: { type: 'array', items: { type: 'string', maxLength: 8 }, maxItems: 4 } }),
    }),
  },
  {
    name: 'order with line items',
    schema: strictObject({
      orderId: { type: 'string', pattern: '^ORD-[0-9]{6}$' },
      items: {
        type: 'array',
        minItems: 1,
        items: strictObject({ sku: { type: 'string', minLength: 1, maxLength: 12 }, qty: { type: 'integer', minimum: 1, maximum: 99 }, price: { type: 'number', minimum: 0 } }),
      },
      status: { enum: ['pending', 'shipped', 'delivered'] },
      note: { type: ['string', 'null'] },
    }),
  },
  // combinators
  { name: 'anyOf string or number', schema: { anyOf: [{ type: 'string', maxLength: 4 }, { type: 'number', minimum: 0, maximum: 9 }] } },
  { name: 'anyOf nullable object', schema: { anyOf: [strictObject({ v: { type: 'integer' } }), { type: 'null' }] } },
  {
    name: 'anyOf tagged union',
    schema: {
      anyOf: [
        strictObject({ kind: { const: 'circle' }, r: { type: 'number', minimum: 0 } }),
        strictObject({ kind: { const: 'rect' }, w: { type: 'number', minimum: 0 }, h: { type: 'number', minimum: 0 } }),
      ],
    },
  },
  { name: 'oneOf distinct types', schema: { oneOf: [{ type: 'string' }, { type: 'integer' }, { type: 'null' }] } },
  { name: 'allOf single', schema: { allOf: [{ type: 'string', minLength: 1, maxLength: 2 }] } },
  // references
  {
    name: '$defs reference',
    schema: {
      $defs: { point: strictObject({ x: { type: 'number' }, y: { type: 'number' } }) },
      ...strictObject({ from: { $ref: '#/$defs/point' }, to: { $ref: '#/$defs/point' } }),
    },
  },
  {
    name: 'definitions reference',
    schema: { definitions: { color: { enum: ['r', 'g', 'b'] } }, type: 'array', items: { $ref: '#/definitions/color' }, maxItems: 5 },
  },
  {
    name: 'recursive tree ($defs)',
    schema: {
      $defs: {
        node: strictObject({ value: { type: 'integer' }, children: { type: 'array', items: { $ref: '#/$defs/node' }, maxItems: 3 } }),
      },
      $ref: '#/$defs/node',
    },
  },
  {
    name: 'recursive root ($ref #)',
    schema: strictObject({ name: { type: 'string', maxLength: 10 }, next: { anyOf: [{ $ref: '#' }, { type: 'null' }] } }),
  },
  {
    name: 'linked list via definitions',
    schema: {
      definitions: { list: { anyOf: [{ type: 'null' }, strictObject({ head: { type: 'integer' }, tail: { $ref: '#/definitions/list' } })] } },
      $ref: '#/definitions/list',
    },
  },
  // descriptive keywords are ignored
  {
    name: 'descriptive keywords',
    schema: {
      $schema: 'http://json-schema.org/draft-07/schema#',
      title: 'Thing',
      description: 'a thing',
      ...strictObject({ n: { type: 'integer', description: 'count', default: 3, examples: [1, 2] } }),
    },
  },
];
