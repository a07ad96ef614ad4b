/**
 * `POST /v1/embeddings` through the `openai` SDK's `embeddings.create` against real `runtime up`
 * fleets (issue 26, item 3):
 *  - mocker, mixed: one generation worker and two embedding workers (`--embedding-workers 2`)
 *    on a tiny Qwen3 embedding model; the mocker's vectors are a hash of the tokens, so equal
 *    inputs give equal vectors on any worker and in any batch;
 *  - mocker, generation-only (`--model tiny`): embeddings are a 400 naming the model;
 *  - native: one embedding worker on a tiny Qwen3 with mean pooling and Matryoshka declared,
 *    its vectors checked against the independent TypeScript forward (test/native/embedding-reference.ts).
 */
import { join } from 'node:path';
import OpenAI from 'openai';
import { beforeAll, describe, expect, it } from 'vitest';
import { makeTinyModel } from '../../workers/models/index.js';
import { metricValue } from '../harness/http.js';
import { maxAbsDiff, normalized, ReferenceEmbedder } from '../native/embedding-reference.js';
import { reportedPids, upForBlock } from './up.js';
import { rejection } from './sdk-errors.js';

const KEY = 'embed-secret';
const QUIET = ['--log-level', 'warn'];

function client(url: string): OpenAI {
  return new OpenAI({ baseURL: `${url}/v1`, apiKey: KEY, maxRetries: 0 });
}

function norm(v: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < v.length; i++) s += v[i]! * v[i]!;
  return Math.sqrt(s);
}

