/**
 * Anthropic Messages request → the chat GenerationRequest. The body is checked for Anthropic's
 * own shape (content blocks, `max_tokens` required, `tool_choice` kinds) and translated to the
 * chat fields; the chat request's own validation (openai/validate.ts) then runs on the result,
 * so sampling bounds, tools and forced-call grammars are checked in exactly one place. A 400
 * names the Anthropic field: this file's own refusals do, and chat's are renamed by the codec's
 * table (messages-events.ts `MESSAGES_PARAMS`) where the handler answers.
 */
import { isObject } from '../../../proto/wire.js';
import { badRequest, quoteInput, type ApiError } from '../../errors.js';
import { parseChatRequest, type ChatGenerationRequest } from '../../openai/validate.js';

type Body = Record<string, unknown>;

const present = (body: Body, key: string): boolean => body[key] !== undefined && body[key] !== null;

/** Fields beyond Anthropic's that pass to the chat request as they are (documented in docs/). */
const EXTENSIONS = ['seed', 'structured_outputs', 'chat_template_kwargs', 'ignore_eos', 'min_tokens'] as const;

/** Block types Tandem cannot take as input: a 400 that names the block. */
const UNSUPPORTED_BLOCKS = new Set(['image', 'document', 'search_result', 'container_upload', 'server_tool_use', 'web_search_tool_result']);

interface ChatMessageBody {
  role: string;
  content: string | null;
  tool_calls?: unknown[];
  tool_call_id?: string;
  reasoning_content?: string;
}

function textOf(value: unknown, param: string): string {
  if (typeof value === 'string') return value;
  if (!Array.isArray(value)) throw badRequest(`'${param}' must be a string or an array of text blocks`, param);
  return value
    .map((block, j) => {
      const at = `${param}[${j}]`;
      if (!isObject(block)) throw badRequest(`'${at}' must be a content block object`, at);
      if (typeof block.type === 'string' && UNSUPPORTED_BLOCKS.has(block.type)) throw unsupportedBlock(block.type, at);
      if (block.type !== 'text' || typeof block.text !== 'string') throw badRequest(`'${at}' must be {type: 'text', text: string}`, at);
      return block.text;
    })
    .join('');
}

function unsupportedBlock(type: string, at: string): ApiError {
  return badRequest(`'${at}': '${quoteInput(type)}' content blocks are not supported by this server (text, tool_use, tool_result and thinking are)`, at);
}

/** One Anthropic message → one or more chat messages (each tool_result becomes a `tool` message). */
function translateMessage(raw: unknown, i: number): ChatMessageBody[] {
  const at = `messages[${i}]`;
  if (!isObject(raw)) throw badRequest(`'${at}' must be an object`, at);
  if (raw.role !== 'user' && raw.role !== 'assistant') throw badRequest(`'${at}.role' must be 'user' or 'assistant'`, `${at}.role`);
  const role = raw.role;
  if (typeof raw.content === 'string') return [{ role, content: raw.content }];
  if (!Array.isArray(raw.content)) throw badRequest(`'${at}.content' must be a string or an array of content blocks`, `${at}.content`);
  const out: ChatMessageBody[] = [];
  let text = '';
  let reasoning: string | undefined;
  const calls: unknown[] = [];
  const flushText = (): void => {
    if (role === 'user' && text.length > 0) out.push({ role, content: text });
    if (role === 'user') text = '';
  };
  raw.content.forEach((block: unknown, j: number) => {
    const bat = `${at}.content[${j}]`;
    if (!isObject(block) || typeof block.type !== 'string') throw badRequest(`'${bat}' must be a content block with a 'type'`, bat);
    switch (block.type) {
      case 'text':
        if (typeof block.text !== 'string') throw badRequest(`'${bat}.text' must be a string`, `${bat}.text`);
        text += block.text;
        return;
      case 'thinking':
      case 'redacted_thinking':
        if (role !== 'assistant') throw badRequest(`'${bat}': thinking blocks belong to assistant messages`, bat);
        if (block.type === 'thinking') {
          if (typeof block.thinking !== 'string') throw badRequest(`'${bat}.thinking' must be a string`, `${bat}.thinking`);
          reasoning = (reasoning ?? '') + block.thinking;
        }
        return;
      case 'tool_use': {
        if (role !== 'assistant') throw badRequest(`'${bat}': tool_use blocks belong to assistant messages`, bat);
        if (typeof block.id !== 'string' || typeof block.name !== 'string') throw badRequest(`'${bat}' needs string 'id' and 'name'`, bat);
        if (!isObject(block.input)) throw badRequest(`'${bat}.input' must be an object`, `${bat}.input`);
        calls.push({ id: block.id, type: 'function', function: { name: block.name, arguments: JSON.stringify(block.input) } });
        return;
      }
      case 'tool_result': {
        if (role !== 'user') throw badRequest(`'${bat}': tool_result blocks belong to user messages`, bat);
        if (typeof block.tool_use_id !== 'string' || block.tool_use_id.length === 0) throw badRequest(`'${bat}.tool_use_id' is required`, `${bat}.tool_use_id`);
        flushText();
        const content = block.content === undefined || block.content === null ? '' : textOf(block.content, `${bat}.content`);
        out.push({ role: 'tool', tool_call_id: block.tool_use_id, content: block.is_error === true ? `Error: ${content}` : content });
        return;
      }
      default:
        if (UNSUPPORTED_BLOCKS.has(block.type)) throw unsupportedBlock(block.type, bat);
        throw badRequest(`'${bat}.type' '${quoteInput(block.type)}' is not a content block type`, `${bat}.type`);
    }
  });
  if (role === 'user') flushText();
  else {
    out.push({
      role,
      content: calls.length > 0 && text.length === 0 ? null : text,
      ...(calls.length > 0 ? { tool_calls: calls } : {}),
      ...(reasoning !== undefined ? { reasoning_content: reasoning } : {}),
    });
  }
  return out;
}

