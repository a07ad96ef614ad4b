/**
 * The grammar that forces tool calls (`tool_choice: "required"` or a named function):
 *   open  callPrefix CALL callSuffix  (separator callPrefix CALL callSuffix)*  close
 * where CALL = {"name":"<fn>","<argumentsKey>":<the tool's parameters schema>} for any of the
 * offered tools, and the repetition is absent unless `parallel`. The framing strings come from
 * grammar/tool-calls/formats.ts, which the tool-call parser reads too.
 */
import { GrammarError } from '../contract.js';
import { type Expr, type Grammar, alt, literal, ref, repeat, seq } from '../ir.js';
import { TOOL_CALL_FORMATS } from '../tool-calls/formats.js';
import type { StructuredOutputSpec } from '../../proto/wire.js';
import { JsonSchemaCompiler } from './json-schema.js';
import { genericJson } from './json-lexical.js';
import { RuleSet } from './rule-set.js';

type ToolCallsSpec = Extract<StructuredOutputSpec, { kind: 'tool_calls' }>;

export function compileToolCalls(spec: ToolCallsSpec): Grammar {
  const format = TOOL_CALL_FORMATS[spec.format];
  if (!format) throw new GrammarError('invalid_schema', `tool_calls: unknown tool-call format "${String(spec.format)}"`);
  if (!Array.isArray(spec.tools) || spec.tools.length === 0) throw new GrammarError('invalid_schema', 'tool_calls: no tools to call');
  const rules = new RuleSet();
  const seen = new Set<string>();
  const calls = spec.tools.map((tool, i) => {
    if (typeof tool.name !== 'string' || tool.name === '') throw new GrammarError('invalid_schema', `tool_calls: tools[${i}] has no name`);
    if (seen.has(tool.name)) throw new GrammarError('invalid_schema', `tool_calls: tool "${tool.name}" is listed twice`);
    seen.add(tool.name);
    // OpenAI: omitted parameters means a function that takes no declared arguments.
    const args =
      tool.parameters === undefined || tool.parameters === null
        ? ref(genericJson(rules).object)
        : ref(new JsonSchemaCompiler(rules, tool.parameters, `t${i}-`, `tools[${i}] "${tool.name}" parameters`).compileRoot());
    return seq(literal(`{"name":${JSON.stringify(tool.name)},${JSON.stringify(format.argumentsKey)}:`), args, literal('}'));
  });
  const call = ref(rules.add('tool-call', seq(literal(format.callPrefix), alt(...calls), literal(format.callSuffix))));
  const more: Expr[] = spec.parallel ? [repeat(seq(literal(format.separator), call), 0)] : [];
  const root = rules.add('root', seq(literal(format.open), call, ...more, literal(format.close)));
  return rules.toGrammar(root);
}
