/** /v1/embeddings request parsing and output shaping: pure functions, no sockets. */
import { describe, expect, it } from 'vitest';
import { ApiError } from '../../frontend/errors.js';
import { dimensionsError, embeddingsBody, parseEmbeddingsRequest, truncateVectors } from '../../frontend/embeddings/index.js';
import type { EmbeddingCapability } from '../../proto/wire.js';

function refusal(body: unknown): ApiError {
  try {
    parseEmbeddingsRequest(body);
  } catch (err) {
    if (err instanceof ApiError) return err;
    throw err;
  }
  throw new Error('expected a refusal');
}

describe('parseEmbeddingsRequest', () => {
  it('takes each of the four input forms', () => {
    expect(parseEmbeddingsRequest({ model: 'm', input: 'a' }).inputs).toEqual({ kind: 'text', texts: ['a'] });
    expect(parseEmbeddingsRequest({ model: 'm', input: ['a', 'b'] }).inputs).toEqual({ kind: 'text', texts: ['a', 'b'] });
    expect(parseEmbeddingsRequest({ model: 'm', input: [1, 2] }).inputs).toEqual({ kind: 'tokens', tokens: [[1, 2]] });
    expect(parseEmbeddingsRequest({ model: 'm', input: [[1], [2, 3]] }).inputs).toEqual({ kind: 'tokens', tokens: [[1], [2, 3]] });
  });

  it('defaults encoding_format to float and keeps dimensions', () => {
    expect(parseEmbeddingsRequest({ model: 'm', input: 'a', dimensions: 8 })).toEqual({ model: 'm', inputs: { kind: 'text', texts: ['a'] }, dimensions: 8, encodingFormat: 'float' });
    expect(parseEmbeddingsRequest({ model: 'm', input: 'a', encoding_format: 'base64' }).encodingFormat).toBe('base64');
  });

  it('names the field of each refusal', () => {
    expect(refusal({ input: 'a' }).param).toBe('model');
    expect(refusal({ model: 'm' }).param).toBe('input');
    expect(refusal({ model: 'm', input: '' }).param).toBe('input');
    expect(refusal({ model: 'm', input: ['a', ''] }).param).toBe('input[1]');
    expect(refusal({ model: 'm', input: [[1], [1.5]] }).param).toBe('input[1]');
    expect(refusal({ model: 'm', input: ['a', [1]] }).param).toBe('input');
    expect(refusal({ model: 'm', input: Array(2049).fill('a') }).param).toBe('input');
    expect(refusal({ model: 'm', input: 'a', dimensions: 0 }).param).toBe('dimensions');
    expect(refusal({ model: 'm', input: 'a', encoding_format: 'int8' }).param).toBe('encoding_format');
    expect(refusal([1]).status).toBe(400);
  });
});

describe('dimensions and output', () => {
  const plain: EmbeddingCapability = { dimensions: 4, pooling: 'last', normalize: true, matryoshka: false };
  const mrl: EmbeddingCapability = { ...plain, matryoshka: true, matryoshkaDimensions: [2, 4] };

  it('dimensions: refused without Matryoshka, above the size, or off the declared list', () => {
    expect(dimensionsError('m', plain, 2)?.param).toBe('dimensions');
    expect(dimensionsError('m', { ...plain, matryoshka: true }, 5)?.message).toContain('more than');
    expect(dimensionsError('m', mrl, 3)?.message).toContain('supports dimensions 2, 4');
    expect(dimensionsError('m', mrl, 2)).toBeUndefined();
  });

  it('truncation keeps a prefix and renormalizes: (3, 4, 12, 0) / 13 to 2 dims is (0.6, 0.8)', () => {
    const v = Float32Array.of(3 / 13, 4 / 13, 12 / 13, 0);
    const out = truncateVectors(v, 4, 2, true);
    expect(out[0]).toBeCloseTo(0.6, 6);
    expect(out[1]).toBeCloseTo(0.8, 6);
    expect(truncateVectors(v, 4, 4, true)).toBe(v);
  });

  it('base64 is the little-endian float32 bytes; usage counts prompt tokens', () => {
    const v = Float32Array.of(0.5, -1, 0.25, 2);
    const body = embeddingsBody('m', v, 2, 'base64', 7);
    expect(body.data).toHaveLength(2);
    const bytes = Buffer.from(body.data[1]!.embedding as string, 'base64');
    expect(Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, 2))).toEqual([0.25, 2]);
    expect(body.usage).toEqual({ prompt_tokens: 7, total_tokens: 7 });
    expect(embeddingsBody('m', v, 2, 'float', 7).data[0]!.embedding).toEqual([0.5, -1]);
  });
});
