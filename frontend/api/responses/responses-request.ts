/**
 * OpenAI Responses request → the chat GenerationRequest. Input items (messages, function_call,
 * function_call_output, reasoning) become chat messages, appended to the stored conversation of
 * `previous_response_id`; `instructions` become the system message; `text.format` becomes
 * `response_format`; function tools stay function tools. The chat request's own validation then
 * runs on the result (openai/validate.ts), so sampling, tools, forced calls and output grammars
 * are checked in one place. A 400 names the Responses field: this file's own refusals do, and
 * chat's are renamed by the codec's table (responses-events.ts `RESPONSES_PARAMS`) where the
 * handler answers.
 */
import { isObject } from '../../../proto/wire.js';
import { badRequest, quoteInput } from '../../errors.js';
import { parseChatRequest, type ChatGenerationRequest } from '../../openai/validate.js';
import type { ResponseStore } from './response-store.js';
import { INCLUDABLE, INCLUDE_LOGPROBS } from './responses-events.js';

type Body = Record<string, unknown>;
type ChatMessageBody = Record<string, unknown>;

const present = (body: Body, key: string): boolean => body[key] !== undefined && body[key] !== null;

/** What the response object echoes back and the store keeps; `GenerationRequest.api` of a Responses request. */
export interface ResponsesRequestInfo {
  instructions: string | null;
  previousResponseId: string | null;
  store: boolean;
  /** The conversation this request's output continues (previous turns plus this input), instructions excluded. */
  conversation: ChatMessageBody[];
  tools: unknown[];
  toolChoice: unknown;
  parallelToolCalls: boolean;
  text: { format: Record<string, unknown> };
  maxOutputTokens: number | null;
  temperature: number | null;
  topP: number | null;
  topLogprobs: number | null;
  metadata: Record<string, unknown>;
  user: string | null;
  createdAt: number;
  /** The caller (http/auth.ts callerScope): the store keeps the response as theirs. */
  owner: string;
}

/** Hosted tools OpenAI runs on its side; Tandem has none of them. */
const BUILT_IN_TOOLS = new Set([
  'web_search',
  'web_search_preview',
  'web_search_preview_2025_03_11',
  'file_search',
  'computer_use_preview',
  'computer_use',
  'code_interpreter',
  'image_generation',
  'mcp',
  'local_shell',
  'shell',
  'apply_patch',
  'custom',
]);

/** Tandem's extensions, as on chat. */
const EXTENSIONS = ['seed', 'structured_outputs', 'chat_template_kwargs', 'top_k', 'ignore_eos', 'min_tokens'] as const;

function contentText(value: unknown, at: string): string {
  if (typeof value === 'string') return value;
  if (!Array.isArray(value)) throw badRequest(`'${at}' must be a string or an array of content parts`, at);
  return value
    .map((part, j) => {
      const pat = `${at}[${j}]`;
      if (!isObject(part) || typeof part.type !== 'string') throw badRequest(`'${pat}' must be a content part with a 'type'`, pat);
      if (part.type === 'input_text' || part.type === 'output_text' || part.type === 'text') {
        if (typeof part.text !== 'string') throw badRequest(`'${pat}.text' must be a string`, `${pat}.text`);
        return part.text;
      }
      if (part.type === 'input_image' || part.type === 'input_file' || part.type === 'input_audio') {
        throw badRequest(`'${pat}': '${part.type}' is not supported by this server (text input only)`, pat);
      }
      throw badRequest(`'${pat}.type' '${quoteInput(part.type)}' is not a content part type`, `${pat}.type`);
    })
    .join('');
}

