/**
 * JSON Schema to IR. Every string the IR admits is compact JSON that validates against the
 * schema; where the schema's language is not regular or not cheap to express exactly, the
 * compiler either narrows it (documented below, the output still validates) or refuses with
 * `unsupported_feature` naming the keyword and where it sits. Nothing constraining is ignored.
 *
 * Narrowings (the output is a subset of what the schema allows):
 * - objects list their declared `properties` in declaration order; required ones always,
 *   optional ones may be skipped. Extra keys are never produced when `properties` is given,
 *   whatever `additionalProperties` says. An object with no `properties` is a map: any keys,
 *   values from `additionalProperties` (a schema), any JSON when it is absent/true, `{}` when false.
 * - a schema without `type` is narrowed to the types its keywords imply (`properties` → object,
 *   `items` → array, `minLength` → string, `minimum` → number); with none, any JSON value.
 * - numbers: bounded digits (see json-lexical.ts); with bounds, only integer bounds, no exponent.
 * - `oneOf` only when its branches' types are pairwise disjoint (then it equals `anyOf`).
 * - `allOf` only with one branch.
 */
import { GrammarError } from '../contract.js';
import { type Expr, alt, literal, ref, repeat, seq } from '../ir.js';
import {
  JSON_INTEGER,
  JSON_NUMBER,
  JSON_STRING_CHAR,
  genericJson,
  jsonEscapeContent,
  jsonLiteral,
} from './json-lexical.js';
import { type Bound, MAX_BOUNDED_INT, boundedNumber } from './number-range.js';
import { compileRegexSearch } from './regex.js';
import type { RuleSet } from './rule-set.js';
import { STRING_FORMATS } from './string-formats.js';

type Schema = Record<string, unknown>;
type JsonType = 'object' | 'array' | 'string' | 'number' | 'integer' | 'boolean' | 'null';
const JSON_TYPES: readonly JsonType[] = ['object', 'array', 'string', 'number', 'integer', 'boolean', 'null'];

/** Keywords that describe but do not constrain: accepted and ignored. */
const DESCRIPTIVE = new Set([
  'title', 'description', 'default', 'examples', '$schema', '$id', '$comment', 'deprecated', 'readOnly', 'writeOnly',
  // containers that only matter as $ref targets
  '$defs', 'definitions',
]);
const OBJECT_KEYWORDS = ['properties', 'required', 'additionalProperties'];
const ARRAY_KEYWORDS = ['items', 'prefixItems', 'minItems', 'maxItems'];
const STRING_KEYWORDS = ['minLength', 'maxLength', 'pattern', 'format'];
const NUMBER_KEYWORDS = ['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum'];
const SUPPORTED = new Set([
  'type', 'enum', 'const', 'anyOf', 'oneOf', 'allOf', '$ref', 'nullable',
  ...OBJECT_KEYWORDS, ...ARRAY_KEYWORDS, ...STRING_KEYWORDS, ...NUMBER_KEYWORDS,
]);

const isSchemaObject = (v: unknown): v is Schema => typeof v === 'object' && v !== null && !Array.isArray(v);

function jsonTypeOf(v: unknown): JsonType {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number';
  return typeof v as JsonType;
}

const typeAdmits = (types: readonly JsonType[], t: JsonType): boolean =>
  types.includes(t) || (t === 'integer' && types.includes('number'));

export class JsonSchemaCompiler {
  /** JSON pointer (without '#') -> rule name, for $ref targets compiled so far. */
  private readonly refRules = new Map<string, string>();

  constructor(
    private readonly rules: RuleSet,
    private readonly root: unknown,
    /** Prefix of rule names (one per tool, so tools' rules never collide). */
    private readonly prefix: string,
    /** Prefix of error messages, e.g. `json_schema` or `tools[0] "get_weather" parameters`. */
    private readonly context = 'json_schema',
  ) {}

  /** Compile the whole document; returns the name of its rule. */
  compileRoot(): string {
    return this.ruleForPointer('');
  }

  private unsupported(what: string, path: string): never {
    throw new GrammarError('unsupported_feature', `${this.context}: ${what} is not supported (at ${path})`);
  }

