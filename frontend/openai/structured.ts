/**
 * Request fields that constrain the output, turned into one StructuredOutputSpec:
 *   - OpenAI `response_format` (`json_object`, `json_schema`);
 *   - vLLM's `structured_outputs: {json | regex | choice | grammar | json_object}` and its
 *     older `guided_json` / `guided_regex` / `guided_choice` / `guided_grammar` (vLLM <= 0.10);
 *   - `tools` with `tool_choice: "required"` or a named function (a forced tool call).
 * At most one source per request. Every spec is compiled before routing (checkRequestGrammar,
 * on a thread, within the compile budget), so a schema the grammar engine cannot honour is a
 * 400 naming the feature and the request field.
 *
 * The tool-call format depends on the served model (its chat template, or
 * `--tool-call-parser`), which validation does not know yet: a forced call is kept as
 * `ForcedToolCalls` and becomes a `tool_calls` spec in `resolveModelParsers`, at prepare time.
 */
import { GrammarError, detectToolCallFormat } from '../../grammar/index.js';
import { isObject, type StructuredOutputSpec, type ToolCallFormatName } from '../../proto/wire.js';
import { ApiError, badRequest, quoteInput } from '../errors.js';

/** `--tool-call-parser`: a model family's format, or `auto` (read from the chat template). */
export const TOOL_CALL_PARSERS = ['auto', 'hermes', 'llama3_json', 'mistral'] as const;
export type ToolCallParserOption = (typeof TOOL_CALL_PARSERS)[number];
/** `--reasoning-parser`: `think` splits `<think>…</think>` into `reasoning_content`. */
export const REASONING_PARSERS = ['none', 'think'] as const;
export type ReasoningParserOption = (typeof REASONING_PARSERS)[number];

/** What the served model's output is parsed with; frontend-wide flags, one value per process. */
export interface ModelParserOptions {
  toolCallParser: ToolCallParserOption;
  reasoningParser: ReasoningParserOption;
}

export const DEFAULT_MODEL_PARSERS: ModelParserOptions = { toolCallParser: 'auto', reasoningParser: 'none' };

/** A tool as the output grammar needs it. `parameters` undefined: any JSON object. */
export interface ToolSignature {
  name: string;
  parameters: unknown;
}

/** OpenAI `tool_choice`, normalized; `{name}` is a named function. */
export type ToolChoice = 'none' | 'auto' | 'required' | { name: string };

/** `tool_choice` that forces a call: the tools it may call and whether several calls may follow. */
export interface ForcedToolCalls {
  tools: ToolSignature[];
  parallel: boolean;
}

/** The fields of a constraint, with the request field each came from (for 400s). */
export interface OutputConstraint {
  spec: StructuredOutputSpec;
  param: string;
}

type Body = Record<string, unknown>;

const present = (body: Body, key: string): boolean => body[key] !== undefined && body[key] !== null;

/** vLLM's legacy field names, each one constraint kind. */
const GUIDED_FIELDS = ['guided_json', 'guided_regex', 'guided_choice', 'guided_grammar'] as const;
/** The keys of vLLM's `structured_outputs` that pick the constraint (exactly one). */
const STRUCTURED_OUTPUT_KINDS = ['json', 'regex', 'choice', 'grammar', 'json_object'] as const;
/**
 * Options of `structured_outputs` that only relax or tune what vLLM produces; our grammars
 * already emit compact JSON with no extra properties, which every such setting admits.
 */
const STRUCTURED_OUTPUT_OPTIONS = new Set(['disable_fallback', 'disable_any_whitespace', 'disable_additional_properties']);

/**
 * The request's output constraint, from `response_format`, `structured_outputs` or a
 * `guided_*` field, checked for shape; undefined when there is none. `checkRequestGrammar`
 * compiles it later, off the event loop.
 */
