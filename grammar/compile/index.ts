/**
 * Spec → grammar IR: the front half of the grammar engine. Pure; throws GrammarError (a 400
 * naming the problem) for specs it cannot honour exactly.
 */
import { GrammarError } from '../contract.js';
import { type Grammar, alt, literal } from '../ir.js';
import type { StructuredOutputSpec } from '../../proto/wire.js';
import { compileEbnf } from './ebnf.js';
import { genericJson } from './json-lexical.js';
import { JsonSchemaCompiler } from './json-schema.js';
import { compileRegexFull } from './regex.js';
import { RuleSet } from './rule-set.js';
import { compileToolCalls } from './tool-calls.js';

export function compileSpec(spec: StructuredOutputSpec): Grammar {
  switch (spec.kind) {
    case 'json_object': {
      const rules = new RuleSet();
      return rules.toGrammar(genericJson(rules).object);
    }
    case 'json_schema': {
      const rules = new RuleSet();
      return rules.toGrammar(new JsonSchemaCompiler(rules, spec.schema, '').compileRoot());
    }
    case 'regex': {
      if (typeof spec.pattern !== 'string') throw new GrammarError('invalid_regex', 'regex: the pattern must be a string');
      const rules = new RuleSet();
      return rules.toGrammar(rules.add('root', compileRegexFull(spec.pattern)));
    }
    case 'choice': {
      if (!Array.isArray(spec.choices) || spec.choices.length === 0) {
        throw new GrammarError('invalid_schema', 'choice: the list of choices is empty');
      }
      if (spec.choices.some((c) => typeof c !== 'string')) throw new GrammarError('invalid_schema', 'choice: every choice must be a string');
      const rules = new RuleSet();
      return rules.toGrammar(rules.add('root', alt(...[...new Set(spec.choices)].map((c) => literal(c)))));
    }
    case 'grammar':
      if (typeof spec.ebnf !== 'string') throw new GrammarError('invalid_grammar', 'grammar: the grammar must be a string');
      return compileEbnf(spec.ebnf);
    case 'tool_calls':
      return compileToolCalls(spec);
    default:
      throw new GrammarError('invalid_schema', `unknown structured output kind "${(spec as { kind: unknown }).kind}"`);
  }
}

export { MAX_INT_DIGITS, MAX_FRACTION_DIGITS, MAX_EXPONENT_DIGITS } from './json-lexical.js';
