/**
 * Request validation for /v1/chat/completions and /v1/completions: the untrusted JSON body in,
 * a normalized GenerationRequest out, or an ApiError naming the offending `param`. `null` is
 * treated as absent, as OpenAI clients send it for unset fields.
 */
import { isObject, type SamplingOptions, type StructuredOutputSpec, type ToolCallFormatName } from '../../proto/wire.js';
import type { ChatMessage } from '../codec.js';
import { ApiError, badRequest, quoteInput } from '../errors.js';
import { type ForcedToolCalls, type ToolChoice, forcedToolCalls, parseOutputConstraint, parseToolChoice, parseTools } from './structured.js';

export const MAX_TOP_LOGPROBS = 20;
const MAX_STOP_STRINGS = 64;
/** Most `logit_bias` entries per request (each is work in every sampling step). */
export const MAX_LOGIT_BIAS_ENTRIES = 1024;
/** Longest accepted `user` (an end-user id for abuse tracking, not content). */
export const MAX_USER_CHARS = 256;
/** Roles a chat message may have (OpenAI's, with `developer` as a system alias). */
export const CHAT_ROLES = ['system', 'developer', 'user', 'assistant', 'tool'] as const;
const TOKEN_ID_LIMIT = 0x7fffffff;

interface GenerationBase {
  model: string;
  stream: boolean;
  includeUsage: boolean;
  /** Undefined: as many as fit in the context. */
  maxTokens?: number;
  minTokens?: number;
  sampling: SamplingOptions;
  stop: string[];
  stopTokenIds: number[];
  ignoreEos: boolean;
  /** Undefined: no logprobs; n: the sampled token's logprob plus n alternatives. */
  logprobs?: number;
  returnTokensAsTokenIds: boolean;
  user?: string;
  /**
   * What the output must match (response_format, structured_outputs, guided_*, or a forced
   * tool call), compiled off the event loop at prepare time to prove it valid. A chat request's
   * forced tool call is set here at prepare time, once the model's tool-call format is known.
   */
  structured?: StructuredOutputSpec;
  /** The request field `structured` came from, for a 400's `param`. */
  structuredParam?: string;
  /** What the API's codec keeps of the request for its response (Responses' instructions, tools, store…); the pipeline never reads it. */
  api?: unknown;
}

export interface ChatGenerationRequest extends GenerationBase {
  kind: 'chat';
  messages: ChatMessage[];
  /** As sent: the chat template renders them whatever `tool_choice` says. */
  tools?: unknown[];
  toolChoice: ToolChoice;
  /** `tool_choice` 'required' or a named function; becomes `structured` at prepare time. */
  forcedToolCalls?: ForcedToolCalls;
  /** The served model's tool-call format (set at prepare): tool calls are parsed from the output. */
  toolCallFormat?: ToolCallFormatName;
  /** `--reasoning-parser think` (set at prepare): `<think>…</think>` becomes `reasoning_content`. */
  reasoningParser?: 'think';
  /** The rendered prompt ends inside `<think>`: the output starts as reasoning (set at prepare). */
  reasoningStartsInPrompt?: boolean;
  addGenerationPrompt: boolean;
  templateKwargs?: Record<string, unknown>;
}

export interface CompletionGenerationRequest extends GenerationBase {
  kind: 'completion';
  prompt: string | number[];
  echo: boolean;
}

export type GenerationRequest = ChatGenerationRequest | CompletionGenerationRequest;

type Body = Record<string, unknown>;

function present(body: Body, key: string): boolean {
  return body[key] !== undefined && body[key] !== null;
}

function number(body: Body, key: string, min: number, max: number): number | undefined {
  if (!present(body, key)) return undefined;
  const value = body[key];
  if (typeof value !== 'number' || !Number.isFinite(value)) throw badRequest(`'${key}' must be a number`, key);
  if (value < min || value > max) throw badRequest(`'${key}' must be in [${min}, ${max}], got ${value}`, key);
  return value;
}

function integer(body: Body, key: string, min: number, max = Number.MAX_SAFE_INTEGER): number | undefined {
  const value = number(body, key, min, max);
  if (value !== undefined && !Number.isInteger(value)) throw badRequest(`'${key}' must be an integer`, key);
  return value;
}

function boolean(body: Body, key: string): boolean | undefined {
  if (!present(body, key)) return undefined;
  if (typeof body[key] !== 'boolean') throw badRequest(`'${key}' must be a boolean`, key);
  return body[key] as boolean;
}