export function parseOutputConstraint(body: Body): OutputConstraint | undefined {
  const found: OutputConstraint[] = [];
  const responseFormat = parseResponseFormat(body);
  if (responseFormat) found.push({ spec: responseFormat, param: 'response_format' });
  if (present(body, 'structured_outputs')) found.push({ spec: parseStructuredOutputs(body.structured_outputs), param: 'structured_outputs' });
  for (const field of GUIDED_FIELDS) {
    if (present(body, field)) found.push({ spec: guidedSpec(field, body[field]), param: field });
  }
  if (found.length === 0) return undefined;
  if (found.length > 1) {
    throw badRequest(`only one output constraint is allowed per request, but both '${found[0]!.param}' and '${found[1]!.param}' are set`, found[1]!.param);
  }
  return found[0];
}

/** `{type: 'text'}` is the default: no constraint. */
function parseResponseFormat(body: Body): StructuredOutputSpec | undefined {
  if (!present(body, 'response_format')) return undefined;
  const value = body.response_format;
  if (!isObject(value) || typeof value.type !== 'string') {
    throw badRequest("'response_format' must be an object with a string 'type'", 'response_format');
  }
  switch (value.type) {
    case 'text':
      return undefined;
    case 'json_object':
      return { kind: 'json_object' };
    case 'json_schema': {
      const format = value.json_schema;
      if (!isObject(format)) throw badRequest("'response_format.json_schema' must be an object {name, schema, strict}", 'response_format');
      if (typeof format.name !== 'string' || format.name.length === 0) {
        throw badRequest("'response_format.json_schema.name' is required and must be a non-empty string", 'response_format');
      }
      if (present(format, 'strict') && typeof format.strict !== 'boolean') {
        throw badRequest("'response_format.json_schema.strict' must be a boolean", 'response_format');
      }
      // OpenAI makes `schema` optional; without one any JSON value is allowed. `strict: false`
      // still gets the schema enforced: a stricter output than asked for is always valid.
      if (!present(format, 'schema')) return { kind: 'json_schema', schema: {} };
      // Boolean schemas are JSON Schema too (true: any value, false: none, which compiles to a 400).
      if (!isObject(format.schema) && typeof format.schema !== 'boolean') throw badRequest("'response_format.json_schema.schema' must be a JSON Schema (an object or a boolean)", 'response_format');
      return { kind: 'json_schema', schema: format.schema };
    }
    default:
      throw badRequest("'response_format.type' must be 'text', 'json_object' or 'json_schema'", 'response_format');
  }
}

/** vLLM `structured_outputs`: exactly one of json, regex, choice, grammar, json_object. */
function parseStructuredOutputs(value: unknown): StructuredOutputSpec {
  const param = 'structured_outputs';
  if (!isObject(value)) throw badRequest(`'${param}' must be an object with one of ${STRUCTURED_OUTPUT_KINDS.join(', ')}`, param);
  const kinds: string[] = [];
  for (const key of Object.keys(value)) {
    if (value[key] === undefined || value[key] === null) continue;
    if ((STRUCTURED_OUTPUT_KINDS as readonly string[]).includes(key)) {
      // `json_object: false` asks for nothing.
      if (key === 'json_object' && value[key] === false) continue;
      kinds.push(key);
    } else if (STRUCTURED_OUTPUT_OPTIONS.has(key)) {
      if (typeof value[key] !== 'boolean') throw badRequest(`'${param}.${quoteInput(key)}' must be a boolean`, param);
    } else {
      throw badRequest(`'${param}.${quoteInput(key)}' is not supported (supported: ${[...STRUCTURED_OUTPUT_KINDS, ...STRUCTURED_OUTPUT_OPTIONS].join(', ')})`, param);
    }
  }
  if (kinds.length === 0) throw badRequest(`'${param}' must set one of ${STRUCTURED_OUTPUT_KINDS.join(', ')}`, param);
  if (kinds.length > 1) throw badRequest(`'${param}' must set only one of ${STRUCTURED_OUTPUT_KINDS.join(', ')}, got ${kinds.join(' and ')}`, param);
  const kind = kinds[0]!;
  const raw = value[kind];
  const at = `${param}.${kind}`;
  switch (kind) {
    case 'json':
      return { kind: 'json_schema', schema: jsonSchemaValue(raw, at, param) };
    case 'regex':
      return { kind: 'regex', pattern: stringValue(raw, at, param) };
    case 'choice':
      return { kind: 'choice', choices: choiceList(raw, at, param) };
    case 'grammar':
      return { kind: 'grammar', ebnf: stringValue(raw, at, param) };
    default:
      if (raw !== true) throw badRequest(`'${at}' must be true`, param);
      return { kind: 'json_object' };
  }
}