  private invalid(what: string, path: string): never {
    throw new GrammarError('invalid_schema', `${this.context}: ${what} (at ${path})`);
  }

  private ruleForPointer(pointer: string): string {
    const existing = this.refRules.get(pointer);
    if (existing) return existing;
    const path = '#' + pointer;
    const target = this.resolvePointer(pointer, path);
    const hint = pointer === '' ? `${this.prefix}root` : `${this.prefix}${pointer.split('/').pop()}`;
    const name = this.rules.reserve(hint);
    this.refRules.set(pointer, name);
    this.rules.define(name, this.compile(target, path));
    return name;
  }

  private resolvePointer(pointer: string, path: string): unknown {
    let node: unknown = this.root;
    if (pointer === '') return node;
    for (const raw of pointer.slice(1).split('/')) {
      const key = decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~');
      if (typeof node !== 'object' || node === null || !Object.prototype.hasOwnProperty.call(node, key)) {
        this.invalid(`"$ref" target ${path} does not exist`, path);
      }
      node = (node as Record<string, unknown>)[key];
    }
    return node;
  }

  /** Wrap a non-trivial expression in its own rule so that repeating it does not copy it. */
  private shared(hint: string, expr: Expr): Expr {
    if (expr.kind === 'ref' || expr.kind === 'literal') return expr;
    return ref(this.rules.add(`${this.prefix}${hint}`, expr));
  }

  compile(schema: unknown, path: string): Expr {
    if (schema === true) return ref(genericJson(this.rules).value);
    if (schema === false) this.invalid('schema `false` admits no value', path);
    if (!isSchemaObject(schema)) this.invalid('a schema must be an object or a boolean', path);

    const constraining: string[] = [];
    for (const key of Object.keys(schema)) {
      if (DESCRIPTIVE.has(key)) continue;
      if (!SUPPORTED.has(key)) this.unsupported(`"${key}"`, path);
      constraining.push(key);
    }
    const others = (except: string[]): string[] => constraining.filter((k) => !except.includes(k));

    // OpenAPI's `nullable: true` (the openai SDK's zod helper writes it): the schema or null.
    if ('nullable' in schema) {
      if (typeof schema.nullable !== 'boolean') this.invalid('"nullable" must be a boolean', path);
      const { nullable, ...rest } = schema;
      const inner = this.compile(rest, path);
      return nullable === true ? alt(inner, literal('null')) : inner;
    }

    if ('$ref' in schema) {
      const extra = others(['$ref']);
      if (extra.length > 0) this.unsupported(`"${extra[0]}" alongside "$ref"`, path);
      const target = schema.$ref;
      if (typeof target !== 'string') this.invalid('"$ref" must be a string', path);
      if (!target.startsWith('#')) this.unsupported(`"$ref" to "${target}" (only local "#/..." references are)`, path);
      const pointer = target.slice(1);
      if (pointer !== '' && !pointer.startsWith('/')) this.unsupported(`"$ref" to anchor "${target}"`, path);
      return ref(this.ruleForPointer(pointer));
    }

    const types = this.readTypes(schema, path);

    if ('enum' in schema || 'const' in schema) return this.compileEnum(schema, types, others(['enum', 'const', 'type']), path);

    for (const combinator of ['anyOf', 'oneOf', 'allOf'] as const) {
      if (!(combinator in schema)) continue;
      const extra = others([combinator]);
      if (extra.length > 0) this.unsupported(`"${extra[0]}" alongside "${combinator}"`, path);
      const branches = schema[combinator];
      if (!Array.isArray(branches) || branches.length === 0) this.invalid(`"${combinator}" must be a non-empty array`, path);
      if (combinator === 'allOf' && branches.length > 1) this.unsupported('"allOf" with more than one schema', path);
      if (combinator === 'oneOf') this.checkDisjoint(branches, path);
      return alt(...branches.map((b, i) => this.compile(b, `${path}/${combinator}/${i}`)));
    }

    const effective = types ?? this.impliedTypes(schema);
    if (effective === null) return ref(genericJson(this.rules).value);
    const items: Expr[] = [];
    for (const t of effective) {
      if (t === 'integer' && effective.includes('number')) continue;
      items.push(this.compileType(t, schema, path));
    }
    return alt(...items);
  }