function parseStop(body: Body): string[] {
  if (!present(body, 'stop')) return [];
  const value = body.stop;
  const list = typeof value === 'string' ? [value] : value;
  if (!Array.isArray(list) || !list.every((s) => typeof s === 'string')) {
    throw badRequest("'stop' must be a string or an array of strings", 'stop');
  }
  if (list.length > MAX_STOP_STRINGS) throw badRequest(`'stop' may hold at most ${MAX_STOP_STRINGS} strings`, 'stop');
  return (list as string[]).filter((s) => s.length > 0);
}

function tokenIdList(value: unknown, param: string): number[] | undefined {
  if (!Array.isArray(value)) return undefined;
  for (const id of value) {
    if (typeof id !== 'number' || !Number.isInteger(id) || id < 0 || id > TOKEN_ID_LIMIT) {
      throw badRequest(`'${param}' token ids must be non-negative integers`, param);
    }
  }
  return value as number[];
}

function parseBase(body: Body): Omit<GenerationBase, 'logprobs'> {
  if (typeof body.model !== 'string' || body.model.length === 0) throw badRequest("'model' is required and must be a string", 'model');
  const n = integer(body, 'n', 1, 1_000_000);
  if (n !== undefined && n !== 1) throw badRequest("only 'n' = 1 is supported", 'n');
  if (present(body, 'best_of') && body.best_of !== 1) throw badRequest("only 'best_of' = 1 is supported", 'best_of');
  const stream = boolean(body, 'stream') ?? false;
  let includeUsage = false;
  if (present(body, 'stream_options')) {
    if (!isObject(body.stream_options)) throw badRequest("'stream_options' must be an object", 'stream_options');
    if (!stream) throw badRequest("'stream_options' is only allowed when 'stream' is true", 'stream_options');
    includeUsage = boolean(body.stream_options, 'include_usage') ?? false;
  }
  const maxCompletion = integer(body, 'max_completion_tokens', 1);
  const maxTokens = maxCompletion ?? integer(body, 'max_tokens', 1);
  const sampling: SamplingOptions = {};
  const temperature = number(body, 'temperature', 0, 2);
  if (temperature !== undefined) sampling.temperature = temperature;
  const topP = number(body, 'top_p', 0, 1);
  if (topP !== undefined) {
    if (topP === 0) throw badRequest("'top_p' must be in (0, 1]", 'top_p');
    sampling.topP = topP;
  }
  const topK = integer(body, 'top_k', -1);
  if (topK !== undefined && topK > 0) sampling.topK = topK;
  const minP = number(body, 'min_p', 0, 1);
  if (minP !== undefined) sampling.minP = minP;
  const seed = integer(body, 'seed', Number.MIN_SAFE_INTEGER);
  if (seed !== undefined) sampling.seed = seed;
  const presence = number(body, 'presence_penalty', -2, 2);
  if (presence !== undefined) sampling.presencePenalty = presence;
  const frequency = number(body, 'frequency_penalty', -2, 2);
  if (frequency !== undefined) sampling.frequencyPenalty = frequency;
  const repetition = number(body, 'repetition_penalty', 0, 10);
  if (repetition !== undefined) {
    if (repetition === 0) throw badRequest("'repetition_penalty' must be > 0", 'repetition_penalty');
    sampling.repetitionPenalty = repetition;
  }
  const stopTokenIds = present(body, 'stop_token_ids') ? tokenIdList(body.stop_token_ids, 'stop_token_ids') : [];
  if (stopTokenIds === undefined) throw badRequest("'stop_token_ids' must be an array of token ids", 'stop_token_ids');
  const minTokens = integer(body, 'min_tokens', 0);
  const base: Omit<GenerationBase, 'logprobs'> = {
    model: body.model,
    stream,
    includeUsage,
    sampling,
    stop: parseStop(body),
    stopTokenIds,
    ignoreEos: boolean(body, 'ignore_eos') ?? false,
    returnTokensAsTokenIds: boolean(body, 'return_tokens_as_token_ids') ?? false,
  };
  if (maxTokens !== undefined) base.maxTokens = maxTokens;
  if (minTokens !== undefined) {
    if (maxTokens !== undefined && minTokens > maxTokens) throw badRequest("'min_tokens' must not exceed 'max_tokens'", 'min_tokens');
    base.minTokens = minTokens;
  }
  const logitBias = parseLogitBias(body);
  if (logitBias) sampling.logitBias = logitBias;
  if (present(body, 'user')) {
    if (typeof body.user !== 'string') throw badRequest("'user' must be a string", 'user');
    if (body.user.length > MAX_USER_CHARS) throw badRequest(`'user' must be at most ${MAX_USER_CHARS} characters`, 'user');
    base.user = body.user;
  }
  if (present(body, 'suffix')) throw badRequest("'suffix' is not supported", 'suffix');
  return base;
}