function guidedSpec(field: (typeof GUIDED_FIELDS)[number], value: unknown): StructuredOutputSpec {
  switch (field) {
    case 'guided_json':
      return { kind: 'json_schema', schema: jsonSchemaValue(value, field, field) };
    case 'guided_regex':
      return { kind: 'regex', pattern: stringValue(value, field, field) };
    case 'guided_choice':
      return { kind: 'choice', choices: choiceList(value, field, field) };
    case 'guided_grammar':
      return { kind: 'grammar', ebnf: stringValue(value, field, field) };
  }
}

/** A JSON Schema given as an object or as JSON text (vLLM accepts both). */
function jsonSchemaValue(value: unknown, at: string, param: string): Body | boolean {
  let schema = value;
  if (typeof value === 'string') {
    try {
      schema = JSON.parse(value) as unknown;
    } catch (err) {
      throw badRequest(`'${at}' is a string but not valid JSON: ${(err as Error).message}`, param);
    }
  }
  if (!isObject(schema) && typeof schema !== 'boolean') throw badRequest(`'${at}' must be a JSON Schema (an object or a boolean, or its JSON text)`, param);
  return schema;
}

function stringValue(value: unknown, at: string, param: string): string {
  if (typeof value !== 'string' || value.length === 0) throw badRequest(`'${at}' must be a non-empty string`, param);
  return value;
}

function choiceList(value: unknown, at: string, param: string): string[] {
  if (!Array.isArray(value) || value.length === 0 || !value.every((c) => typeof c === 'string')) {
    throw badRequest(`'${at}' must be a non-empty array of strings`, param);
  }
  return value as string[];
}

/**
 * Where specs are compiled to prove them valid: off the event loop, within the compile budget
 * (a GrammarCompiler without a vocabulary: grammar/off-thread/compiler.ts). Undefined: known good.
 */
export interface GrammarChecker {
  prepare(spec: StructuredOutputSpec, signal?: AbortSignal): Promise<void> | undefined;
}

/** What of a request is compiled before it is routed. */
export interface GrammarFields {
  structured?: StructuredOutputSpec;
  /** The request field `structured` came from (for the 400's `param`). */
  structuredParam?: string;
  forcedToolCalls?: ForcedToolCalls;
  /** The request's `tools` as sent (forced-call refusals name the index). */
  tools?: unknown[];
}

/**
 * Compile the request's output constraint, or the grammar of its forced tool calls, on the
 * checker's threads. The grammar engine's refusal (naming the feature, or the budget) becomes a
 * 400 on the field it came from. Resolves early when `signal` aborts (the caller checks it).
 */
export async function checkRequestGrammar(request: GrammarFields, checker: GrammarChecker, signal?: AbortSignal): Promise<void> {
  if (request.structured !== undefined && request.forcedToolCalls === undefined) {
    try {
      await checker.prepare(request.structured, signal);
    } catch (err) {
      throw grammarBadRequest(err, request.structuredParam ?? 'response_format', '');
    }
  }
  if (request.forcedToolCalls !== undefined) await checkForcedToolCalls(request.forcedToolCalls, request.tools ?? [], checker, signal);
}

