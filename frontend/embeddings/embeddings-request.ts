/**
 * `POST /v1/embeddings` bodies, OpenAI's shape: `input` as a string, an array of strings, an
 * array of token ids, or an array of token-id arrays; `dimensions`; `encoding_format`
 * (`float` | `base64`); `user` (accepted, unused). Every refusal is a 400 naming its field.
 */
import { badRequest } from '../errors.js';

/** OpenAI's limit on inputs per request. */
export const MAX_EMBEDDING_INPUTS = 2048;

export type EmbeddingInputs = { kind: 'text'; texts: string[] } | { kind: 'tokens'; tokens: number[][] };

export interface EmbeddingsRequest {
  model: string;
  inputs: EmbeddingInputs;
  dimensions?: number;
  encodingFormat: 'float' | 'base64';
}

function isTokenArray(v: unknown): v is number[] {
  return Array.isArray(v) && v.length > 0 && v.every((t) => typeof t === 'number');
}

function checkTokens(tokens: number[], param: string): void {
  for (const t of tokens) {
    if (!Number.isInteger(t) || t < 0 || t > 0x7fffffff) throw badRequest(`${param} must hold non-negative integer token ids`, param);
  }
}

export function parseEmbeddingsRequest(body: unknown): EmbeddingsRequest {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw badRequest('the request body must be a JSON object');
  const b = body as Record<string, unknown>;
  if (typeof b.model !== 'string' || b.model.length === 0) throw badRequest('model must be a non-empty string', 'model');
  const input = b.input;
  let inputs: EmbeddingInputs;
  if (input === undefined) throw badRequest('input is required', 'input');
  if (typeof input === 'string') {
    if (input.length === 0) throw badRequest('input must not be an empty string', 'input');
    inputs = { kind: 'text', texts: [input] };
  } else if (!Array.isArray(input) || input.length === 0) {
    throw badRequest('input must be a string, an array of strings, an array of token ids or an array of token-id arrays, and not empty', 'input');
  } else if (input.every((x) => typeof x === 'string')) {
    input.forEach((s, i) => {
      if ((s as string).length === 0) throw badRequest(`input[${i}] must not be an empty string`, `input[${i}]`);
    });
    inputs = { kind: 'text', texts: input as string[] };
  } else if (isTokenArray(input)) {
    checkTokens(input, 'input');
    inputs = { kind: 'tokens', tokens: [input] };
  } else if (input.every((x) => Array.isArray(x))) {
    input.forEach((x, i) => {
      if (!isTokenArray(x)) throw badRequest(`input[${i}] must be a non-empty array of token ids`, `input[${i}]`);
      checkTokens(x, `input[${i}]`);
    });
    inputs = { kind: 'tokens', tokens: input as number[][] };
  } else {
    throw badRequest('input must not mix strings, token ids and token-id arrays', 'input');
  }
  const count = inputs.kind === 'text' ? inputs.texts.length : inputs.tokens.length;
  if (count > MAX_EMBEDDING_INPUTS) throw badRequest(`input has ${count} items; at most ${MAX_EMBEDDING_INPUTS} per request`, 'input');
  let dimensions: number | undefined;
  if (b.dimensions !== undefined && b.dimensions !== null) {
    if (typeof b.dimensions !== 'number' || !Number.isInteger(b.dimensions) || b.dimensions < 1) throw badRequest('dimensions must be a positive integer', 'dimensions');
    dimensions = b.dimensions;
  }
  const format = b.encoding_format ?? 'float';
  if (format !== 'float' && format !== 'base64') throw badRequest("encoding_format must be 'float' or 'base64'", 'encoding_format');
  if (b.user !== undefined && typeof b.user !== 'string') throw badRequest('user must be a string', 'user');
  return { model: b.model, inputs, ...(dimensions !== undefined ? { dimensions } : {}), encodingFormat: format };
}