  private readTypes(schema: Schema, path: string): JsonType[] | null {
    if (!('type' in schema)) return null;
    const raw = schema.type;
    const list = Array.isArray(raw) ? raw : [raw];
    if (list.length === 0) this.invalid('"type" must not be an empty array', path);
    for (const t of list) {
      if (typeof t !== 'string' || !JSON_TYPES.includes(t as JsonType)) this.invalid(`"type" ${JSON.stringify(t)} is not a JSON Schema type`, path);
    }
    return [...new Set(list as JsonType[])];
  }

  private impliedTypes(schema: Schema): JsonType[] | null {
    const has = (keys: string[]): boolean => keys.some((k) => k in schema);
    const out: JsonType[] = [];
    if (has(OBJECT_KEYWORDS)) out.push('object');
    if (has(ARRAY_KEYWORDS)) out.push('array');
    if (has(STRING_KEYWORDS)) out.push('string');
    if (has(NUMBER_KEYWORDS)) out.push('number');
    return out.length > 0 ? out : null;
  }

  private compileEnum(schema: Schema, types: JsonType[] | null, extra: string[], path: string): Expr {
    if (extra.length > 0) this.unsupported(`"${extra[0]}" alongside "enum"/"const"`, path);
    let values: unknown[];
    if ('const' in schema) {
      values = [schema.const];
      if ('enum' in schema) {
        if (!Array.isArray(schema.enum)) this.invalid('"enum" must be an array', path);
        const c = JSON.stringify(schema.const);
        values = schema.enum.some((v) => JSON.stringify(v) === c) ? values : [];
      }
    } else {
      if (!Array.isArray(schema.enum) || schema.enum.length === 0) this.invalid('"enum" must be a non-empty array', path);
      values = schema.enum;
    }
    if (types) values = values.filter((v) => typeAdmits(types, jsonTypeOf(v)));
    if (values.length === 0) this.invalid('no "enum"/"const" value satisfies the schema', path);
    const texts = [...new Set(values.map((v) => JSON.stringify(v)))];
    return alt(...texts.map((t) => literal(t)));
  }

  /** `oneOf` is `anyOf` when no value can match two branches; we check that by type. */
  private checkDisjoint(branches: unknown[], path: string): void {
    const seen: JsonType[][] = [];
    for (const b of branches) {
      let types: JsonType[] | null = null;
      if (isSchemaObject(b)) {
        if ('const' in b) types = [jsonTypeOf(b.const)];
        else if (Array.isArray(b.enum)) types = b.enum.map(jsonTypeOf);
        else if ('type' in b) types = Array.isArray(b.type) ? (b.type as JsonType[]) : [b.type as JsonType];
      }
      const overlaps =
        types === null ||
        seen.some((prev) => types!.some((t) => prev.some((p) => typeAdmits([p], t) || typeAdmits([t], p))));
      if (overlaps) this.unsupported('"oneOf" whose branches are not of pairwise distinct types', path);
      seen.push(types!);
    }
  }

  private compileType(type: JsonType, schema: Schema, path: string): Expr {
    switch (type) {
      case 'null':
        return literal('null');
      case 'boolean':
        return alt(literal('true'), literal('false'));
      case 'string':
        return this.compileString(schema, path);
      case 'integer':
      case 'number':
        return this.compileNumber(type, schema, path);
      case 'array':
        return this.compileArray(schema, path);
      case 'object':
        return this.compileObject(schema, path);
    }
  }