/**
 * The calls a `tool_choice` forces, compiled as one grammar: a 400 on
 * `tools[i].function.parameters` when one tool's schema is at fault, else on `tools`.
 */
async function checkForcedToolCalls(forced: ForcedToolCalls, rawTools: readonly unknown[], checker: GrammarChecker, signal: AbortSignal | undefined): Promise<void> {
  try {
    // The model's format is not known yet; its framing is literal text, which cannot change
    // whether the schemas compile, so any format proves the spec valid.
    await checker.prepare({ kind: 'tool_calls', format: 'hermes', ...forced }, signal);
  } catch (err) {
    if (!(err instanceof GrammarError) || err.kind === 'budget_exceeded') throw grammarBadRequest(err, 'tools', "'tools' (forced by 'tool_choice'): ");
    for (const tool of forced.tools) {
      if (tool.parameters === undefined) continue;
      const i = rawTools.findIndex((t) => isObject(t) && isObject(t.function) && t.function.name === tool.name);
      try {
        await checker.prepare({ kind: 'json_schema', schema: tool.parameters }, signal);
      } catch (toolErr) {
        throw grammarBadRequest(toolErr, `tools[${i}].function.parameters`, `'tools[${i}].function.parameters' (function '${quoteInput(tool.name)}'): `);
      }
    }
    // Every schema compiles alone: together they are too large.
    throw grammarBadRequest(err, 'tools', "'tools' (forced by 'tool_choice'): ");
  }
}

function grammarBadRequest(err: unknown, param: string, prefix: string): unknown {
  if (!(err instanceof GrammarError)) return err;
  return new ApiError('invalid_argument', `${prefix}${err.message}`, param, { cause: err });
}

// ---- tools ------------------------------------------------------------------------------

/**
 * `tools`: an array of `{type: 'function', function: {name, description?, parameters?}}` with
 * distinct names. Returned as the grammar's signatures, in order.
 */
export function parseTools(value: unknown): ToolSignature[] {
  if (!Array.isArray(value)) throw badRequest("'tools' must be an array", 'tools');
  const seen = new Map<string, number>();
  return value.map((tool, i) => {
    const at = `tools[${i}]`;
    if (!isObject(tool) || tool.type !== 'function' || !isObject(tool.function)) {
      throw badRequest(`'${at}' must be {type: 'function', function: {name: string, ...}}`, at);
    }
    const name = tool.function.name;
    if (typeof name !== 'string' || name.length === 0) {
      throw badRequest(`'${at}.function.name' is required: every tool needs a function name (a non-empty string)`, at);
    }
    const earlier = seen.get(name);
    if (earlier !== undefined) throw badRequest(`'${at}': the function name '${quoteInput(name)}' is already used by 'tools[${earlier}]'`, at);
    seen.set(name, i);
    const parameters = tool.function.parameters;
    if (parameters !== undefined && parameters !== null && !isObject(parameters)) {
      throw badRequest(`'${at}.function.parameters' must be a JSON Schema object`, `${at}.function.parameters`);
    }
    return { name, parameters: parameters ?? undefined };
  });
}

const TOOL_CHOICE_SHAPE = "'tool_choice' must be 'none', 'auto', 'required' or {type: 'function', function: {name}}";

/** `tool_choice`, checked for shape and against `tools`. Absent: 'auto' with tools, else 'none'. */
export function parseToolChoice(value: unknown, tools: readonly ToolSignature[] | undefined): ToolChoice {
  if (value === undefined || value === null) return tools && tools.length > 0 ? 'auto' : 'none';
  if (value === 'none' || value === 'auto') return value;
  if (value !== 'required' && !isObject(value)) throw badRequest(TOOL_CHOICE_SHAPE, 'tool_choice');
  if (!tools || tools.length === 0) throw badRequest("'tool_choice' needs 'tools'", 'tool_choice');
  if (value === 'required') return 'required';
  const name = isObject(value.function) ? value.function.name : undefined;
  if (value.type !== 'function' || typeof name !== 'string') throw badRequest(TOOL_CHOICE_SHAPE, 'tool_choice');
  if (!tools.some((t) => t.name === name)) {
    throw badRequest(`'tool_choice' names a function that is not in 'tools': '${quoteInput(name)}'`, 'tool_choice');
  }
  return { name };
}