/** Anthropic's tools → OpenAI function tools. A server tool (`web_search_…`, `bash_…`) is a 400 naming it. */
function translateTools(value: unknown): unknown[] {
  if (!Array.isArray(value)) throw badRequest("'tools' must be an array", 'tools');
  return value.map((tool, i) => {
    const at = `tools[${i}]`;
    if (!isObject(tool)) throw badRequest(`'${at}' must be an object`, at);
    if (tool.type !== undefined && tool.type !== null && tool.type !== 'custom') {
      throw badRequest(`'${at}': the built-in tool '${quoteInput(String(tool.type))}' is not supported; declare tools with a name and an input_schema`, at);
    }
    if (typeof tool.name !== 'string' || tool.name.length === 0) throw badRequest(`'${at}.name' is required`, `${at}.name`);
    if (!isObject(tool.input_schema)) throw badRequest(`'${at}.input_schema' must be a JSON Schema object`, `${at}.input_schema`);
    return { type: 'function', function: { name: tool.name, ...(typeof tool.description === 'string' ? { description: tool.description } : {}), parameters: tool.input_schema } };
  });
}

function translateToolChoice(value: unknown): { choice: unknown; parallel: boolean } {
  if (!isObject(value)) throw badRequest("'tool_choice' must be an object {type: 'auto' | 'any' | 'tool' | 'none'}", 'tool_choice');
  const parallel = value.disable_parallel_tool_use !== true;
  switch (value.type) {
    case 'auto':
      return { choice: 'auto', parallel };
    case 'none':
      return { choice: 'none', parallel };
    case 'any':
      return { choice: 'required', parallel };
    case 'tool':
      if (typeof value.name !== 'string') throw badRequest("'tool_choice.name' is required when type is 'tool'", 'tool_choice.name');
      return { choice: { type: 'function', function: { name: value.name } }, parallel };
    default:
      throw badRequest("'tool_choice.type' must be 'auto', 'any', 'tool' or 'none'", 'tool_choice.type');
  }
}

/**
 * The chat request a Messages body asks for. `countOnly`: `/v1/messages/count_tokens`, where
 * `max_tokens` is not sent.
 */
export function parseMessagesRequest(body: unknown, countOnly = false): ChatGenerationRequest {
  if (!isObject(body)) throw badRequest('request body must be a JSON object');
  if (!countOnly && !present(body, 'max_tokens')) throw badRequest("'max_tokens' is required", 'max_tokens');
  if (!Array.isArray(body.messages) || body.messages.length === 0) throw badRequest("'messages' must be a non-empty array", 'messages');
  const messages: ChatMessageBody[] = [];
  if (present(body, 'system')) {
    const system = textOf(body.system, 'system');
    if (system.length > 0) messages.push({ role: 'system', content: system });
  }
  body.messages.forEach((m, i) => messages.push(...translateMessage(m, i)));
  const temperature = body.temperature;
  if (typeof temperature === 'number' && (temperature < 0 || temperature > 1)) throw badRequest(`'temperature' must be in [0, 1], got ${temperature}`, 'temperature');
  const chat: Body = {
    model: body.model,
    messages,
    stream: body.stream,
    temperature,
    top_p: body.top_p,
    top_k: body.top_k,
  };
  if (!countOnly) chat.max_tokens = body.max_tokens;
  if (present(body, 'stop_sequences')) {
    if (!Array.isArray(body.stop_sequences)) throw badRequest("'stop_sequences' must be an array of strings", 'stop_sequences');
    chat.stop = body.stop_sequences;
  }
  // Tandem's extensions, as on chat: a seed, a vLLM output constraint, template variables.
  for (const key of EXTENSIONS) if (present(body, key)) chat[key] = body[key];
  if (present(body, 'thinking')) {
    // Extended thinking on or off is the chat template's switch (Qwen3's `enable_thinking`).
    if (!isObject(body.thinking) || (body.thinking.type !== 'enabled' && body.thinking.type !== 'disabled')) {
      throw badRequest("'thinking' must be {type: 'enabled', budget_tokens} or {type: 'disabled'}", 'thinking');
    }
    const kwargs = isObject(chat.chat_template_kwargs) ? chat.chat_template_kwargs : {};
    chat.chat_template_kwargs = { enable_thinking: body.thinking.type === 'enabled', ...kwargs };
  }
  if (present(body, 'tools')) chat.tools = translateTools(body.tools);
  if (present(body, 'tool_choice')) {
    const { choice, parallel } = translateToolChoice(body.tool_choice);
    chat.tool_choice = choice;
    chat.parallel_tool_calls = parallel;
  }
  return parseChatRequest(chat);
}