/**
 * OpenAI `logit_bias`: {"<token id>": bias in [-100, 100]}. Returned as [id, bias] pairs in
 * ascending id order (object keys that are integers already iterate in that order).
 */
function parseLogitBias(body: Body): Array<[number, number]> | undefined {
  if (!present(body, 'logit_bias')) return undefined;
  const value = body.logit_bias;
  if (!isObject(value)) throw badRequest("'logit_bias' must be an object mapping token ids to biases", 'logit_bias');
  const pairs: Array<[number, number]> = [];
  for (const key in value) {
    if (pairs.length === MAX_LOGIT_BIAS_ENTRIES) throw badRequest(`'logit_bias' may hold at most ${MAX_LOGIT_BIAS_ENTRIES} entries`, 'logit_bias');
    const id = /^(0|[1-9][0-9]{0,9})$/.test(key) ? Number(key) : NaN;
    if (!(id <= TOKEN_ID_LIMIT)) throw badRequest(`'logit_bias' keys must be token ids (non-negative integers), got '${quoteInput(key)}'`, 'logit_bias');
    const bias = value[key];
    if (typeof bias !== 'number' || !Number.isFinite(bias) || bias < -100 || bias > 100) {
      throw badRequest(`'logit_bias' values must be numbers in [-100, 100]`, 'logit_bias');
    }
    if (bias !== 0) pairs.push([id, bias]);
  }
  return pairs.length > 0 ? pairs : undefined;
}

function messageContent(value: unknown, index: number): string {
  if (value === undefined || value === null) return '';
  if (typeof value === 'string') return value;
  const param = `messages[${index}].content`;
  if (!Array.isArray(value)) throw badRequest(`'${param}' must be a string or an array of content parts`, param);
  let text = '';
  for (const part of value) {
    if (!isObject(part) || part.type !== 'text' || typeof part.text !== 'string') {
      throw badRequest(`'${param}': only text content parts are supported`, param);
    }
    text += part.text;
  }
  return text;
}

function isRole(value: unknown): value is (typeof CHAT_ROLES)[number] {
  return typeof value === 'string' && (CHAT_ROLES as readonly string[]).includes(value);
}

/**
 * One chat message. `content` is required except on an assistant message that carries
 * `tool_calls`; a `tool` message must name the call it answers (`tool_call_id`).
 */
function parseMessage(raw: unknown, i: number): ChatMessage {
  const at = `messages[${i}]`;
  if (!isObject(raw)) throw badRequest(`'${at}' must be an object`, at);
  if (!isRole(raw.role)) throw badRequest(`'${at}.role' must be one of ${CHAT_ROLES.join(', ')}`, `${at}.role`);
  const hasToolCalls = present(raw, 'tool_calls');
  if (hasToolCalls) {
    if (raw.role !== 'assistant') throw badRequest(`'${at}.tool_calls' is only allowed on assistant messages`, `${at}.tool_calls`);
    if (!Array.isArray(raw.tool_calls) || !raw.tool_calls.every(isObject)) throw badRequest(`'${at}.tool_calls' must be an array of objects`, `${at}.tool_calls`);
  }
  if (!present(raw, 'content') && !(raw.role === 'assistant' && hasToolCalls)) {
    throw badRequest(`'${at}.content' is required`, `${at}.content`);
  }
  const message: ChatMessage = { role: raw.role, content: messageContent(raw.content, i) };
  if (present(raw, 'name')) {
    if (typeof raw.name !== 'string') throw badRequest(`'${at}.name' must be a string`, `${at}.name`);
    message.name = raw.name;
  }
  if (hasToolCalls) message.tool_calls = raw.tool_calls as unknown[];
  if (raw.role === 'tool') {
    if (typeof raw.tool_call_id !== 'string' || raw.tool_call_id.length === 0) {
      throw badRequest(`'${at}.tool_call_id' is required on tool messages and must be a string`, `${at}.tool_call_id`);
    }
    message.tool_call_id = raw.tool_call_id;
  }
  if (present(raw, 'reasoning_content')) {
    if (raw.role !== 'assistant' || typeof raw.reasoning_content !== 'string') {
      throw badRequest(`'${at}.reasoning_content' must be a string on an assistant message`, `${at}.reasoning_content`);
    }
    message.reasoning_content = raw.reasoning_content;
  }
  return message;
}