  private count(schema: Schema, key: string, path: string): number | null {
    if (!(key in schema)) return null;
    const v = schema[key];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) this.invalid(`"${key}" must be a non-negative integer`, path);
    return v;
  }

  private compileString(schema: Schema, path: string): Expr {
    const minLength = this.count(schema, 'minLength', path);
    const maxLength = this.count(schema, 'maxLength', path);
    if (minLength !== null && maxLength !== null && minLength > maxLength) this.invalid('"minLength" exceeds "maxLength"', path);
    const hasLength = minLength !== null || maxLength !== null;
    if ('format' in schema) {
      const format = schema.format;
      if (typeof format !== 'string') this.invalid('"format" must be a string', path);
      const expr = STRING_FORMATS[format];
      if (!expr) this.unsupported(`"format": "${format}"`, path);
      if ('pattern' in schema) this.unsupported('"pattern" alongside "format"', path);
      if (hasLength) this.unsupported('"minLength"/"maxLength" alongside "format"', path);
      return seq(literal('"'), expr, literal('"'));
    }
    if ('pattern' in schema) {
      const pattern = schema.pattern;
      if (typeof pattern !== 'string') this.invalid('"pattern" must be a string', path);
      if (hasLength) this.unsupported('"minLength"/"maxLength" alongside "pattern"', path);
      const content = compileRegexSearch(pattern, `${this.context}: "pattern" at ${path}`);
      return seq(literal('"'), jsonEscapeContent(content), literal('"'));
    }
    if (!hasLength) return ref(genericJson(this.rules).string);
    return seq(literal('"'), repeat(JSON_STRING_CHAR, minLength ?? 0, maxLength ?? Infinity), literal('"'));
  }

  private compileNumber(type: 'integer' | 'number', schema: Schema, path: string): Expr {
    const read = (key: string): number | null => {
      if (!(key in schema)) return null;
      const v = schema[key];
      if (typeof v !== 'number' || !Number.isFinite(v)) this.invalid(`"${key}" must be a number`, path);
      return v;
    };
    const minimum = read('minimum');
    const maximum = read('maximum');
    const exclusiveMinimum = read('exclusiveMinimum');
    const exclusiveMaximum = read('exclusiveMaximum');
    if (minimum === null && maximum === null && exclusiveMinimum === null && exclusiveMaximum === null) {
      return type === 'integer' ? JSON_INTEGER : JSON_NUMBER;
    }
    // The tighter of the inclusive and exclusive forms on each side.
    let lower: Bound | null = minimum === null ? null : { value: minimum, exclusive: false };
    if (exclusiveMinimum !== null && (lower === null || exclusiveMinimum >= lower.value)) lower = { value: exclusiveMinimum, exclusive: true };
    let upper: Bound | null = maximum === null ? null : { value: maximum, exclusive: false };
    if (exclusiveMaximum !== null && (upper === null || exclusiveMaximum <= upper.value)) upper = { value: exclusiveMaximum, exclusive: true };

    if (type === 'integer') {
      // Integer n with real bounds = integer n with inclusive integer bounds.
      if (lower) lower = { value: lower.exclusive ? Math.floor(lower.value) + 1 : Math.ceil(lower.value), exclusive: false };
      if (upper) upper = { value: upper.exclusive ? Math.ceil(upper.value) - 1 : Math.floor(upper.value), exclusive: false };
    } else {
      for (const [b, key] of [[lower, 'minimum'], [upper, 'maximum']] as const) {
        if (b && !Number.isInteger(b.value)) this.unsupported(`"${key}"/"exclusive${key[0]!.toUpperCase()}${key.slice(1)}" with a non-integer value on a "number"`, path);
      }
    }
    // Bounds beyond the digit limit constrain nothing we can write.
    if (lower && lower.value < -MAX_BOUNDED_INT) lower = null;
    if (upper && upper.value > MAX_BOUNDED_INT) upper = null;
    const expr = boundedNumber(lower, upper, type === 'number');
    if (!expr) this.unsupported(`bounds that no ${type} of at most 15 digits satisfies ("minimum"/"maximum")`, path);
    return expr;
  }

  private compileArray(schema: Schema, path: string): Expr {
    const minItems = this.count(schema, 'minItems', path) ?? 0;
    const maxItems = this.count(schema, 'maxItems', path) ?? Infinity;
    if (minItems > maxItems) this.invalid('"minItems" exceeds "maxItems"', path);
    if (Array.isArray(schema.items)) this.unsupported('"items" as an array (tuple form; use "prefixItems")', path);
    const prefixSchemas = schema.prefixItems ?? [];
    if (!Array.isArray(prefixSchemas)) this.invalid('"prefixItems" must be an array', path);
    const prefix = prefixSchemas.map((s, i) => this.shared(`item${i}`, this.compile(s, `${path}/prefixItems/${i}`)));
    const restAllowed = schema.items !== false;
    const rest = restAllowed
      ? this.shared('item', 'items' in schema ? this.compile(schema.items, `${path}/items`) : ref(genericJson(this.rules).value))
      : null;

    // After j elements: may stop (if j >= minItems), or write element j (with a comma if j > 0).
    const sep = (j: number): Expr[] => (j > 0 ? [literal(',')] : []);
    const after = (j: number): Expr => {
      if (j < prefix.length) {
        const options: Expr[] = [];
        if (j >= minItems) options.push(seq());
        if (j + 1 <= maxItems) options.push(seq(...sep(j), prefix[j]!, after(j + 1)));
        if (options.length === 0) this.invalid('"minItems"/"maxItems" cannot be met', path);
        return alt(...options);
      }
      if (rest === null) {
        if (j < minItems) this.invalid('"minItems" exceeds the number of "prefixItems" with "items": false', path);
        return seq();
      }
      const lo = Math.max(0, minItems - j);
      const hi = maxItems - j;
      if (j > 0) return repeat(seq(literal(','), rest), lo, hi);
      if (hi === 0) return seq();
      const tail = repeat(seq(literal(','), rest), Math.max(0, lo - 1), hi - 1);
      return lo === 0 ? repeat(seq(rest, tail), 0, 1) : seq(rest, tail);
    };
    return seq(literal('['), after(0), literal(']'));
  }

  private compileObject(schema: Schema, path: string): Expr {
    const props = schema.properties ?? {};
    if (!isSchemaObject(props)) this.invalid('"properties" must be an object', path);
    const required = schema.required ?? [];
    if (!Array.isArray(required) || required.some((r) => typeof r !== 'string')) this.invalid('"required" must be an array of strings', path);
    const additional = schema.additionalProperties;
    if (additional !== undefined && typeof additional !== 'boolean' && !isSchemaObject(additional)) {
      this.invalid('"additionalProperties" must be a boolean or a schema', path);
    }
    const requiredSet = new Set(required as string[]);
    const entries: Array<{ key: string; schema: unknown; schemaPath: string }> = Object.entries(props).map(([key, s]) => ({
      key,
      schema: s,
      schemaPath: `${path}/properties/${key}`,
    }));
    for (const name of requiredSet) {
      if (Object.prototype.hasOwnProperty.call(props, name)) continue;
      if (additional === false) this.invalid(`required property "${name}" is not allowed by "additionalProperties": false`, path);
      entries.push({ key: name, schema: additional ?? true, schemaPath: `${path}/additionalProperties` });
    }

    if (entries.length === 0) {
      if (additional === false) return literal('{}');
      if (additional === undefined || additional === true) return ref(genericJson(this.rules).object);
      const value = this.shared('value', this.compile(additional, `${path}/additionalProperties`));
      const member = seq(ref(genericJson(this.rules).string), literal(':'), value);
      return seq(literal('{'), repeat(seq(member, repeat(seq(literal(','), member), 0)), 0, 1), literal('}'));
    }

    const members = entries.map((e) => ({
      required: requiredSet.has(e.key),
      expr: seq(jsonLiteral(e.key), literal(':'), this.shared(`prop-${e.key}`, this.compile(e.schema, e.schemaPath))),
    }));
    // Declared order. rest(i): members i.. after at least one was written (each with a comma).
    // first(i): members i.. when none was written yet.
    const rest = (i: number): Expr[] =>
      members.slice(i).map((m) => (m.required ? seq(literal(','), m.expr) : repeat(seq(literal(','), m.expr), 0, 1)));
    const first = (i: number): Expr => {
      if (i === members.length) return seq();
      const m = members[i]!;
      const take = seq(m.expr, ...rest(i + 1));
      return m.required ? take : alt(take, first(i + 1));
    };
    return seq(literal('{'), first(0), literal('}'));
  }
}