describe('embeddings on a mixed mocker fleet (1 generation + 2 embedding workers)', () => {
  const served = upForBlock('tandem-embed-mock-', async (cacheDir) => {
    const dir = join(cacheDir, 'tiny-embed');
    await makeTinyModel({ arch: 'qwen3', outDir: dir, dtype: 'f32', seed: 3, embedding: 'last' });
    // 64 tokens per pass: an embedding input may not be longer, a generation prompt may.
    return ['--engine', 'mocker', '--model', dir, '--workers', '1', '--embedding-workers', '2', '--max-num-batched-tokens', '64', '--speedup-ratio', '100', '--api-key', KEY, ...QUIET];
  });
  let openai: OpenAI;
  beforeAll(() => {
    openai = client(served.url());
  });

  it('a string comes back as one normalized vector of the hidden size (SDK default: base64, decoded by the SDK), with usage', async () => {
    const res = await openai.embeddings.create({ model: 'tiny-embed', input: 'hello embeddings' });
    expect(res.object).toBe('list');
    expect(res.model).toBe('tiny-embed');
    expect(res.data).toHaveLength(1);
    expect(res.data[0]!.index).toBe(0);
    expect(res.data[0]!.embedding).toHaveLength(64);
    expect(norm(res.data[0]!.embedding)).toBeCloseTo(1, 5);
    expect(res.usage.prompt_tokens).toBeGreaterThan(0);
    expect(res.usage.total_tokens).toBe(res.usage.prompt_tokens);
  });

  it("encoding_format 'float' gives the same numbers as base64", async () => {
    const b64 = await openai.embeddings.create({ model: 'tiny-embed', input: 'same text' });
    const float = await openai.embeddings.create({ model: 'tiny-embed', input: 'same text', encoding_format: 'float' });
    expect(float.data[0]!.embedding).toEqual(b64.data[0]!.embedding);
    const raw = await openai.embeddings.create({ model: 'tiny-embed', input: 'same text', encoding_format: 'base64' });
    const bytes = Buffer.from(raw.data[0]!.embedding as unknown as string, 'base64');
    expect(Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4))).toEqual(float.data[0]!.embedding);
  });

  it('a batch of strings equals each string alone, in order, whichever worker answers', async () => {
    const texts = ['alpha', 'beta gamma', 'delta epsilon zeta'];
    const batch = await openai.embeddings.create({ model: 'tiny-embed', input: texts, encoding_format: 'float' });
    expect(batch.data.map((d) => d.index)).toEqual([0, 1, 2]);
    for (const [i, text] of texts.entries()) {
      // Four times: round-robin over two embedding workers.
      for (let k = 0; k < 2; k++) {
        const one = await openai.embeddings.create({ model: 'tiny-embed', input: text, encoding_format: 'float' });
        expect(one.data[0]!.embedding).toEqual(batch.data[i]!.embedding);
      }
    }
    expect(batch.data[0]!.embedding).not.toEqual(batch.data[1]!.embedding);
  });

  it('token-id arrays are taken as they are; usage counts them', async () => {
    const two = await openai.embeddings.create({ model: 'tiny-embed', input: [[5, 6, 7], [8, 9]], encoding_format: 'float' });
    expect(two.usage.prompt_tokens).toBe(5);
    const one = await openai.embeddings.create({ model: 'tiny-embed', input: [5, 6, 7], encoding_format: 'float' });
    expect(one.data[0]!.embedding).toEqual(two.data[0]!.embedding);
    expect(one.usage.prompt_tokens).toBe(3);
  });

  it('dimensions on a model without Matryoshka support is a 400 naming dimensions', async () => {
    const err = await rejection(openai.embeddings.create({ model: 'tiny-embed', input: 'x', dimensions: 16 }));
    expect(err.status).toBe(400);
    expect(err.param).toBe('dimensions');
    expect(err.type).toBe('invalid_request_error');
    expect(err.message).toContain('Matryoshka');
  });

  it('bad input is a 400 in OpenAI shape naming the field', async () => {
    for (const [input, param] of [['', 'input'], [[], 'input'], [['a', 1], 'input'], [[[1, 2], []], 'input[1]'], [[-1], 'input']] as const) {
      const err = await rejection(openai.embeddings.create({ model: 'tiny-embed', input: input as never }));
      expect(err.status, JSON.stringify(input)).toBe(400);
      expect(err.param, JSON.stringify(input)).toBe(param);
    }
    const far = await rejection(openai.embeddings.create({ model: 'tiny-embed', input: [[100000]] }));
    expect(far.status).toBe(400);
    expect(far.message).toContain('100000');
    const missing = await rejection(openai.embeddings.create({ model: 'no-such-model', input: 'x' }));
    expect(missing.status).toBe(404);
  });

  it('x-worker-instance-id pins the request to an embedding worker; the answer names the worker', async () => {
    const post = (headers: Record<string, string>) =>
      fetch(`${served.url()}/v1/embeddings`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}`, ...headers }, body: JSON.stringify({ model: 'tiny-embed', input: 'pin' }) });
    const first = await post({});
    const id = first.headers.get('x-worker-instance-id')!;
    expect(id).toMatch(/^[0-9a-f]{16}$/);
    for (let i = 0; i < 3; i++) expect((await post({ 'x-worker-instance-id': id })).headers.get('x-worker-instance-id')).toBe(id);
    const other = await post({ 'x-worker-instance-id': '00000000000000ff' });
    expect(other.status).toBe(404);
    expect(((await other.json()) as { error: { param: string } }).error.param).toBe('x-worker-instance-id');
  });

  it('needs the API key like every other route', async () => {
    const res = await fetch(`${served.url()}/v1/embeddings`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'tiny-embed', input: 'x' }) });
    expect(res.status).toBe(401);
  });

  it("an input longer than an embedding worker's pass is a 400; the generation context is not capped by it", async () => {
    const long = Array.from({ length: 65 }, (_, i) => i + 1);
    const err = await rejection(openai.embeddings.create({ model: 'tiny-embed', input: [long] }));
    expect(err.status).toBe(400);
    expect(err.param).toBe('input');
    expect(err.message).toContain('maximum context length of 64 tokens');
    const gen = await openai.completions.create({ model: 'tiny-embed', prompt: long, max_tokens: 2 });
    expect(gen.usage!.prompt_tokens).toBe(65);
  });

  it('generation on the same model goes only to the generation worker', async () => {
    for (let i = 0; i < 4; i++) {
      const res = await openai.completions.create({ model: 'tiny-embed', prompt: 'hi', max_tokens: 3 });
      expect(res.choices[0]!.finish_reason).toBeDefined();
      expect(res.usage!.completion_tokens).toBeGreaterThan(0);
    }
  });

  it('/health counts the embedding workers; /metrics counts the requests under endpoint="embeddings"', async () => {
    const health = (await (await fetch(`${served.url()}/health`)).json()) as { models: Array<{ name: string; instances: number }> };
    expect(health.models).toEqual([{ name: 'tiny-embed', instances: 3 }]);
    const text = await (await fetch(`${served.url()}/metrics`, { headers: { authorization: `Bearer ${KEY}` } })).text();
    expect(metricValue(text, 'tandem_frontend_requests_total', { endpoint: 'embeddings', status: '200' })).toBeGreaterThan(5);
    expect(metricValue(text, 'tandem_frontend_requests_total', { endpoint: 'embeddings', status: '400' })).toBeGreaterThan(0);
  });
  // Last: it disturbs the fleet. The dead worker's card outlives it until its lease expires.
  it('kill -9 of an embedding worker: every request is still answered, by the other one', async () => {
    const pid = reportedPids(served.output(), 'embed-0')[0]!;
    const before = await openai.embeddings.create({ model: 'tiny-embed', input: 'survivor', encoding_format: 'float' });
    process.kill(pid, 'SIGKILL');
    for (let i = 0; i < 6; i++) {
      const res = await openai.embeddings.create({ model: 'tiny-embed', input: 'survivor', encoding_format: 'float' });
      expect(res.data[0]!.embedding).toEqual(before.data[0]!.embedding);
    }
  });
});

describe('embeddings on a generation-only fleet', () => {
  const served = upForBlock('tandem-embed-gen-', async () => ['--engine', 'mocker', '--model', 'tiny', '--workers', '1', '--speedup-ratio', '100', ...QUIET]);

  it('is a 400 naming the model', async () => {
    const err = await rejection(client(served.url()).embeddings.create({ model: 'tiny-llama', input: 'x' }));
    expect(err.status).toBe(400);
    expect(err.param).toBe('model');
    expect(err.message).toContain("'tiny-llama' does not serve embeddings");
  });
});

describe('embeddings on the native engine (tiny Qwen3, mean pooling, Matryoshka)', () => {
  let dir = '';
  const served = upForBlock('tandem-embed-native-', async (cacheDir) => {
    dir = join(cacheDir, 'tiny-embed-mean');
    await makeTinyModel({ arch: 'qwen3', outDir: dir, dtype: 'f32', seed: 9, embedding: 'mean', matryoshka: true });
    return ['--engine', 'native', '--model', dir, '--embedding-workers', '1', '--threads', '1', '--api-key', KEY, ...QUIET];
  });
  let openai: OpenAI;
  let ref: ReferenceEmbedder;
  const inputs = [[1, 2, 3, 4, 5, 6, 7], [300], Array.from({ length: 40 }, (_, i) => (i * 37) % 512)];
  beforeAll(async () => {
    openai = client(served.url());
    ref = await ReferenceEmbedder.load(dir);
  });

  it('vectors equal sentence-transformers-style mean pooling + Normalize of an independent forward pass', async () => {
    const res = await openai.embeddings.create({ model: 'tiny-embed-mean', input: inputs });
    expect(res.data).toHaveLength(3);
    for (const [i, input] of inputs.entries()) expect(maxAbsDiff(res.data[i]!.embedding, ref.embed(input, 'mean'))).toBeLessThan(2e-5);
  });

  it('a batch equals its inputs sent one by one', async () => {
    const batch = await openai.embeddings.create({ model: 'tiny-embed-mean', input: inputs });
    for (const [i, input] of inputs.entries()) {
      const one = await openai.embeddings.create({ model: 'tiny-embed-mean', input: input });
      expect(maxAbsDiff(one.data[0]!.embedding, batch.data[i]!.embedding)).toBeLessThan(1e-6);
    }
  });

  it('dimensions truncates and renormalizes on a Matryoshka model', async () => {
    const res = await openai.embeddings.create({ model: 'tiny-embed-mean', input: [inputs[0]!], dimensions: 16 });
    const v = res.data[0]!.embedding;
    expect(v).toHaveLength(16);
    expect(maxAbsDiff(v, normalized(ref.embed(inputs[0]!, 'mean').subarray(0, 16)))).toBeLessThan(5e-5);
    const tooMany = await rejection(openai.embeddings.create({ model: 'tiny-embed-mean', input: 'x', dimensions: 65 }));
    expect(tooMany.status).toBe(400);
    expect(tooMany.param).toBe('dimensions');
  });

  it('strings are tokenized by the model tokenizer and embedded', async () => {
    const res = await openai.embeddings.create({ model: 'tiny-embed-mean', input: ['the quick brown fox', 'jumps'] });
    expect(res.data.map((d) => d.embedding.length)).toEqual([64, 64]);
    expect(norm(res.data[0]!.embedding)).toBeCloseTo(1, 5);
    expect(maxAbsDiff(res.data[0]!.embedding, res.data[1]!.embedding)).toBeGreaterThan(1e-3);
  });
});
