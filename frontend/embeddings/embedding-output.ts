/**
 * From the worker's vectors to OpenAI's response: `dimensions` (a Matryoshka prefix,
 * renormalized), `encoding_format` (`float`: JSON numbers; `base64`: the little-endian float32
 * bytes, which the `openai` SDK decodes itself) and `usage`.
 */
import type { EmbeddingCapability } from '../../proto/wire.js';
import { badRequest, quoteInput } from '../errors.js';

/** The 400 for a `dimensions` the model cannot honour, or undefined when it can. */
export function dimensionsError(model: string, cap: EmbeddingCapability, dimensions: number): ReturnType<typeof badRequest> | undefined {
  const name = quoteInput(model);
  if (!cap.matryoshka) {
    return badRequest(`the model '${name}' does not support 'dimensions': it does not declare Matryoshka embeddings (its vectors have ${cap.dimensions} dimensions)`, 'dimensions');
  }
  if (dimensions > cap.dimensions) return badRequest(`dimensions ${dimensions} is more than the model '${name}' has (${cap.dimensions})`, 'dimensions');
  if (cap.matryoshkaDimensions !== undefined && !cap.matryoshkaDimensions.includes(dimensions)) {
    return badRequest(`the model '${name}' supports dimensions ${cap.matryoshkaDimensions.join(', ')}, not ${dimensions}`, 'dimensions');
  }
  return undefined;
}

/** The first `keep` components of each row, L2-renormalized when the model's vectors are normalized. */
export function truncateVectors(vectors: Float32Array, dim: number, keep: number, normalize: boolean): Float32Array {
  if (keep === dim) return vectors;
  const rows = vectors.length / dim;
  const out = new Float32Array(rows * keep);
  for (let r = 0; r < rows; r++) {
    let sum = 0;
    for (let j = 0; j < keep; j++) sum += vectors[r * dim + j]! * vectors[r * dim + j]!;
    const scale = normalize ? 1 / Math.max(Math.sqrt(sum), 1e-12) : 1;
    for (let j = 0; j < keep; j++) out[r * keep + j] = vectors[r * dim + j]! * scale;
  }
  return out;
}

export interface EmbeddingsBody {
  object: 'list';
  data: Array<{ object: 'embedding'; index: number; embedding: number[] | string }>;
  model: string;
  usage: { prompt_tokens: number; total_tokens: number };
}

export function embeddingsBody(model: string, vectors: Float32Array, dim: number, format: 'float' | 'base64', promptTokens: number): EmbeddingsBody {
  const rows = vectors.length / dim;
  const data: EmbeddingsBody['data'] = [];
  for (let r = 0; r < rows; r++) {
    const row = vectors.subarray(r * dim, (r + 1) * dim);
    const embedding = format === 'float' ? Array.from(row) : Buffer.from(row.buffer, row.byteOffset, row.byteLength).toString('base64');
    data.push({ object: 'embedding', index: r, embedding });
  }
  return { object: 'list', data, model, usage: { prompt_tokens: promptTokens, total_tokens: promptTokens } };
}
