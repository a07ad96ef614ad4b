/**
 * `{ns}/embedding/embed`: an embedding worker (`runtime worker --task embed`) turns a batch of
 * tokenized inputs into pooled, L2-normalized vectors (docs/embeddings.md). One call, one
 * answer. The model card of such a worker has `task: 'embed'` and `embedding` (below); the
 * frontend sends `/v1/embeddings` only to those cards.
 */

/** Endpoint name, under the card's component (`embedding` by default). */
export const EMBED_ENDPOINT = 'embed';
/** Default component of embedding workers. */
export const EMBEDDING_COMPONENT = 'embedding';

/** What a worker's card offers beside generation. Absent `task` on a card = 'generate'. */
export type WorkerTask = 'generate' | 'embed';
export const WORKER_TASKS: readonly WorkerTask[] = ['generate', 'embed'];

export type EmbeddingPooling = 'last' | 'mean';

/** The embedding capability on a model card (`task: 'embed'`). */
export interface EmbeddingCapability {
  /** Length of the vectors the worker returns (the hidden size). */
  dimensions: number;
  pooling: EmbeddingPooling;
  /** Vectors are L2-normalized (the model's Normalize module, or the default). */
  normalize: boolean;
  /**
   * The model declares Matryoshka training (config.json `is_matryoshka` or
   * `matryoshka_dimensions`), so a prefix of a vector, renormalized, is an embedding too:
   * `dimensions` in a request is allowed. With a list, only those lengths are.
   */
  matryoshka: boolean;
  matryoshkaDimensions?: number[];
}

/** Body of an `embed` call. */
export interface EmbedRequest {
  requestId: string;
  /** One token-id array per input, each non-empty. */
  inputs: number[][];
}

/** The call's one answer. */
export interface EmbedResponse {
  dimensions: number;
  /** inputs.length × dimensions float32 values, little-endian, in input order. */
  vectors: Uint8Array;
}

/** Checks the `embedding` field of a card; a reason string when it is wrong. */
export function embeddingCapabilityError(v: unknown): string | undefined {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return 'embedding must be an object';
  const e = v as Record<string, unknown>;
  if (typeof e.dimensions !== 'number' || !Number.isInteger(e.dimensions) || e.dimensions < 1) return 'embedding.dimensions must be a positive integer';
  if (e.pooling !== 'last' && e.pooling !== 'mean') return "embedding.pooling must be 'last' or 'mean'";
  if (typeof e.normalize !== 'boolean') return 'embedding.normalize must be a boolean';
  if (typeof e.matryoshka !== 'boolean') return 'embedding.matryoshka must be a boolean';
  if (e.matryoshkaDimensions !== undefined && (!Array.isArray(e.matryoshkaDimensions) || !e.matryoshkaDimensions.every((d) => Number.isInteger(d) && d >= 1))) {
    return 'embedding.matryoshkaDimensions must be positive integers';
  }
  return undefined;
}