/** Input items → chat messages; consecutive function_calls become one assistant message's tool_calls. */
function translateInput(input: unknown): ChatMessageBody[] {
  if (typeof input === 'string') return [{ role: 'user', content: input }];
  if (!Array.isArray(input) || input.length === 0) throw badRequest("'input' must be a string or a non-empty array of input items", 'input');
  const out: ChatMessageBody[] = [];
  let reasoning: string | undefined;
  const lastAssistant = (): ChatMessageBody | undefined => {
    const last = out.at(-1);
    return last?.role === 'assistant' ? last : undefined;
  };
  input.forEach((item: unknown, i: number) => {
    const at = `input[${i}]`;
    if (!isObject(item)) throw badRequest(`'${at}' must be an object`, at);
    const type = item.type ?? 'message';
    switch (type) {
      case 'message': {
        const role = item.role;
        if (role !== 'user' && role !== 'assistant' && role !== 'system' && role !== 'developer') {
          throw badRequest(`'${at}.role' must be 'user', 'assistant', 'system' or 'developer'`, `${at}.role`);
        }
        const message: ChatMessageBody = { role, content: contentText(item.content, `${at}.content`) };
        if (role === 'assistant' && reasoning !== undefined) {
          message.reasoning_content = reasoning;
          reasoning = undefined;
        }
        out.push(message);
        return;
      }
      case 'function_call': {
        if (typeof item.call_id !== 'string' || typeof item.name !== 'string' || typeof item.arguments !== 'string') {
          throw badRequest(`'${at}' needs string 'call_id', 'name' and 'arguments'`, at);
        }
        const call = { id: item.call_id, type: 'function', function: { name: item.name, arguments: item.arguments } };
        const assistant = lastAssistant();
        if (assistant && Array.isArray(assistant.tool_calls)) (assistant.tool_calls as unknown[]).push(call);
        else if (assistant && !assistant.tool_calls) assistant.tool_calls = [call];
        else out.push({ role: 'assistant', content: null, tool_calls: [call], ...(reasoning !== undefined ? { reasoning_content: reasoning } : {}) });
        reasoning = undefined;
        return;
      }
      case 'function_call_output': {
        if (typeof item.call_id !== 'string' || item.call_id.length === 0) throw badRequest(`'${at}.call_id' is required`, `${at}.call_id`);
        const output = typeof item.output === 'string' ? item.output : contentText(item.output, `${at}.output`);
        out.push({ role: 'tool', tool_call_id: item.call_id, content: output });
        return;
      }
      case 'reasoning': {
        // The reasoning that led to the next assistant output: kept as its reasoning_content.
        const parts = Array.isArray(item.content) ? item.content : Array.isArray(item.summary) ? item.summary : [];
        reasoning = parts.map((p: unknown) => (isObject(p) && typeof p.text === 'string' ? p.text : '')).join('');
        return;
      }
      default:
        throw badRequest(`'${at}.type' '${quoteInput(String(type))}' is not supported (message, function_call, function_call_output and reasoning are)`, `${at}.type`);
    }
  });
  return out;
}

function translateTools(value: unknown): unknown[] {
  if (!Array.isArray(value)) throw badRequest("'tools' must be an array", 'tools');
  return value.map((tool, i) => {
    const at = `tools[${i}]`;
    if (!isObject(tool)) throw badRequest(`'${at}' must be an object`, at);
    if (tool.type !== 'function') {
      const type = typeof tool.type === 'string' ? tool.type : '';
      const why = BUILT_IN_TOOLS.has(type) ? 'is a built-in tool this server does not run' : 'is not a tool type';
      throw badRequest(`'${at}': '${quoteInput(type)}' ${why}; only function tools are supported`, at);
    }
    if (typeof tool.name !== 'string' || tool.name.length === 0) throw badRequest(`'${at}.name' is required`, `${at}.name`);
    return { type: 'function', function: { name: tool.name, ...(typeof tool.description === 'string' ? { description: tool.description } : {}), ...(tool.parameters !== undefined ? { parameters: tool.parameters } : {}) } };
  });
}

function translateToolChoice(value: unknown): unknown {
  if (value === 'auto' || value === 'none' || value === 'required') return value;
  if (isObject(value) && value.type === 'function' && typeof value.name === 'string') return { type: 'function', function: { name: value.name } };
  if (isObject(value) && typeof value.type === 'string' && BUILT_IN_TOOLS.has(value.type)) {
    throw badRequest(`'tool_choice': '${value.type}' is a built-in tool this server does not run`, 'tool_choice');
  }
  throw badRequest("'tool_choice' must be 'auto', 'none', 'required' or {type: 'function', name}", 'tool_choice');
}

function translateFormat(text: unknown): { format: Record<string, unknown>; responseFormat?: unknown } {
  if (!isObject(text) || text.format === undefined || text.format === null) return { format: { type: 'text' } };
  const format = text.format;
  if (!isObject(format)) throw badRequest("'text.format' must be an object", 'text.format');
  switch (format.type) {
    case 'text':
      return { format };
    case 'json_object':
      return { format, responseFormat: { type: 'json_object' } };
    case 'json_schema':
      if (typeof format.name !== 'string' || !isObject(format.schema)) throw badRequest("'text.format' json_schema needs 'name' and 'schema'", 'text.format');
      return { format, responseFormat: { type: 'json_schema', json_schema: { name: format.name, schema: format.schema, ...(format.strict !== undefined ? { strict: format.strict } : {}) } } };
    default:
      throw badRequest("'text.format.type' must be 'text', 'json_object' or 'json_schema'", 'text.format.type');
  }
}

