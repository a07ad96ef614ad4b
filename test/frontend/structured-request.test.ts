/**
 * The request side of structured output and tool calling: body fields → StructuredOutputSpec,
 * and every refusal as a 400 naming the parameter and the problem (issue 16). Unit level: no
 * socket (validation.test.ts sends the same through a real frontend).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { DEFAULT_COMPILE_LIMITS, GrammarCompiler } from '../../grammar/index.js';
import { ApiError } from '../../frontend/errors.js';
import { checkRequestGrammar, promptOpensReasoning, resolveModelParsers, resolveToolCallFormat, type GrammarFields } from '../../frontend/openai/structured.js';
import { parseChatRequest, parseCompletionRequest, type ChatGenerationRequest } from '../../frontend/openai/validate.js';
import { LLAMA3_CHAT_TEMPLATE, QWEN2_CHAT_TEMPLATE, QWEN3_CHAT_TEMPLATE } from '../../workers/models/chat-templates.js';

const messages = [{ role: 'user', content: 'hi' }];
const chat = (extra: Record<string, unknown>) => parseChatRequest({ model: 'm', messages, ...extra });
const completion = (extra: Record<string, unknown>) => parseCompletionRequest({ model: 'm', prompt: 'x', ...extra });

/** The ApiError a call throws; fails the test when it does not throw one. */
function refusal(fn: () => unknown): ApiError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).status).toBe(400);
    return err as ApiError;
  }
  throw new Error('expected a 400');
}

function expect400(fn: () => unknown, param: string, message: RegExp): void {
  const err = refusal(fn);
  expect(err.param).toBe(param);
  expect(err.message).toMatch(message);
}

const checker = new GrammarCompiler({ limits: DEFAULT_COMPILE_LIMITS });
afterAll(() => checker.close());

/** The grammar check (off the event loop, at prepare time) refuses with a 400 on `param`. */
async function expect400Compiled(request: GrammarFields, param: string, message: RegExp): Promise<void> {
  const err = await checkRequestGrammar(request, checker).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ApiError);
  expect((err as ApiError).status).toBe(400);
  expect((err as ApiError).param).toBe(param);
  expect((err as ApiError).message).toMatch(message);
}

const weather = { type: 'function', function: { name: 'get_weather', description: 'weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } };
const time = { type: 'function', function: { name: 'now' } };
const schema = { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] };

describe('structured request: response_format', () => {
  it('text is no constraint; json_object and json_schema become specs', () => {
    expect(chat({ response_format: { type: 'text' } }).structured).toBeUndefined();
    expect(chat({}).structured).toBeUndefined();
    expect(chat({ response_format: { type: 'json_object' } }).structured).toEqual({ kind: 'json_object' });
    expect(chat({ response_format: { type: 'json_schema', json_schema: { name: 'out', schema, strict: true } } }).structured).toEqual({ kind: 'json_schema', schema });
    // OpenAI makes the schema optional: any JSON value.
    expect(chat({ response_format: { type: 'json_schema', json_schema: { name: 'out' } } }).structured).toEqual({ kind: 'json_schema', schema: {} });
  });

  it('bad shapes are 400s on response_format naming the field', () => {
    expect400(() => chat({ response_format: 'json' }), 'response_format', /must be an object with a string 'type'/);
    expect400(() => chat({ response_format: { type: 'yaml' } }), 'response_format', /'text', 'json_object' or 'json_schema'/);
    expect400(() => chat({ response_format: { type: 'json_schema' } }), 'response_format', /json_schema' must be an object/);
    expect400(() => chat({ response_format: { type: 'json_schema', json_schema: { schema } } }), 'response_format', /json_schema\.name' is required/);
    expect400(() => chat({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: 'nope' } } }), 'response_format', /json_schema\.schema' must be a JSON Schema \(an object or a boolean\)/);
    expect400(() => chat({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema, strict: 'yes' } } }), 'response_format', /strict' must be a boolean/);
  });

  it('an unsupported schema feature is a 400 naming the feature and where it sits', async () => {
    const unique = { type: 'object', properties: { tags: { type: 'array', items: { type: 'string' }, uniqueItems: true } } };
    await expect400Compiled(chat({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: unique } } }), 'response_format', /"uniqueItems" is not supported.*#\/properties\/tags/);
  });

  it('an invalid schema is a 400 that says what is wrong', async () => {
    await expect400Compiled(chat({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { $ref: '#/$defs/missing' } } } }), 'response_format', /\$ref.*does not exist/);
    await expect400Compiled(chat({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'wizard' } } } }), 'response_format', /wizard/);
  });
});

