/**
 * The routes that count without generating, through the pipeline's one tokenize call
 * (GenerationPipeline.tokenizeOnly: the same codec and chat template as generation):
 *   POST /tokenize, POST /detokenize     vLLM's shapes, OpenAI-shaped errors
 *   POST /v1/messages/count_tokens       Anthropic's, Anthropic-shaped errors
 * The route's API (server.ts `apiOf`: the codec whose route it sits under) gives the error shape
 * and the field names; a vLLM route has none and answers OpenAI's.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { isObject } from '../../proto/wire.js';
import type { PromptInput } from '../codec.js';
import type { ApiCodec } from '../api/codec.js';
import { renameParams } from '../api/param-names.js';
import { parseMessagesRequest } from '../api/anthropic/messages-request.js';
import { badRequest, errorBody, toApiError, type ApiError } from '../errors.js';
import { parseChatRequest } from '../openai/validate.js';
import { promptInput } from '../pipeline/generation.js';
import { readJsonBody } from './body.js';
import type { GenerateContext } from './generate-handler.js';
import { sendError, sendJson } from './respond.js';

export type CountRoute = 'tokenize' | 'detokenize' | 'count_tokens';

export const COUNT_ROUTES: ReadonlyMap<string, CountRoute> = new Map<string, CountRoute>([
  ['/tokenize', 'tokenize'],
  ['/detokenize', 'detokenize'],
  ['/v1/messages/count_tokens', 'count_tokens'],
]);

const TOKEN_ID_LIMIT = 0x7fffffff;

type Body = Record<string, unknown>;

function flag(body: Body, key: string, fallback: boolean): boolean {
  const value = body[key];
  if (value === undefined || value === null) return fallback;
  if (typeof value !== 'boolean') throw badRequest(`'${key}' must be a boolean`, key);
  return value;
}

function modelOf(ctx: GenerateContext, body: Body): string {
  if (typeof body.model === 'string' && body.model.length > 0) return body.model;
  const only = ctx.pipeline.defaultModel();
  if (only === undefined) throw badRequest("'model' is required when the frontend serves more than one model", 'model');
  return only;
}

export async function handleCount(ctx: GenerateContext, route: CountRoute, req: IncomingMessage, res: ServerResponse, api?: ApiCodec): Promise<void> {
  const shape = api?.errorBody ?? errorBody;
  let model = '_unknown';
  let status = 200;
  try {
    const raw = await readJsonBody(req, ctx.maxBodyBytes);
    if (!isObject(raw)) throw badRequest('request body must be a JSON object');
    if (route === 'count_tokens') {
      const input = parseMessagesRequest(raw, true);
      model = input.model;
      const { tokenIds } = await ctx.pipeline.tokenizeOnly(input.model, promptInput(input));
      return sendJson(res, 200, { input_tokens: tokenIds.length });
    }
    model = modelOf(ctx, raw);
    if (route === 'detokenize') {
      const tokens = raw.tokens;
      if (!Array.isArray(tokens) || !tokens.every((id) => typeof id === 'number' && Number.isInteger(id) && id >= 0 && id <= TOKEN_ID_LIMIT)) {
        throw badRequest("'tokens' must be an array of token ids", 'tokens');
      }
      const { codec } = await ctx.pipeline.tokenizeOnly(model, { kind: 'text', text: '', addSpecialTokens: false });
      if (codec.vocabSize !== undefined) {
        const outside = (tokens as number[]).find((id) => id >= codec.vocabSize!);
        if (outside !== undefined) throw badRequest(`token id ${outside} is outside the vocabulary (size ${codec.vocabSize})`, 'tokens');
      }
      const detokenizer = codec.createDetokenizer({ stop: [] });
      const text = detokenizer.push(tokens as number[]).text + detokenizer.flush();
      return sendJson(res, 200, { prompt: text });
    }
    let prompt: PromptInput;
    if (raw.messages !== undefined) {
      // The chat request's own validation and template path; vLLM's default adds no special tokens here.
      const input = parseChatRequest({ model, messages: raw.messages, tools: raw.tools, chat_template_kwargs: raw.chat_template_kwargs, add_generation_prompt: raw.add_generation_prompt });
      prompt = promptInput(input);
    } else {
      if (typeof raw.prompt !== 'string') throw badRequest("'prompt' (a string) or 'messages' is required", 'prompt');
      prompt = { kind: 'text', text: raw.prompt, addSpecialTokens: flag(raw, 'add_special_tokens', true) };
    }
    const { tokenIds, contextLength, codec } = await ctx.pipeline.tokenizeOnly(model, prompt);
    const strs = flag(raw, 'return_token_strs', false);
    return sendJson(res, 200, {
      count: tokenIds.length,
      max_model_len: Number.isFinite(contextLength) ? contextLength : null,
      tokens: tokenIds,
      token_strs: strs ? tokenIds.map((id) => codec.tokenText(id)) : null,
    });
  } catch (err) {
    const apiError: ApiError = renameParams(toApiError(err), api?.paramNames);
    status = apiError.status;
    sendError(res, apiError, ctx.retryAfterSeconds, shape);
  } finally {
    ctx.metrics.requests.inc({ model, endpoint: route, status: String(status) });
  }
}
