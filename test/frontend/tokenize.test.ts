/**
 * `POST /tokenize`, `POST /detokenize` (vLLM's shapes) and `POST /v1/messages/count_tokens`
 * (Anthropic's), over a real socket against fake workers and the byte codec (token id = byte),
 * so every count is known. The counts must equal what generation itself tokenizes.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postRaw, startTestFrontend, type TestFrontend } from './harness.js';

describe('frontend: tokenize, detokenize, count_tokens', () => {
  let t: TestFrontend;
  beforeAll(async () => {
    t = await startTestFrontend({}, async (cluster) => void (await cluster.addWorker({ text: 'ok' })));
  });
  afterAll(() => t.close());

  const post = async (path: string, body: unknown) => {
    const res = await postRaw(`${t.url}${path}`, JSON.stringify(body));
    return { status: res.status, body: JSON.parse(res.text) };
  };

  it('/tokenize a prompt: count, tokens, max_model_len; the model defaults to the only one served', async () => {
    const res = await post('/tokenize', { model: 'fake-model', prompt: 'héllo' });
    expect(res).toEqual({ status: 200, body: { count: 6, max_model_len: 256, tokens: [104, 195, 169, 108, 108, 111], token_strs: null } });
    expect((await post('/tokenize', { prompt: 'héllo' })).body).toEqual(res.body);
    const strs = await post('/tokenize', { prompt: 'ab', return_token_strs: true });
    expect(strs.body.token_strs).toEqual(['a', 'b']);
  });

  it('/tokenize messages: the chat template’s tokens, the same count a chat request’s usage reports', async () => {
    const messages = [{ role: 'user', content: 'what time is it?' }];
    const res = await post('/tokenize', { model: 'fake-model', messages });
    expect(res.status).toBe(200);
    expect(Buffer.from(res.body.tokens).toString()).toBe('<user>what time is it?\n<assistant>');
    const chat = await post('/v1/chat/completions', { model: 'fake-model', messages });
    expect(chat.body.usage.prompt_tokens).toBe(res.body.count);
  });

  it('/detokenize turns ids back into the text', async () => {
    expect(await post('/detokenize', { model: 'fake-model', tokens: [104, 195, 169] })).toEqual({ status: 200, body: { prompt: 'hé' } });
  });

  it('bad input is a 400 in OpenAI shape naming the field; an unknown model is a 404', async () => {
    const noPrompt = await post('/tokenize', { model: 'fake-model' });
    expect(noPrompt).toMatchObject({ status: 400, body: { error: { param: 'prompt', type: 'invalid_request_error' } } });
    expect(await post('/detokenize', { model: 'fake-model', tokens: [1, -1] })).toMatchObject({ status: 400, body: { error: { param: 'tokens' } } });
    expect(await post('/detokenize', { model: 'fake-model', tokens: [300] })).toMatchObject({ status: 400, body: { error: { param: 'tokens' } } });
    expect(await post('/tokenize', { model: 'nope', prompt: 'x' })).toMatchObject({ status: 404, body: { error: { code: 'model_not_found' } } });
  });

  it('/v1/messages/count_tokens: input_tokens equals the usage of the same Messages request', async () => {
    const request = { model: 'fake-model', system: 'Be brief.', messages: [{ role: 'user', content: [{ type: 'text', text: 'hello' }] }] };
    const count = await post('/v1/messages/count_tokens', request);
    expect(count.status).toBe(200);
    expect(count.body).toEqual({ input_tokens: '<system>Be brief.\n<user>hello\n<assistant>'.length });
    const message = await post('/v1/messages', { ...request, max_tokens: 8 });
    expect(message.body.usage.input_tokens).toBe(count.body.input_tokens);
    const bad = await post('/v1/messages/count_tokens', { model: 'fake-model', messages: [] });
    expect(bad).toMatchObject({ status: 400, body: { type: 'error', error: { type: 'invalid_request_error', message: expect.stringContaining('messages') } } });
  });
});
