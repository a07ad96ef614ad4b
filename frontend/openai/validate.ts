/**
 * Request validation for /v1/chat/completions and /v1/completions: the untrusted JSON body in,
 * a normalized GenerationRequest out, or an ApiError naming the offending `param`. `null` is
 * treated as absent, as OpenAI clients send it for unset fields.
 */
import type { SamplingOptions } from '../../proto/wire.js';
import type { ChatMessage } from '../codec.js';
import { ApiError, badRequest } from '../errors.js';

export const MAX_TOP_LOGPROBS = 20;
const MAX_STOP_STRINGS = 64;

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
}

export interface ChatGenerationRequest extends GenerationBase {
  kind: 'chat';
  messages: ChatMessage[];
  tools?: unknown[];
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

function isObject(value: unknown): value is Body {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
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
    if (typeof id !== 'number' || !Number.isInteger(id) || id < 0 || id > 0x7fffffff) {
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
  if (typeof body.user === 'string') base.user = body.user;
  return base;
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

export function parseChatRequest(body: unknown): ChatGenerationRequest {
  if (!isObject(body)) throw badRequest('request body must be a JSON object');
  const base = parseBase(body);
  if (!Array.isArray(body.messages) || body.messages.length === 0) {
    throw badRequest("'messages' must be a non-empty array", 'messages');
  }
  const messages: ChatMessage[] = body.messages.map((raw, i) => {
    if (!isObject(raw) || typeof raw.role !== 'string') throw badRequest(`'messages[${i}].role' must be a string`, `messages[${i}].role`);
    const message: ChatMessage = { role: raw.role, content: messageContent(raw.content, i) };
    if (typeof raw.name === 'string') message.name = raw.name;
    if (Array.isArray(raw.tool_calls)) message.tool_calls = raw.tool_calls;
    if (typeof raw.tool_call_id === 'string') message.tool_call_id = raw.tool_call_id;
    return message;
  });
  const logprobsFlag = boolean(body, 'logprobs') ?? false;
  const top = integer(body, 'top_logprobs', 0, MAX_TOP_LOGPROBS);
  if (top !== undefined && !logprobsFlag) throw badRequest("'top_logprobs' requires 'logprobs' to be true", 'top_logprobs');
  const request: ChatGenerationRequest = {
    ...base,
    kind: 'chat',
    messages,
    addGenerationPrompt: boolean(body, 'add_generation_prompt') ?? true,
  };
  if (logprobsFlag) request.logprobs = top ?? 0;
  if (present(body, 'tools')) {
    if (!Array.isArray(body.tools)) throw badRequest("'tools' must be an array", 'tools');
    request.tools = body.tools;
  }
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
  return request;
}

/** A string, an array of token ids, or a one-element array of either. */
function parsePrompt(value: unknown): string | number[] {
  if (typeof value === 'string') {
    if (value.length === 0) throw badRequest("'prompt' must not be empty", 'prompt');
    return value;
  }
  if (Array.isArray(value)) {
    if (value.length === 0) throw badRequest("'prompt' must not be empty", 'prompt');
    if (typeof value[0] === 'number') return tokenIdList(value, 'prompt')!;
    if (value.length > 1) throw badRequest('batched prompts are not supported: send one prompt per request', 'prompt');
    return parsePrompt(value[0]);
  }
  throw new ApiError('invalid_argument', "'prompt' must be a string or an array of token ids", 'prompt');
}