/** OpenAI's `include` list; true when it asks for the output text's logprobs. */
function includesLogprobs(value: unknown): boolean {
  if (value === undefined || value === null) return false;
  if (!Array.isArray(value)) throw badRequest("'include' must be an array of strings", 'include');
  value.forEach((entry: unknown, i) => {
    if (typeof entry !== 'string' || !INCLUDABLE.has(entry)) throw badRequest(`'include[${i}]' must be one of ${[...INCLUDABLE].join(', ')}`, `include[${i}]`);
  });
  return value.includes(INCLUDE_LOGPROBS);
}

function num(body: Body, key: string): number | null {
  return typeof body[key] === 'number' ? (body[key] as number) : null;
}

export function parseResponsesRequest(body: unknown, store: ResponseStore, owner = ''): ChatGenerationRequest {
  if (!isObject(body)) throw badRequest('request body must be a JSON object');
  if (body.background === true) throw badRequest("'background' responses are not supported", 'background');
  if (present(body, 'conversation')) throw badRequest("'conversation' objects are not supported; chain turns with 'previous_response_id'", 'conversation');
  if (present(body, 'instructions') && typeof body.instructions !== 'string') throw badRequest("'instructions' must be a string", 'instructions');
  let previous: readonly ChatMessageBody[] = [];
  let previousResponseId: string | null = null;
  if (present(body, 'previous_response_id')) {
    if (typeof body.previous_response_id !== 'string') throw badRequest("'previous_response_id' must be a string", 'previous_response_id');
    const stored = store.get(body.previous_response_id, owner);
    if (!stored) {
      throw badRequest(`previous response '${quoteInput(body.previous_response_id)}' was not found (never stored, deleted, or expired)`, 'previous_response_id');
    }
    previous = stored.conversation;
    previousResponseId = body.previous_response_id;
  }
  const input = translateInput(body.input);
  const conversation = [...previous, ...input];
  const instructions = typeof body.instructions === 'string' ? body.instructions : null;
  const messages = instructions !== null ? [{ role: 'system', content: instructions }, ...conversation] : conversation;
  const format = translateFormat(body.text);
  const tools = present(body, 'tools') ? translateTools(body.tools) : undefined;
  const chat: Body = {
    model: body.model,
    messages,
    stream: body.stream,
    max_tokens: body.max_output_tokens,
    temperature: body.temperature,
    top_p: body.top_p,
    ...(format.responseFormat !== undefined ? { response_format: format.responseFormat } : {}),
    ...(tools && tools.length > 0 ? { tools } : {}),
    ...(present(body, 'tool_choice') ? { tool_choice: translateToolChoice(body.tool_choice) } : {}),
    ...(present(body, 'parallel_tool_calls') ? { parallel_tool_calls: body.parallel_tool_calls } : {}),
    ...(present(body, 'user') ? { user: body.user } : {}),
  };
  // Logprobs come back only when `include` asks (as OpenAI: `top_logprobs` alone returns none);
  // `top_logprobs` is checked either way, by chat's own bounds.
  const logprobs = includesLogprobs(body.include);
  if (logprobs) chat.logprobs = true;
  if (present(body, 'top_logprobs')) {
    chat.top_logprobs = body.top_logprobs;
    chat.logprobs = true;
  }
  for (const key of EXTENSIONS) if (present(body, key)) chat[key] = body[key];
  const request = parseChatRequest(chat);
  if (!logprobs) delete request.logprobs;
  if (present(body, 'metadata') && !isObject(body.metadata)) throw badRequest("'metadata' must be an object", 'metadata');
  const info: ResponsesRequestInfo = {
    instructions,
    previousResponseId,
    store: body.store !== false,
    conversation,
    tools: Array.isArray(body.tools) ? body.tools : [],
    toolChoice: body.tool_choice ?? 'auto',
    parallelToolCalls: body.parallel_tool_calls !== false,
    text: { format: format.format },
    maxOutputTokens: num(body, 'max_output_tokens'),
    temperature: num(body, 'temperature'),
    topP: num(body, 'top_p'),
    topLogprobs: num(body, 'top_logprobs'),
    metadata: isObject(body.metadata) ? body.metadata : {},
    user: typeof body.user === 'string' ? body.user : null,
    createdAt: Math.floor(Date.now() / 1000),
    owner,
  };
  request.api = info;
  return request;
}
