/**
 * The Responses API's own behaviour beyond the codec contract (api-codecs.test.ts): conversation
 * state (store, previous_response_id, GET/DELETE, the store's size and TTL bounds), cancel of a
 * response that is generating, status `incomplete`, `text.format` and `instructions` reaching
 * the pipeline, and the 400s that name the field. Fake workers and the byte codec (token id =
 * byte), so the prompt each turn sent can be read back exactly.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestFrontend, waitFor, type TestFrontend } from './harness.js';

const decode = (ids: readonly number[]): string => Buffer.from(ids.filter((id) => id < 256)).toString('utf8');

describe('Responses API: state, cancel, incomplete, bad input', () => {
  let t: TestFrontend;
  beforeAll(async () => {
    t = await startTestFrontend({ responsesStore: { maxEntries: 3, ttlMs: 60_000 } }, async (cluster) => {
      await cluster.addWorker({ text: 'Answer one.' });
    });
  });
  afterAll(() => t.close());

  const create = async (body: object) => t.frontend.handle({ path: '/v1/responses', body: { model: 'fake-model', ...body } });
  const lastPrompt = (): string => decode(t.cluster.allCalls().at(-1)!.request.tokenIds);

  it('previous_response_id continues the stored conversation; instructions are not carried over', async () => {
    const first = (await create({ input: 'First question?', instructions: 'Be brief.' })).json<any>();
    expect(first.status).toBe('completed');
    expect(first.output[0].content[0].text).toBe('Answer one.');
    expect(lastPrompt()).toBe('<system>Be brief.\n<user>First question?\n<assistant>');
    const second = (await create({ input: [{ role: 'user', content: [{ type: 'input_text', text: 'And then?' }] }], previous_response_id: first.id })).json<any>();
    expect(second.previous_response_id).toBe(first.id);
    expect(lastPrompt()).toBe('<user>First question?\n<assistant>Answer one.\n<user>And then?\n<assistant>');
    const fetched = await t.frontend.handle({ method: 'GET', path: `/v1/responses/${first.id}` });
    expect(fetched.status).toBe(200);
    expect(fetched.json()).toEqual(first);
  });

  it('function_call and function_call_output items become the assistant’s call and the tool’s answer', async () => {
    const res = await create({
      input: [
        { role: 'user', content: 'Weather?' },
        { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Oslo"}' },
        { type: 'function_call_output', call_id: 'call_1', output: '{"tempC":7}' },
      ],
      tools: [{ type: 'function', name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } }],
    });
    expect(res.status).toBe(200);
    const request = t.cluster.allCalls().at(-1)!.request;
    expect(decode(request.tokenIds)).toBe('<user>Weather?\n<assistant>\n<tool>{"tempC":7}\n<assistant>');
  });

  it('store: false is not kept; DELETE forgets; an unknown previous_response_id is a 400 naming it', async () => {
    const unstored = (await create({ input: 'x', store: false })).json<any>();
    expect((await t.frontend.handle({ method: 'GET', path: `/v1/responses/${unstored.id}` })).status).toBe(404);
    const refused = await create({ input: 'y', previous_response_id: unstored.id });
    expect(refused.status).toBe(400);
    expect(refused.json<any>().error).toMatchObject({ param: 'previous_response_id', type: 'invalid_request_error' });
    const stored = (await create({ input: 'z' })).json<any>();
    const del = await t.frontend.handle({ method: 'DELETE', path: `/v1/responses/${stored.id}` });
    expect(del.json()).toEqual({ id: stored.id, object: 'response', deleted: true });
    expect((await t.frontend.handle({ method: 'GET', path: `/v1/responses/${stored.id}` })).json<any>().error.code).toBe('not_found');
    expect((await create({ input: 'w', previous_response_id: stored.id })).status).toBe(400);
  });

  it('the store is bounded: past --responses-store-size the least recently used response is gone', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) ids.push((await create({ input: `n${i}` })).json<any>().id);
    expect((await t.frontend.handle({ method: 'GET', path: `/v1/responses/${ids[0]}` })).status).toBe(404);
    for (const id of ids.slice(1)) expect((await t.frontend.handle({ method: 'GET', path: `/v1/responses/${id}` })).status).toBe(200);
  });

  it('max_output_tokens reached: status incomplete with reason, streamed as response.incomplete', async () => {
    const unary = (await create({ input: 'q', max_output_tokens: 3 })).json<any>();
    expect(unary).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' }, usage: { output_tokens: 3 } });
    const streamed = await create({ input: 'q', max_output_tokens: 3, stream: true });
    const events = [...streamed.text.matchAll(/^event: (\S+)$/gm)].map((m) => m[1]);
    expect(events.at(-1)).toBe('response.incomplete');
    expect(events).not.toContain('response.completed');
  });

  it('text.format json_schema reaches the worker as a grammar; json_object too', async () => {
    const schema = { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] };
    // The fake worker ignores the grammar: its text is not JSON, but the spec must have reached it.
    await create({ input: 'q', text: { format: { type: 'json_schema', name: 'thing', schema, strict: true } } });
    expect(t.cluster.allCalls().at(-1)!.request.structured).toEqual({ kind: 'json_schema', schema });
    await create({ input: 'q', text: { format: { type: 'json_object' } } });
    expect(t.cluster.allCalls().at(-1)!.request.structured).toMatchObject({ kind: 'json_object' });
  });

  it('bad input is a 400 in OpenAI’s shape naming the field', async () => {
    const cases: Array<[object, string, RegExp]> = [
      [{ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'https://x/y.png' }] }] }, 'input[0].content[0]', /input_image/],
      [{ input: 'q', tools: [{ type: 'web_search_preview' }] }, 'tools[0]', /web_search_preview/],
      [{ input: 'q', tools: [{ type: 'file_search', vector_store_ids: ['v'] }] }, 'tools[0]', /file_search/],
      [{ input: 'q', tools: [{ type: 'computer_use_preview' }] }, 'tools[0]', /computer_use_preview/],
      [{ input: 'q', max_output_tokens: 0 }, 'max_output_tokens', /max_output_tokens/],
      [{ input: 'q', text: { format: { type: 'json_schema' } } }, 'text.format', /json_schema/],
      [{ input: [] }, 'input', /input/],
      [{ input: 'q', background: true }, 'background', /background/],
    ];
    for (const [body, param, message] of cases) {
      const res = await create(body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      const error = res.json<any>().error;
      expect(error.param, JSON.stringify(body)).toBe(param);
      expect(error.message).toMatch(message);
    }
  });
});

describe('Responses API: cancel', () => {
  let t: TestFrontend;
  beforeAll(async () => {
    t = await startTestFrontend({}, async (cluster) => void (await cluster.addWorker({ text: 'x'.repeat(200), tokenDelayMs: 20 })));
  });
  afterAll(() => t.close());

  it('POST /v1/responses/{id}/cancel ends a generating stream with response.failed (cancelled) and stops the worker', async () => {
    const res = await fetch(`${t.url}/v1/responses`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'fake-model', input: 'long', stream: true, max_output_tokens: 200 }) });
    const id = res.headers.get('x-request-id')!;
    expect(id).toMatch(/^resp_/);
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let text = '';
    while (!text.includes('response.output_text.delta')) text += decoder.decode((await reader.read()).value);
    const live = await t.frontend.handle({ method: 'GET', path: `/v1/responses/${id}` });
    expect(live.json<any>().status).toBe('in_progress');
    const cancelled = await t.frontend.handle({ method: 'POST', path: `/v1/responses/${id}/cancel` });
    expect(cancelled.status).toBe(200);
    expect(cancelled.json<any>()).toMatchObject({ id, status: 'cancelled' });
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += decoder.decode(value);
    }
    const last = text.trim().split('\n\n').at(-1)!;
    expect(last).toMatch(/^event: response\.failed\n/);
    expect(JSON.parse(last.split('\ndata: ')[1]!).response).toMatchObject({ status: 'cancelled', error: { code: 'cancelled' } });
    await waitFor(() => t.cluster.allCalls()[0]!.aborted);
    expect(t.cluster.allCalls()[0]!.finished).toBe(false);
    // Finished now: nothing to cancel; unknown ids are 404.
    expect((await t.frontend.handle({ method: 'POST', path: `/v1/responses/${id}/cancel` })).status).toBe(404);
    expect((await t.frontend.handle({ method: 'POST', path: '/v1/responses/resp_nope/cancel' })).status).toBe(404);
  });
});