/**
 * The calls a `tool_choice` forces; undefined for 'none'/'auto'. A named function is called
 * exactly once, as OpenAI does. Compiled later, off the event loop (checkRequestGrammar).
 */
export function forcedToolCalls(choice: ToolChoice, tools: readonly ToolSignature[], parallelToolCalls: boolean): ForcedToolCalls | undefined {
  if (choice === 'none' || choice === 'auto') return undefined;
  const indexes = choice === 'required' ? tools.map((_, i) => i) : [tools.findIndex((t) => t.name === choice.name)];
  return { tools: indexes.map((i) => tools[i]!), parallel: choice === 'required' && parallelToolCalls };
}

// ---- the served model's parsers -----------------------------------------------------------

/** What a chat request learns from the served model; read by the response side. */
export interface ModelParserFields {
  tools?: unknown[];
  toolChoice: ToolChoice;
  forcedToolCalls?: ForcedToolCalls;
  structured?: StructuredOutputSpec;
  toolCallFormat?: ToolCallFormatName;
  reasoningParser?: 'think';
}

/** The format tool calls are parsed (and forced) in: the flag, else the chat template's, else none. */
export function resolveToolCallFormat(option: ToolCallParserOption, chatTemplate: string | undefined): ToolCallFormatName | undefined {
  if (option !== 'auto') return option;
  return chatTemplate === undefined ? undefined : detectToolCallFormat(chatTemplate);
}

/**
 * Set the model-dependent fields of a chat request: the tool-call format when tools may be
 * called (tool_choice not 'none'), the forced-call spec in that format, and the reasoning
 * parser. A forced call on a model whose format is unknown uses Hermes: the grammar makes the
 * model emit it, so the parser can read it back whatever the model would have chosen.
 */
export function resolveModelParsers(request: ModelParserFields, chatTemplate: string | undefined, options: ModelParserOptions): void {
  if (request.tools && request.tools.length > 0 && request.toolChoice !== 'none') {
    const format = resolveToolCallFormat(options.toolCallParser, chatTemplate) ?? (request.forcedToolCalls ? 'hermes' : undefined);
    if (format !== undefined) request.toolCallFormat = format;
    if (request.forcedToolCalls && format !== undefined) {
      request.structured = { kind: 'tool_calls', format, tools: request.forcedToolCalls.tools, parallel: request.forcedToolCalls.parallel };
    }
  }
  if (options.reasoningParser === 'think') request.reasoningParser = 'think';
}

/** Enough prompt text to see `<think>` and the whitespace after it. */
const REASONING_TAIL_CHARS = 24;
/** Most prompt tokens read for it (single-byte tokens on a tiny vocabulary). */
const REASONING_TAIL_TOKENS = 64;

/**
 * Whether the rendered prompt ends inside an open `<think>` (DeepSeek-R1 and some Qwen3
 * templates add it to the generation prompt), so the output starts as reasoning. Qwen3 with
 * `enable_thinking: false` closes the block in the prompt, and that reads as not open.
 */
export function promptOpensReasoning(promptTokenIds: readonly number[], tokenText: (id: number) => string): boolean {
  let tail = '';
  const stop = Math.max(0, promptTokenIds.length - REASONING_TAIL_TOKENS);
  for (let i = promptTokenIds.length - 1; i >= stop && tail.length < REASONING_TAIL_CHARS; i--) tail = tokenText(promptTokenIds[i]!) + tail;
  return /<think>\s*$/.test(tail);
}
