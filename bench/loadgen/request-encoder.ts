/**
 * Turns a workload's turn into an OpenAI request body. Embeddings send every user message of
 * the turn as one `input` of a batch (token arrays with --prompt-format ids), unstreamed. Token ids go out as a token-id
 * prompt on /v1/completions (exact by construction) or as text (exact when a tokenizer
 * built the ids). For text completions the ids are trimmed by the tokenizer's special-token
 * count, so the prompt the server counts (BOS included) has exactly the requested length.
 */
import type { TokenSpace } from './token-space.js';
import type { TurnSpec } from './workloads/workload.js';

export type EndpointKind = 'completions' | 'chat' | 'responses' | 'messages' | 'embeddings';
export const ENDPOINT_KINDS: readonly EndpointKind[] = ['completions', 'chat', 'responses', 'messages', 'embeddings'];
export type PromptFormat = 'ids' | 'text';

export interface EncoderOptions {
  model: string;
  endpoint: EndpointKind;
  promptFormat: PromptFormat;
  /** Sent when set; servers default otherwise. */
  temperature: number | undefined;
  ignoreEos: boolean;
  /** Extra top-level fields merged into every body (e.g. vendor sampling options). */
  extraBody: Record<string, unknown> | undefined;
}

export interface EncodedRequest {
  path: string;
  body: string;
  /** Prompt tokens we expect the server to count (exact for completions). */
  expectedPromptTokens: number;
  /** Sequences in the request: the batch size for embeddings, 1 otherwise. */
  sequences: number;
  /** False for embeddings: one JSON body, no token stream. */
  streamed: boolean;
}

export const ENDPOINT_PATHS: Readonly<Record<EndpointKind, string>> = {
  completions: '/v1/completions',
  chat: '/v1/chat/completions',
  responses: '/v1/responses',
  messages: '/v1/messages',
  embeddings: '/v1/embeddings',
};

export function encodeTurn(turn: TurnSpec, maxTokens: number, options: EncoderOptions, tokens: TokenSpace): EncodedRequest {
  if (options.endpoint === 'embeddings') return encodeEmbeddings(turn, options, tokens);
  const common: Record<string, unknown> = {
    model: options.model,
    max_tokens: maxTokens,
    stream: true,
    stream_options: { include_usage: true },
  };
  if (options.ignoreEos) common.ignore_eos = true;
  if (options.temperature !== undefined) common.temperature = options.temperature;

  let payload: Record<string, unknown>;
  let expected: number;
  if (options.endpoint === 'completions') {
    const ids: number[] = [];
    for (const m of turn.messages) if (m.ids) for (const id of m.ids) ids.push(id);
    if (options.promptFormat === 'ids') {
      payload = { ...common, prompt: ids };
      expected = ids.length;
    } else {
      const keep = Math.max(1, ids.length - tokens.specialTokens);
      if (keep < ids.length) ids.length = keep;
      payload = { ...common, prompt: tokens.render(ids) };
      expected = keep + tokens.specialTokens;
    }
  } else {
    const messages = turn.messages.map((m) => ({ role: m.role, content: m.text ?? tokens.render(m.ids ?? []) }));
    expected = turn.inputTokens;
    if (options.endpoint === 'chat') payload = { ...common, messages };
    else {
      // Responses and Messages: their own field names, usage always at the end, no stream_options.
      const { max_tokens: _max, stream_options: _so, ...rest } = common;
      if (options.endpoint === 'responses') payload = { ...rest, max_output_tokens: maxTokens, input: messages.filter((m) => m.role !== 'system'), ...systemField(messages, 'instructions') };
      else payload = { ...rest, max_tokens: maxTokens, messages: messages.filter((m) => m.role !== 'system'), ...systemField(messages, 'system') };
    }
  }
  if (options.extraBody) payload = { ...payload, ...options.extraBody };
  return { path: ENDPOINT_PATHS[options.endpoint], body: JSON.stringify(payload), expectedPromptTokens: expected, sequences: 1, streamed: true };
}

/**
 * One input per user message. Text inputs are trimmed by the special-token count as text
 * completions are (the server tokenizes each input the same way); base64 keeps the answer small.
 */
function encodeEmbeddings(turn: TurnSpec, options: EncoderOptions, tokens: TokenSpace): EncodedRequest {
  const inputs: Array<number[] | string> = [];
  let expected = 0;
  for (const m of turn.messages) {
    if (m.role !== 'user') continue;
    const ids = m.ids ?? [];
    if (options.promptFormat === 'ids') {
      inputs.push(ids);
      expected += ids.length;
    } else {
      const keep = Math.max(1, ids.length - tokens.specialTokens);
      inputs.push(tokens.render(ids.slice(0, keep)));
      expected += keep + tokens.specialTokens;
    }
  }
  let payload: Record<string, unknown> = { model: options.model, input: inputs, encoding_format: 'base64' };
  if (options.extraBody) payload = { ...payload, ...options.extraBody };
  return { path: ENDPOINT_PATHS.embeddings, body: JSON.stringify(payload), expectedPromptTokens: expected, sequences: inputs.length, streamed: false };
}

function systemField(messages: Array<{ role: string; content: string }>, field: string): Record<string, string> {
  const system = messages.filter((m) => m.role === 'system').map((m) => m.content);
  return system.length > 0 ? { [field]: system.join('\n') } : {};
}
