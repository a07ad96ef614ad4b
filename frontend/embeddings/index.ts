/** Public surface of frontend/embeddings: `POST /v1/embeddings`. */
export { handleEmbeddings, type EmbeddingsContext } from './embeddings-handler.js';
export { EmbeddingsService, type EmbeddingTargets, type EmbeddingResult } from './embeddings-service.js';
export { parseEmbeddingsRequest, MAX_EMBEDDING_INPUTS, type EmbeddingsRequest, type EmbeddingInputs } from './embeddings-request.js';
export { dimensionsError, truncateVectors, embeddingsBody, type EmbeddingsBody } from './embedding-output.js';