describe('structured request: vLLM fields', () => {
  it('structured_outputs: json (object or JSON text), regex, choice, grammar, json_object', () => {
    expect(chat({ structured_outputs: { json: schema } }).structured).toEqual({ kind: 'json_schema', schema });
    expect(chat({ structured_outputs: { json: JSON.stringify(schema) } }).structured).toEqual({ kind: 'json_schema', schema });
    expect(chat({ structured_outputs: { regex: '[a-z]+' } }).structured).toEqual({ kind: 'regex', pattern: '[a-z]+' });
    expect(chat({ structured_outputs: { choice: ['yes', 'no'] } }).structured).toEqual({ kind: 'choice', choices: ['yes', 'no'] });
    expect(chat({ structured_outputs: { grammar: 'root ::= "a" | "b"' } }).structured).toEqual({ kind: 'grammar', ebnf: 'root ::= "a" | "b"' });
    expect(chat({ structured_outputs: { json_object: true } }).structured).toEqual({ kind: 'json_object' });
    // Tuning options that our compact output already satisfies are accepted.
    expect(chat({ structured_outputs: { regex: 'a', disable_any_whitespace: true, disable_fallback: false } }).structured).toEqual({ kind: 'regex', pattern: 'a' });
  });

  it('the legacy guided_* names (vLLM <= 0.10) work the same', () => {
    expect(chat({ guided_json: schema }).structured).toEqual({ kind: 'json_schema', schema });
    expect(chat({ guided_json: JSON.stringify(schema) }).structured).toEqual({ kind: 'json_schema', schema });
    expect(chat({ guided_regex: '\\d{3}' }).structured).toEqual({ kind: 'regex', pattern: '\\d{3}' });
    expect(chat({ guided_choice: ['a', 'b'] }).structured).toEqual({ kind: 'choice', choices: ['a', 'b'] });
    expect(chat({ guided_grammar: 'root ::= "x"' }).structured).toEqual({ kind: 'grammar', ebnf: 'root ::= "x"' });
    expect(chat({ guided_regex: null }).structured).toBeUndefined();
  });

  it('they work on /v1/completions too', async () => {
    expect(completion({ structured_outputs: { choice: ['x', 'y'] } }).structured).toEqual({ kind: 'choice', choices: ['x', 'y'] });
    expect(completion({ guided_regex: 'a+' }).structured).toEqual({ kind: 'regex', pattern: 'a+' });
    expect(completion({ response_format: { type: 'json_object' } }).structured).toEqual({ kind: 'json_object' });
    await expect400Compiled(completion({ guided_json: { type: 'array', uniqueItems: true } }), 'guided_json', /"uniqueItems" is not supported/);
  });

  it('bad values are 400s on the field they came in', () => {
    expect400(() => chat({ structured_outputs: 'regex' }), 'structured_outputs', /must be an object/);
    expect400(() => chat({ structured_outputs: {} }), 'structured_outputs', /must set one of json, regex, choice, grammar, json_object/);
    expect400(() => chat({ structured_outputs: { regex: 'a', choice: ['a'] } }), 'structured_outputs', /only one of .* got regex and choice/);
    expect400(() => chat({ structured_outputs: { structural_tag: '{}' } }), 'structured_outputs', /'structured_outputs\.structural_tag' is not supported/);
    expect400(() => chat({ structured_outputs: { json: '{not json' } }), 'structured_outputs', /structured_outputs\.json' is a string but not valid JSON/);
    expect400(() => chat({ structured_outputs: { json: [1] } }), 'structured_outputs', /must be a JSON Schema \(an object or a boolean/);
    expect400(() => chat({ structured_outputs: { choice: [] } }), 'structured_outputs', /non-empty array of strings/);
    expect400(() => chat({ structured_outputs: { json_object: 'yes' } }), 'structured_outputs', /json_object' must be true/);
    expect400(() => chat({ guided_choice: ['a', 2] }), 'guided_choice', /non-empty array of strings/);
    expect400(() => chat({ guided_regex: '' }), 'guided_regex', /non-empty string/);
  });

  it('a spec whose automaton would be too large is refused at the frontend (its grammar check), not at the worker', async () => {
    await expect400Compiled(chat({ guided_json: { type: 'array', minItems: 1_000_000 } }), 'guided_json', /too large/);
    // The same refusal every time (refusals are never cached as valid).
    await expect400Compiled(chat({ guided_json: { type: 'array', minItems: 1_000_000 } }), 'guided_json', /too large/);
  });

  it('a regex or grammar the engine cannot compile is a 400 naming the problem', async () => {
    await expect400Compiled(chat({ structured_outputs: { regex: '(unclosed' } }), 'structured_outputs', /regex/i);
    await expect400Compiled(chat({ guided_regex: 'a(?=b)' }), 'guided_regex', /regex/i);
    await expect400Compiled(chat({ guided_grammar: 'root ::= missing' }), 'guided_grammar', /missing/);
  });

  it('two sources of constraint are a 400 naming both', () => {
    expect400(() => chat({ response_format: { type: 'json_object' }, structured_outputs: { regex: 'a' } }), 'structured_outputs', /'response_format' and 'structured_outputs'/);
    expect400(() => chat({ guided_json: schema, guided_regex: 'a' }), 'guided_regex', /'guided_json' and 'guided_regex'/);
    expect400(() => completion({ structured_outputs: { choice: ['a'] }, guided_choice: ['b'] }), 'guided_choice', /'structured_outputs' and 'guided_choice'/);
    // text is no constraint, so it combines with anything.
    expect(chat({ response_format: { type: 'text' }, guided_choice: ['a'] }).structured).toEqual({ kind: 'choice', choices: ['a'] });
  });
});

describe('structured request: tools and tool_choice', () => {
  it('tools are kept as sent for the template; tool_choice defaults to auto with tools, none without', () => {
    const r = chat({ tools: [weather, time] });
    expect(r.tools).toEqual([weather, time]);
    expect(r.toolChoice).toBe('auto');
    expect(r.forcedToolCalls).toBeUndefined();
    expect(r.structured).toBeUndefined();
    expect(chat({}).toolChoice).toBe('none');
    expect(chat({ tools: [weather], tool_choice: 'none' }).toolChoice).toBe('none');
  });

  it("'required' forces any of the tools, parallel unless parallel_tool_calls is false", () => {
    expect(chat({ tools: [weather, time], tool_choice: 'required' }).forcedToolCalls).toEqual({
      tools: [
        { name: 'get_weather', parameters: weather.function.parameters },
        { name: 'now', parameters: undefined },
      ],
      parallel: true,
    });
    expect(chat({ tools: [weather, time], tool_choice: 'required', parallel_tool_calls: false }).forcedToolCalls!.parallel).toBe(false);
  });

  it('a named function forces exactly one call of that tool', () => {
    const r = chat({ tools: [weather, time], tool_choice: { type: 'function', function: { name: 'now' } } });
    expect(r.toolChoice).toEqual({ name: 'now' });
    expect(r.forcedToolCalls).toEqual({ tools: [{ name: 'now', parameters: undefined }], parallel: false });
  });

  it('a tool without a function name is a 400 naming its index', () => {
    expect400(() => chat({ tools: [weather, { type: 'function', function: { description: 'x' } }] }), 'tools[1]', /'tools\[1\]\.function\.name' is required/);
    expect400(() => chat({ tools: [{ type: 'function', function: { name: '' } }] }), 'tools[0]', /function name/);
    expect400(() => chat({ tools: [{ type: 'function' }] }), 'tools[0]', /must be \{type: 'function'/);
    expect400(() => chat({ tools: ['x'] }), 'tools[0]', /must be \{type: 'function'/);
    expect400(() => chat({ tools: {} }), 'tools', /must be an array/);
  });

  it('parameters must be an object; duplicate names are refused', () => {
    expect400(() => chat({ tools: [{ type: 'function', function: { name: 'f', parameters: 'x' } }] }), 'tools[0].function.parameters', /must be a JSON Schema object/);
    expect400(() => chat({ tools: [weather, time, weather] }), 'tools[2]', /'get_weather' is already used by 'tools\[0\]'/);
  });

  it('tool_choice naming an unknown function is a 400 naming it', () => {
    expect400(() => chat({ tools: [weather], tool_choice: { type: 'function', function: { name: 'get_time' } } }), 'tool_choice', /not in 'tools': 'get_time'/);
    expect400(() => chat({ tool_choice: 'required' }), 'tool_choice', /needs 'tools'/);
    expect400(() => chat({ tools: [weather], tool_choice: 'sometimes' }), 'tool_choice', /'none', 'auto', 'required'/);
    expect400(() => chat({ tools: [weather], parallel_tool_calls: 'no' }), 'parallel_tool_calls', /must be a boolean/);
  });

  it("a forced tool's unsupported parameters schema is a 400 on tools[i].function.parameters", async () => {
    const bad = { type: 'function', function: { name: 'tag', parameters: { type: 'object', properties: { t: { type: 'array', uniqueItems: true } } } } };
    await expect400Compiled(chat({ tools: [weather, bad], tool_choice: 'required' }), 'tools[1].function.parameters', /function 'tag'.*"uniqueItems" is not supported/);
    await expect400Compiled(chat({ tools: [weather, bad], tool_choice: { type: 'function', function: { name: 'tag' } } }), 'tools[1].function.parameters', /"uniqueItems"/);
    // Not forced: the schema only reaches the template, so nothing is compiled or refused.
    expect(chat({ tools: [weather, bad], tool_choice: 'auto' }).forcedToolCalls).toBeUndefined();
    // A forced call of another tool does not compile this one.
    expect(chat({ tools: [weather, bad], tool_choice: { type: 'function', function: { name: 'get_weather' } } }).forcedToolCalls!.tools).toHaveLength(1);
  });

  it('a constraint plus a forcing tool_choice is a 400; with auto or none it is allowed', () => {
    expect400(() => chat({ tools: [weather], tool_choice: 'required', response_format: { type: 'json_object' } }), 'tool_choice', /cannot be combined with 'response_format'/);
    expect400(() => chat({ tools: [weather], tool_choice: { type: 'function', function: { name: 'get_weather' } }, guided_regex: 'a' }), 'tool_choice', /'guided_regex'/);
    expect(chat({ tools: [weather], tool_choice: 'auto', response_format: { type: 'json_object' } }).structured).toEqual({ kind: 'json_object' });
  });
});

describe('structured request: the served model decides formats', () => {
  const resolve = (r: ChatGenerationRequest, template: string | undefined, toolCallParser: 'auto' | 'hermes' | 'llama3_json' | 'mistral' = 'auto', reasoningParser: 'none' | 'think' = 'none') => {
    resolveModelParsers(r, template, { toolCallParser, reasoningParser });
    return r;
  };

  it('auto reads the format from the chat template; a flag overrides it', () => {
    // make-tiny's templates speak their families' formats.
    expect(resolveToolCallFormat('auto', QWEN3_CHAT_TEMPLATE)).toBe('hermes');
    expect(resolveToolCallFormat('auto', QWEN2_CHAT_TEMPLATE)).toBe('hermes');
    expect(resolveToolCallFormat('auto', LLAMA3_CHAT_TEMPLATE)).toBe('llama3_json');
    expect(resolveToolCallFormat('auto', '{{ messages }}')).toBeUndefined();
    expect(resolveToolCallFormat('auto', undefined)).toBeUndefined();
    expect(resolveToolCallFormat('mistral', QWEN3_CHAT_TEMPLATE)).toBe('mistral');
    expect(resolve(chat({ tools: [weather] }), QWEN3_CHAT_TEMPLATE).toolCallFormat).toBe('hermes');
    expect(resolve(chat({ tools: [weather] }), QWEN3_CHAT_TEMPLATE, 'llama3_json').toolCallFormat).toBe('llama3_json');
  });

  it('no tools or tool_choice none: no tool-call parsing', () => {
    expect(resolve(chat({}), QWEN3_CHAT_TEMPLATE).toolCallFormat).toBeUndefined();
    expect(resolve(chat({ tools: [weather], tool_choice: 'none' }), QWEN3_CHAT_TEMPLATE).toolCallFormat).toBeUndefined();
  });

  it('a forced call becomes a tool_calls spec in the model format, Hermes when the template says nothing', () => {
    const forced = resolve(chat({ tools: [weather, time], tool_choice: 'required' }), QWEN3_CHAT_TEMPLATE, 'mistral');
    expect(forced.structured).toEqual({ kind: 'tool_calls', format: 'mistral', tools: forced.forcedToolCalls!.tools, parallel: true });
    const unknown = resolve(chat({ tools: [weather], tool_choice: { type: 'function', function: { name: 'get_weather' } } }), LLAMA3_CHAT_TEMPLATE.replace(/ipython/g, 'x'));
    expect(unknown.toolCallFormat).toBe('hermes');
    expect(unknown.structured).toMatchObject({ kind: 'tool_calls', format: 'hermes', parallel: false });
    // auto with an unknown format: nothing to parse, nothing forced.
    const auto = resolve(chat({ tools: [weather] }), '{{ messages }}');
    expect(auto.toolCallFormat).toBeUndefined();
    expect(auto.structured).toBeUndefined();
  });

  it('--reasoning-parser think marks chat requests; the prompt tail says whether reasoning is already open', () => {
    expect(resolve(chat({}), undefined, 'auto', 'think').reasoningParser).toBe('think');
    expect(resolve(chat({}), undefined).reasoningParser).toBeUndefined();
    const bytes = (s: string) => Array.from(new TextEncoder().encode(s));
    const text = (id: number) => String.fromCharCode(id);
    expect(promptOpensReasoning(bytes('<|im_start|>assistant\n<think>\n'), text)).toBe(true);
    expect(promptOpensReasoning(bytes('<|im_start|>assistant\n'), text)).toBe(false);
    expect(promptOpensReasoning(bytes('assistant\n<think>\n\n</think>\n\n'), text)).toBe(false);
  });
});

describe('assistant reasoning_content in the history', () => {
  it('is kept for the chat template (Qwen3 renders it), and must be a string on an assistant message', () => {
    const r = parseChatRequest({ model: 'm', messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'Hello', reasoning_content: 'they greet' }, { role: 'user', content: 'and?' }] });
    expect(r.messages[1]).toMatchObject({ role: 'assistant', content: 'Hello', reasoning_content: 'they greet' });
    const bad = (m: Record<string, unknown>): ApiError => {
      try {
        parseChatRequest({ model: 'm', messages: [m] });
      } catch (err) {
        return err as ApiError;
      }
      throw new Error('expected a 400');
    };
    expect(bad({ role: 'assistant', content: 'x', reasoning_content: 3 }).param).toBe('messages[0].reasoning_content');
    expect(bad({ role: 'user', content: 'x', reasoning_content: 'y' }).message).toMatch(/assistant message/);
  });
});