export function parseChatRequest(body: unknown): ChatGenerationRequest {
  if (!isObject(body)) throw badRequest('request body must be a JSON object');
  const base = parseBase(body);
  if (!Array.isArray(body.messages) || body.messages.length === 0) {
    throw badRequest("'messages' must be a non-empty array", 'messages');
  }
  const messages: ChatMessage[] = body.messages.map(parseMessage);
  const logprobsFlag = boolean(body, 'logprobs') ?? false;
  const top = integer(body, 'top_logprobs', 0, MAX_TOP_LOGPROBS);
  if (top !== undefined && !logprobsFlag) throw badRequest("'top_logprobs' requires 'logprobs' to be true", 'top_logprobs');
  const tools = present(body, 'tools') ? parseTools(body.tools) : undefined;
  const toolChoice = parseToolChoice(body.tool_choice, tools);
  const parallelToolCalls = boolean(body, 'parallel_tool_calls') ?? true;
  const request: ChatGenerationRequest = {
    ...base,
    kind: 'chat',
    messages,
    toolChoice,
    addGenerationPrompt: boolean(body, 'add_generation_prompt') ?? true,
  };
  if (logprobsFlag) request.logprobs = top ?? 0;
  if (tools) request.tools = body.tools as unknown[];
  const constraint = parseOutputConstraint(body);
  if (constraint && (toolChoice === 'required' || typeof toolChoice === 'object')) {
    // Both would constrain the same output; neither can be honoured without dropping the other.
    throw badRequest(`'tool_choice' forces a tool call, which cannot be combined with '${constraint.param}': send only one of them`, 'tool_choice');
  }
  if (constraint) {
    request.structured = constraint.spec;
    request.structuredParam = constraint.param;
  }
  const forced = forcedToolCalls(toolChoice, tools ?? [], parallelToolCalls);
  if (forced) request.forcedToolCalls = forced;
  if (present(body, 'chat_template_kwargs')) {
    if (!isObject(body.chat_template_kwargs)) throw badRequest("'chat_template_kwargs' must be an object", 'chat_template_kwargs');
    request.templateKwargs = body.chat_template_kwargs;
  }
  return request;
}

export function parseCompletionRequest(body: unknown): CompletionGenerationRequest {
  if (!isObject(body)) throw badRequest('request body must be a JSON object');
  const base = parseBase(body);
  const request: CompletionGenerationRequest = { ...base, kind: 'completion', prompt: parsePrompt(body.prompt), echo: boolean(body, 'echo') ?? false };
  if (request.echo) throw badRequest("'echo' is not supported", 'echo');
  const logprobs = integer(body, 'logprobs', 0, MAX_TOP_LOGPROBS);
  if (logprobs !== undefined) request.logprobs = logprobs;
  const constraint = parseOutputConstraint(body);
  if (constraint) {
    request.structured = constraint.spec;
    request.structuredParam = constraint.param;
  }
  return request;
}

/**
 * A string, an array of token ids, or a one-element array of either (OpenAI's batch form with
 * one prompt). One level of wrapping only, and no recursion, so no nesting depth can
 * overflow the stack.
 */
function parsePrompt(value: unknown): string | number[] {
  if (Array.isArray(value) && value.length === 1 && (typeof value[0] === 'string' || Array.isArray(value[0]))) {
    value = value[0];
  } else if (Array.isArray(value) && value.length > 1 && typeof value[0] !== 'number') {
    throw badRequest('batched prompts are not supported: send one prompt per request', 'prompt');
  }
  if (typeof value === 'string') {
    if (value.length === 0) throw badRequest("'prompt' must not be empty", 'prompt');
    return value;
  }
  if (Array.isArray(value)) {
    if (value.length === 0) throw badRequest("'prompt' must not be empty", 'prompt');
    const ids = tokenIdList(value, 'prompt');
    if (ids) return ids;
  }
  throw new ApiError('invalid_argument', "'prompt' must be a string, an array of token ids, or a one-element array of either", 'prompt');
}
