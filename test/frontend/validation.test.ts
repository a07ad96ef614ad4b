/**
 * Hostile and lax inputs (issue 12, faults 5 and 8) over a real socket: each is a 400 naming
 * the parameter, never a 5xx; what is echoed back is capped; `logit_bias` reaches the worker.
 */
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_ERROR_MESSAGE_CHARS } from '../../frontend/errors.js';
import { postRaw, startTestFrontend, type TestFrontend } from './harness.js';

interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string };
}

describe('frontend: request validation', () => {
  let t: TestFrontend;
  let client: OpenAI;

  beforeAll(async () => {
    t = await startTestFrontend({}, async (cluster) => {
      await cluster.addWorker({ text: 'ok' });
    });
    client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  afterAll(() => t.close());

  const chat = (extra: Record<string, unknown>, messages: unknown = [{ role: 'user', content: 'hi' }]) =>
    postRaw(`${t.url}/v1/chat/completions`, JSON.stringify({ model: 'fake-model', messages, max_tokens: 2, ...extra }));
  const completion = (extra: Record<string, unknown>) => postRaw(`${t.url}/v1/completions`, JSON.stringify({ model: 'fake-model', prompt: 'x', max_tokens: 2, ...extra }));
  async function expect400(res: Promise<{ status: number; text: string }>, param: string | RegExp): Promise<ErrorBody> {
    const r = await res;
    expect(r.status, r.text).toBe(400);
    const body = JSON.parse(r.text) as ErrorBody;
    expect(body.error.type).toBe('invalid_request_error');
    expect(body.error.param).toMatch(typeof param === 'string' ? new RegExp(`^${param.replace(/[[\].]/g, '\\$&')}$`) : param);
    return body;
  }

  it('fault 5: a prompt of 100k nested arrays is a 400, not a stack overflow', async () => {
    const deep = '['.repeat(100_000) + '1' + ']'.repeat(100_000);
    const r = await postRaw(`${t.url}/v1/completions`, `{"model":"fake-model","prompt":${deep}}`);
    expect(r.status).toBe(400);
    expect((JSON.parse(r.text) as ErrorBody).error.message).toMatch(/deeper than 64 levels/);
    // Depth within the bound but still not a prompt: the prompt parser refuses it without recursing.
    await expect400(completion({ prompt: [[[[[1]]]]] }), 'prompt');
  });

  it('fault 5: GET /v1/models/%ZZ is a 400, not a URIError 500', async () => {
    const res = await fetch(`${t.url}/v1/models/%ZZ`);
    expect(res.status).toBe(400);
    expect(((await res.json()) as ErrorBody).error.param).toBe('model');
    expect((await fetch(`${t.url}/v1/models/fake-model`)).status).toBe(200);
  });

  it('one-element prompt batches still work: ["text"] and [[ids]]', async () => {
    expect((await completion({ prompt: ['hello'] })).status).toBe(200);
    expect((await completion({ prompt: [[104, 105]] })).status).toBe(200);
    await expect400(completion({ prompt: ['a', 'b'] }), 'prompt');
  });

  it('fault 8: unknown, empty or missing roles are 400 naming the message', async () => {
    await expect400(chat({}, [{ role: 'wizard', content: 'hi' }]), 'messages[0].role');
    await expect400(chat({}, [{ role: '', content: 'hi' }]), 'messages[0].role');
    await expect400(chat({}, [{ role: 'user', content: 'a' }, { content: 'hi' }]), 'messages[1].role');
    await expect400(chat({}, ['hi']), 'messages[0]');
  });

  it('fault 8: content is required, except on an assistant message with tool_calls; tool messages need tool_call_id', async () => {
    await expect400(chat({}, [{ role: 'user' }]), 'messages[0].content');
    await expect400(chat({}, [{ role: 'user', content: null }]), 'messages[0].content');
    await expect400(chat({}, [{ role: 'assistant' }]), 'messages[0].content');
    const call = { id: 'call_1', type: 'function', function: { name: 'f', arguments: '{}' } };
    const ok = await chat({}, [
      { role: 'user', content: 'q' },
      { role: 'assistant', tool_calls: [call] },
      { role: 'tool', tool_call_id: 'call_1', content: '42' },
    ]);
    expect(ok.status, ok.text).toBe(200);
    await expect400(chat({}, [{ role: 'tool', content: '42' }]), 'messages[0].tool_call_id');
    await expect400(chat({}, [{ role: 'user', content: 'q', tool_calls: [call] }]), 'messages[0].tool_calls');
    await expect400(chat({}, [{ role: 'assistant', tool_calls: 'nope' }]), 'messages[0].tool_calls');
    await expect400(chat({}, [{ role: 'user', content: 'q', name: 7 }]), 'messages[0].name');
  });

  it('fault 8: logit_bias is type-checked: an object of token id → number in [-100, 100]', async () => {
    for (const bad of [[1, 2], 'x', 5, { abc: 1 }, { '-1': 1 }, { '1.5': 1 }, { '01': 1 }, { '1': 101 }, { '1': '5' }, { '1': null }, { '99999999999': 1 }]) {
      await expect400(chat({ logit_bias: bad }), 'logit_bias');
    }
    // Beyond the model's vocabulary (the fake codec has 257 tokens).
    await expect400(chat({ logit_bias: { '300': 5 } }), 'logit_bias');
  });

  it('fault 8: a valid logit_bias reaches the worker as [id, bias] pairs, zeros dropped; null is absent', async () => {
    const before = t.cluster.allCalls().length;
    const r = await chat({ logit_bias: { '65': 100, '7': -100, '9': 0 } });
    expect(r.status, r.text).toBe(200);
    const sent = t.cluster.allCalls()[before]!.request.sampling.logitBias;
    expect(sent).toEqual([[7, -100], [65, 100]]);
    expect((await chat({ logit_bias: null })).status).toBe(200);
    expect(t.cluster.allCalls().at(-1)!.request.sampling.logitBias).toBeUndefined();
  });

  it('fault 8: user must be a bounded string; suffix is refused as unsupported', async () => {
    await expect400(chat({ user: 42 }), 'user');
    await expect400(chat({ user: 'u'.repeat(257) }), 'user');
    expect((await chat({ user: 'user-1234' })).status).toBe(200);
    const suffix = await expect400(completion({ suffix: 'tail' }), 'suffix');
    expect(suffix.error.message).toMatch(/not supported/);
    await expect400(completion({ suffix: 7 }), 'suffix');
  });

  it('response_format: text and the JSON modes are accepted and reach the worker as a spec; bad shapes are 400', async () => {
    expect((await chat({ response_format: { type: 'text' } })).status).toBe(200);
    expect(t.cluster.allCalls().at(-1)!.request.structured).toBeUndefined();
    expect((await chat({ response_format: { type: 'json_object' } })).status).toBe(200);
    expect(t.cluster.allCalls().at(-1)!.request.structured).toEqual({ kind: 'json_object' });
    const schema = { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] };
    expect((await chat({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema, strict: true } } })).status).toBe(200);
    expect(t.cluster.allCalls().at(-1)!.request.structured).toEqual({ kind: 'json_schema', schema });
    await expect400(chat({ response_format: 'json' }), 'response_format');
    await expect400(chat({ response_format: { type: 'yaml' } }), 'response_format');
    const noName = await expect400(chat({ response_format: { type: 'json_schema', json_schema: { schema } } }), 'response_format');
    expect(noName.error.message).toMatch(/json_schema\.name' is required/);
  });

  it('issue 16: an invalid schema or an unsupported feature is a 400 naming it, on chat and completions', async () => {
    const unique = await expect400(chat({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'array', uniqueItems: true } } } }), 'response_format');
    expect(unique.error.message).toMatch(/"uniqueItems" is not supported/);
    const missing = await expect400(chat({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { $ref: '#/$defs/gone' } } } }), 'response_format');
    expect(missing.error.message).toMatch(/does not exist/);
    const regex = await expect400(completion({ structured_outputs: { regex: '(open' } }), 'structured_outputs');
    expect(regex.error.message).toMatch(/regex/i);
    const two = await expect400(chat({ response_format: { type: 'json_object' }, guided_regex: 'a' }), 'guided_regex');
    expect(two.error.message).toMatch(/'response_format' and 'guided_regex'/);
  });

  it('issue 16: vLLM structured_outputs and guided_* reach the worker on both endpoints', async () => {
    expect((await completion({ structured_outputs: { choice: ['yes', 'no'] } })).status).toBe(200);
    expect(t.cluster.allCalls().at(-1)!.request.structured).toEqual({ kind: 'choice', choices: ['yes', 'no'] });
    expect((await chat({ guided_regex: '[0-9]+' })).status).toBe(200);
    expect(t.cluster.allCalls().at(-1)!.request.structured).toEqual({ kind: 'regex', pattern: '[0-9]+' });
  });

  it('issue 16: tool_choice required or named reaches the worker as a tool_calls grammar (Hermes when the template names no format)', async () => {
    const tools = [
      { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } },
      { type: 'function', function: { name: 'now' } },
    ];
    expect((await chat({ tools, tool_choice: 'required' })).status).toBe(200);
    expect(t.cluster.allCalls().at(-1)!.request.structured).toEqual({
      kind: 'tool_calls',
      format: 'hermes',
      tools: [
        { name: 'get_weather', parameters: tools[0]!.function.parameters },
        { name: 'now' },
      ],
      parallel: true,
    });
    expect((await chat({ tools, tool_choice: { type: 'function', function: { name: 'now' } } })).status).toBe(200);
    expect(t.cluster.allCalls().at(-1)!.request.structured).toEqual({ kind: 'tool_calls', format: 'hermes', tools: [{ name: 'now' }], parallel: false });
    expect((await chat({ tools, tool_choice: 'auto' })).status).toBe(200);
    expect(t.cluster.allCalls().at(-1)!.request.structured).toBeUndefined();
    const noName = await expect400(chat({ tools: [tools[0], { type: 'function', function: { parameters: {} } }] }), 'tools[1]');
    expect(noName.error.message).toMatch(/'tools\[1\]\.function\.name' is required/);
    const badParams = await expect400(chat({ tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'array', uniqueItems: true } } }], tool_choice: 'required' }), 'tools[0].function.parameters');
    expect(badParams.error.message).toMatch(/"uniqueItems" is not supported/);
    const unknown = await expect400(chat({ tools, tool_choice: { type: 'function', function: { name: 'get_time' } } }), 'tool_choice');
    expect(unknown.error.message).toMatch(/'get_time'/);
    await expect400(chat({ tools, tool_choice: 'required', response_format: { type: 'json_object' } }), 'tool_choice');
  });

  it('fault 8: tool_choice and tools are type-checked and must agree', async () => {
    const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } }];
    expect((await chat({ tools, tool_choice: 'auto' })).status).toBe(200);
    expect((await chat({ tools, tool_choice: { type: 'function', function: { name: 'get_weather' } } })).status).toBe(200);
    expect((await chat({ tool_choice: 'none' })).status).toBe(200);
    await expect400(chat({ tool_choice: 'required' }), 'tool_choice');
    await expect400(chat({ tools, tool_choice: 'sometimes' }), 'tool_choice');
    await expect400(chat({ tools, tool_choice: 3 }), 'tool_choice');
    await expect400(chat({ tools, tool_choice: { type: 'function', function: { name: 'other' } } }), 'tool_choice');
    await expect400(chat({ tools: [{ type: 'function' }] }), 'tools[0]');
    await expect400(chat({ tools: ['x'] }), 'tools[0]');
  });

  it('fault 8: a 1 MB model name is not echoed back whole (404 body capped, with an ellipsis)', async () => {
    const name = 'm'.repeat(1024 * 1024);
    const r = await postRaw(`${t.url}/v1/chat/completions`, JSON.stringify({ model: name, messages: [{ role: 'user', content: 'hi' }] }));
    expect(r.status).toBe(404);
    expect(r.text.length).toBeLessThan(1024);
    const body = JSON.parse(r.text) as ErrorBody;
    expect(body.error.code).toBe('model_not_found');
    expect(body.error.message.length).toBeLessThanOrEqual(MAX_ERROR_MESSAGE_CHARS + 1);
    expect(body.error.message).toMatch(/^The model 'm+…' does not exist$/);
    const viaPath = await fetch(`${t.url}/v1/models/${'n'.repeat(6000)}`);
    expect(viaPath.status).toBe(404);
    expect((await viaPath.text()).length).toBeLessThan(1024);
  });

  it('the openai client sees BadRequestError for a refused field', async () => {
    const err = await client.chat.completions
      .create({ model: 'fake-model', messages: [{ role: 'user', content: 'hi' }], response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'array', uniqueItems: true } } } })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('response_format');
  });
});
