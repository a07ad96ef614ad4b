/**
 * The ApiCodec contract (frontend/api/): every generation route runs the same pipeline, so every
 * codec must show the same behaviour through its own shapes — the model's text intact, the same
 * finish reason streamed and unary (and recorded so on the dashboard), its own error shape for a
 * bad body, before the first byte and after admission refuses, its endpoint label, and the
 * `x-api-key` auth. Requests go through the socket-free `handle()`; one case per codec also
 * goes over a real socket to prove the two are the same handler.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MemoryResponse } from '../../frontend/http/in-memory.js';
import { startTestFrontend, waitFor, type TestFrontend } from './harness.js';

/** What a response says, in the codec-independent form the contract compares. */
interface Said {
  reasoning: string;
  text: string;
  calls: Array<{ name: string; args: unknown }>;
  finish: string;
}

interface Contract {
  name: string;
  path: string;
  endpoint: string;
  /** Whether the API has tools and reasoning (completions has neither). */
  parsed: boolean;
  body(model: string, stream: boolean, tools: boolean): object;
  unary(body: any): Said;
  stream(text: string): Said;
  finish: { stop: string; toolCalls: string };
  /** Asserts the API's error shape; returns the message. */
  error(body: any, status: number): string;
  /** A body the API refuses, and a word its 400 message must name. */
  invalid: { body: object; names: string };
  /** The API's field for chat's `max_tokens`, and a 400's `param` (null: the API's errors carry none). */
  maxTokensField: string;
  param(body: any): string | null;
  /** APIs with tools: a call forced to a tool whose schema the grammar engine refuses, and how the API names that schema. */
  badTool?: { body(model: string): object; field: string };
  /** APIs whose output is typed blocks: each block's type in order, unary and streamed. */
  blockTypes?: { unary(body: any): string[]; stream(text: string): string[]; interleaved: string[] };
}

/** The grammar engine refuses `uniqueItems`: a forced call to this tool is a 400 from the pipeline. */
const BAD_SCHEMA = { type: 'array', uniqueItems: true };
/** Text, a call, then text again: blocks in the order the model produced them. */
const INTERLEAVED_TEXT = `Checking.\n<tool_call>\n{"name":"get_weather","arguments":{"city":"Oslo"}}\n</tool_call>\nDone.`;

const TOOL = { name: 'get_weather', description: 'Weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } };
const REASONING = 'the user wants a greeting';
const ANSWER = 'Hello there.';
const PLAIN_TEXT = `<think>${REASONING}</think>${ANSWER}`;
const MIGRATED = 'abcdefgh';
const TOOL_TEXT = `<think>${REASONING}</think>Checking.\n<tool_call>\n{"name":"get_weather","arguments":{"city":"Oslo"}}\n</tool_call>`;

/** `data:` frames, or `event:` + `data:` frames, strictly. */
function sseEvents(text: string): Array<{ event?: string; data: string }> {
  expect(text.endsWith('\n\n')).toBe(true);
  return text
    .slice(0, -2)
    .split('\n\n')
    .map((frame) => {
      const m = /^(?:event: ([a-z_.]+)\n)?data: (.*)$/s.exec(frame);
      if (!m || m[2]!.includes('\n')) throw new Error(`bad SSE frame: ${JSON.stringify(frame)}`);
      return m[1] !== undefined ? { event: m[1], data: m[2]! } : { data: m[2]! };
    });
}

const openAiParam = (body: any): string | null => body.error.param;

function openAiError(body: any, status: number): string {
  expect(Object.keys(body)).toEqual(['error']);
  expect(body.error).toMatchObject({ type: expect.any(String), code: expect.any(String) });
  expect('param' in body.error).toBe(true);
  if (status === 400) expect(body.error.type).toBe('invalid_request_error');
  return body.error.message as string;
}

const CONTRACTS: Contract[] = [
  {
    name: 'chat completions',
    path: '/v1/chat/completions',
    endpoint: 'chat_completions',
    parsed: true,
    body: (model, stream, tools) => ({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 200, stream, ...(tools ? { tools: [{ type: 'function', function: TOOL }] } : {}) }),
    unary(body) {
      const m = body.choices[0].message;
      return { reasoning: m.reasoning_content ?? '', text: m.content ?? '', calls: (m.tool_calls ?? []).map((c: any) => ({ name: c.function.name, args: JSON.parse(c.function.arguments) })), finish: body.choices[0].finish_reason };
    },
    stream(text) {
      const frames = sseEvents(text);
      expect(frames.at(-1)!.data).toBe('[DONE]');
      const said: Said = { reasoning: '', text: '', calls: [], finish: '' };
      const args: string[] = [];
      for (const f of frames.slice(0, -1)) {
        const c = JSON.parse(f.data).choices[0];
        if (c.finish_reason) said.finish = c.finish_reason;
        said.reasoning += c.delta.reasoning_content ?? '';
        said.text += c.delta.content ?? '';
        for (const call of c.delta.tool_calls ?? []) {
          if (call.id) said.calls.push({ name: call.function.name, args: undefined });
          args[call.index] = (args[call.index] ?? '') + call.function.arguments;
        }
      }
      said.calls.forEach((c, i) => (c.args = JSON.parse(args[i]!)));
      return said;
    },
    finish: { stop: 'stop', toolCalls: 'tool_calls' },
    error: openAiError,
    invalid: { body: { model: 'plain-model', messages: 'hi' }, names: 'messages' },
    maxTokensField: 'max_tokens',
    param: openAiParam,
    badTool: {
      body: (model) => ({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 20, tools: [{ type: 'function', function: { name: 'tag', parameters: BAD_SCHEMA } }], tool_choice: 'required' }),
      field: 'tools[0].function.parameters',
    },
  },
  {
    name: 'completions',
    path: '/v1/completions',
    endpoint: 'completions',
    parsed: false,
    body: (model, stream) => ({ model, prompt: 'hi', max_tokens: 200, stream }),
    unary: (body) => ({ reasoning: '', text: body.choices[0].text, calls: [], finish: body.choices[0].finish_reason }),
    stream(text) {
      const frames = sseEvents(text);
      expect(frames.at(-1)!.data).toBe('[DONE]');
      const chunks = frames.slice(0, -1).map((f) => JSON.parse(f.data).choices[0]);
      return { reasoning: '', text: chunks.map((c) => c.text).join(''), calls: [], finish: chunks.at(-1).finish_reason };
    },
    finish: { stop: 'stop', toolCalls: 'stop' },
    error: openAiError,
    invalid: { body: { model: 'plain-model', prompt: 5 }, names: 'prompt' },
    maxTokensField: 'max_tokens',
    param: openAiParam,
  },
  {
    name: 'openai responses',
    path: '/v1/responses',
    endpoint: 'responses',
    parsed: true,
    body: (model, stream, tools) => ({ model, input: 'hi', max_output_tokens: 200, stream, ...(tools ? { tools: [{ type: 'function', ...TOOL }] } : {}) }),
    unary(body) {
      expect(body).toMatchObject({ object: 'response', id: expect.stringMatching(/^resp_/), usage: { input_tokens: expect.any(Number) } });
      const said: Said = { reasoning: '', text: '', calls: [], finish: '' };
      for (const item of body.output) {
        if (item.type === 'reasoning') said.reasoning += item.content[0].text;
        if (item.type === 'message') said.text += item.content[0].text;
        if (item.type === 'function_call') said.calls.push({ name: item.name, args: JSON.parse(item.arguments) });
      }
      said.finish = said.calls.length > 0 ? 'tool_calls' : body.status === 'completed' ? 'stop' : body.status;
      return said;
    },
    stream(text) {
      const events = sseEvents(text).map((e) => ({ event: e.event!, data: JSON.parse(e.data) }));
      events.forEach((e, i) => {
        expect(e.data.type).toBe(e.event);
        expect(e.data.sequence_number).toBe(i);
      });
      expect(events.slice(0, 2).map((e) => e.event)).toEqual(['response.created', 'response.in_progress']);
      const last = events.at(-1)!;
      expect(last.event).toBe('response.completed');
      const said: Said = { reasoning: '', text: '', calls: [], finish: '' };
      const args: string[] = [];
      for (const { event, data } of events) {
        if (event === 'response.reasoning_text.delta') said.reasoning += data.delta;
        if (event === 'response.output_text.delta') said.text += data.delta;
        if (event === 'response.output_item.added' && data.item.type === 'function_call') said.calls.push({ name: data.item.name, args: undefined });
        if (event === 'response.function_call_arguments.delta') args[said.calls.length - 1] = (args[said.calls.length - 1] ?? '') + data.delta;
      }
      said.calls.forEach((c, i) => (c.args = JSON.parse(args[i]!)));
      // The streamed items end as the completed response's output.
      expect(this.unary(last.data.response)).toEqual({ ...said, finish: said.calls.length > 0 ? 'tool_calls' : 'stop' });
      said.finish = said.calls.length > 0 ? 'tool_calls' : 'stop';
      return said;
    },
    finish: { stop: 'stop', toolCalls: 'tool_calls' },
    error: openAiError,
    invalid: { body: { model: 'plain-model', input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'https://x/y.png' }] }] }, names: 'input_image' },
    maxTokensField: 'max_output_tokens',
    param: openAiParam,
    badTool: {
      body: (model) => ({ model, input: 'hi', max_output_tokens: 20, tools: [{ type: 'function', name: 'tag', parameters: BAD_SCHEMA }], tool_choice: 'required' }),
      field: 'tools[0].parameters',
    },
    blockTypes: {
      unary: (body) => body.output.map((item: any) => item.type),
      stream: (text) => sseEvents(text).map((e) => JSON.parse(e.data)).filter((d) => d.type === 'response.output_item.added').map((d) => d.item.type),
      interleaved: ['message', 'function_call', 'message'],
    },
  },
  {
    name: 'anthropic messages',
    path: '/v1/messages',
    endpoint: 'messages',
    parsed: true,
    body: (model, stream, tools) => ({
      model,
      max_tokens: 200,
      stream,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }],
      ...(tools ? { tools: [{ name: TOOL.name, description: TOOL.description, input_schema: TOOL.parameters }] } : {}),
    }),
    unary(body) {
      expect(body).toMatchObject({ type: 'message', role: 'assistant', id: expect.stringMatching(/^msg_/) });
      const said: Said = { reasoning: '', text: '', calls: [], finish: body.stop_reason };
      for (const b of body.content) {
        if (b.type === 'thinking') said.reasoning += b.thinking;
        if (b.type === 'text') said.text += b.text;
        if (b.type === 'tool_use') said.calls.push({ name: b.name, args: b.input });
      }
      return said;
    },
    stream(text) {
      const events = sseEvents(text).map((e) => ({ event: e.event!, data: JSON.parse(e.data) }));
      for (const e of events) expect(e.data.type).toBe(e.event);
      const names = events.map((e) => e.event);
      expect(names.slice(0, 2)).toEqual(['message_start', 'ping']);
      expect(names.slice(-2)).toEqual(['message_delta', 'message_stop']);
      const said: Said = { reasoning: '', text: '', calls: [], finish: events.at(-2)!.data.delta.stop_reason };
      const json: string[] = [];
      let open: number | undefined;
      for (const { event, data } of events) {
        if (event === 'content_block_start') {
          expect(open).toBeUndefined();
          open = data.index;
          if (data.content_block.type === 'tool_use') said.calls.push({ name: data.content_block.name, args: undefined });
        }
        if (event === 'content_block_stop') {
          expect(data.index).toBe(open);
          open = undefined;
        }
        if (event === 'content_block_delta') {
          expect(data.index).toBe(open);
          if (data.delta.type === 'thinking_delta') said.reasoning += data.delta.thinking;
          if (data.delta.type === 'text_delta') said.text += data.delta.text;
          if (data.delta.type === 'input_json_delta') json[said.calls.length - 1] = (json[said.calls.length - 1] ?? '') + data.delta.partial_json;
        }
      }
      expect(open).toBeUndefined();
      said.calls.forEach((c, i) => (c.args = JSON.parse(json[i]!)));
      return said;
    },
    finish: { stop: 'end_turn', toolCalls: 'tool_use' },
    error(body, status) {
      expect(Object.keys(body).sort()).toEqual(['error', 'type']);
      expect(body.type).toBe('error');
      if (status === 400) expect(body.error.type).toBe('invalid_request_error');
      if (status === 401) expect(body.error.type).toBe('authentication_error');
      if (status === 503) expect(body.error.type).toBe('overloaded_error');
      return body.error.message as string;
    },
    invalid: { body: { model: 'plain-model', messages: [{ role: 'user', content: 'hi' }] }, names: 'max_tokens' },
    maxTokensField: 'max_tokens',
    // Anthropic's error body has no param; the message names the field.
    param: () => null,
    badTool: {
      body: (model) => ({ model, max_tokens: 20, messages: [{ role: 'user', content: 'hi' }], tools: [{ name: 'tag', input_schema: BAD_SCHEMA }], tool_choice: { type: 'any' } }),
      field: 'tools[0].input_schema',
    },
    blockTypes: {
      unary: (body) => body.content.map((block: any) => block.type),
      stream: (text) => sseEvents(text).map((e) => JSON.parse(e.data)).filter((d) => d.type === 'content_block_start').map((d) => d.content_block.type),
      interleaved: ['text', 'tool_use', 'text'],
    },
  },
];

describe('ApiCodec contract: every generation route, through handle()', () => {
  let t: TestFrontend;
  beforeAll(async () => {
    t = await startTestFrontend({ toolCallParser: 'hermes', reasoningParser: 'think', unavailableCooldownMs: 0, migrationWaitMs: 0 }, async (cluster) => {
      await cluster.addWorker({ text: PLAIN_TEXT }, { name: 'plain-model' });
      await cluster.addWorker({ text: TOOL_TEXT }, { name: 'tool-model' });
      await cluster.addWorker({ text: INTERLEAVED_TEXT }, { name: 'interleaved-model' });
      // Each call dies after 3 tokens: 8 letters and EOS take three workers' turns (two migrations, never back to a worker that failed).
      for (let i = 0; i < 3; i++) await cluster.addWorker({ text: MIGRATED, dieAfterTokens: 3 }, { name: 'dying-model' });
    });
    await waitFor(() => t.frontend.models.names().length === 4);
  });
  afterAll(() => t.close());

  const post = (path: string, body: unknown, headers: Record<string, string> = {}): Promise<MemoryResponse> => t.frontend.handle({ path, body, headers });

  for (const c of CONTRACTS) {
    describe(c.name, () => {
      it('unary and streamed say the same text and finish; the dashboard records that finish and the endpoint', async () => {
        const unary = await post(c.path, c.body('plain-model', false, false));
        expect(unary.status).toBe(200);
        expect(unary.headers['content-type']).toBe('application/json');
        const said = c.unary(unary.json());
        if (c.parsed) expect(said).toEqual({ reasoning: REASONING, text: ANSWER, calls: [], finish: c.finish.stop });
        else expect(said).toEqual({ reasoning: '', text: PLAIN_TEXT, calls: [], finish: c.finish.stop });
        const streamed = await post(c.path, c.body('plain-model', true, false));
        expect(streamed.status).toBe(200);
        expect(streamed.headers['content-type']).toMatch(/^text\/event-stream/);
        expect(c.stream(streamed.text)).toEqual(said);
        for (const res of [unary, streamed]) {
          const record = t.frontend.dashboard!.state.request(res.headers['x-request-id']!);
          expect(record).toMatchObject({ endpoint: c.endpoint, finishReason: c.finish.stop });
        }
      });

      if (c.parsed) {
        it('tool calls: the same call streamed and unary, and the same finish reason recorded for both', async () => {
          const unary = await post(c.path, c.body('tool-model', false, true));
          const said = c.unary(unary.json());
          expect(said).toEqual({ reasoning: REASONING, text: 'Checking.', calls: [{ name: 'get_weather', args: { city: 'Oslo' } }], finish: c.finish.toolCalls });
          const streamed = await post(c.path, c.body('tool-model', true, true));
          expect(c.stream(streamed.text)).toEqual(said);
          // One reason per request whichever way it went out (before ApiCodec, unary recorded 'stop').
          for (const res of [unary, streamed]) expect(t.frontend.dashboard!.state.request(res.headers['x-request-id']!)!.finishReason).toBe(c.finish.toolCalls);
        });
      }

      it('a bad body is a 400 in the API’s own error shape, naming the field; bad JSON too', async () => {
        const res = await post(c.path, c.invalid.body);
        expect(res.status).toBe(400);
        expect(c.error(res.json(), 400)).toContain(c.invalid.names);
        const bad = await t.frontend.handle({ path: c.path, body: '{"model":', headers: { 'content-type': 'application/json' } });
        expect(bad.status).toBe(400);
        c.error(bad.json(), 400);
        const get = await t.frontend.handle({ method: 'GET', path: c.path });
        expect(get.status).toBe(405);
        c.error(get.json(), 405);
      });

      it('a 400 from the pipeline names the API’s own field: the context length on its max-tokens field', async () => {
        const res = await post(c.path, { ...c.body('plain-model', false, false), [c.maxTokensField]: 100_000 });
        expect(res.status).toBe(400);
        expect(c.error(res.json(), 400)).toMatch(/maximum context length is 256 tokens/);
        if (c.param === openAiParam) expect(res.json<any>().error).toMatchObject({ code: 'context_length_exceeded', param: c.maxTokensField });
        else expect(c.param(res.json())).toBeNull();
      });

      if (c.badTool) {
        const badTool = c.badTool;
        it('a forced tool whose schema does not compile: the 400 names the schema as this API spells it', async () => {
          const res = await post(c.path, badTool.body('plain-model'));
          expect(res.status).toBe(400);
          const message = c.error(res.json(), 400);
          expect(message.startsWith(`'${badTool.field}' (function 'tag')`), message).toBe(true);
          if (c.param === openAiParam) expect(c.param(res.json())).toBe(badTool.field);
        });
      }

      if (c.blockTypes) {
        const blocks = c.blockTypes;
        it('blocks come in the order the model produced them (text, call, text), unary as streamed', async () => {
          const unary = await post(c.path, c.body('interleaved-model', false, true));
          expect(blocks.unary(unary.json())).toEqual(blocks.interleaved);
          const streamed = await post(c.path, c.body('interleaved-model', true, true));
          expect(blocks.stream(streamed.text)).toEqual(blocks.interleaved);
          expect(c.stream(streamed.text)).toEqual(c.unary(unary.json()));
        });
      }

      it('migration: workers dying mid-stream are invisible to the client, streamed and unary', async () => {
        for (const stream of [false, true]) {
          const res = await post(c.path, c.body('dying-model', stream, false));
          expect(res.status).toBe(200);
          const said = stream ? c.stream(res.text) : c.unary(res.json());
          expect(said).toEqual({ reasoning: '', text: MIGRATED, calls: [], finish: c.finish.stop });
          expect(t.frontend.dashboard!.state.request(res.headers['x-request-id']!)!.migrations).toBe(2);
        }
      });

      it('counts under its own endpoint label', async () => {
        await post(c.path, c.body('plain-model', false, false));
        const metrics = await t.frontend.handle({ method: 'GET', path: '/metrics' });
        expect(metrics.text).toMatch(new RegExp(`tandem_frontend_requests_total\\{model="plain-model",endpoint="${c.endpoint}",status="200"\\} [1-9]`));
        expect(metrics.text).toMatch(new RegExp(`tandem_frontend_requests_total\\{model="_unknown",endpoint="${c.endpoint}",status="400"\\} [1-9]`));
      });
    });
  }

  it('Messages names the stop sequence that ended the output (stop_reason stop_sequence), unary and streamed', async () => {
    const body = { model: 'plain-model', max_tokens: 200, stop_sequences: ['xyz', 'there'], messages: [{ role: 'user', content: 'hi' }] };
    const unary = (await post('/v1/messages', body)).json<any>();
    expect(unary).toMatchObject({ stop_reason: 'stop_sequence', stop_sequence: 'there' });
    expect(unary.content.at(-1).text).not.toContain('there');
    const streamed = await post('/v1/messages', { ...body, stream: true });
    const delta = sseEvents(streamed.text).map((e) => JSON.parse(e.data)).find((e) => e.type === 'message_delta');
    expect(delta.delta).toEqual({ stop_reason: 'stop_sequence', stop_sequence: 'there' });
    // Without a match the turn simply ends.
    expect((await post('/v1/messages', { ...body, stop_sequences: ['xyz'] })).json<any>()).toMatchObject({ stop_reason: 'end_turn', stop_sequence: null });
  });

  it('handle() and a real socket are the same handler: identical bodies for the same seeded request', async () => {
    for (const c of CONTRACTS) {
      const viaHandle = c.unary((await post(c.path, c.body('plain-model', false, false))).json());
      const res = await fetch(`${t.url}${c.path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(c.body('plain-model', false, false)) });
      expect(c.unary(await res.json())).toEqual(viaHandle);
    }
  });

  it('admission: a draining frontend refuses every route with 503 in that route’s shape', async () => {
    const other = await startTestFrontend({}, async (cluster) => void (await cluster.addWorker({ text: 'x' }, { name: 'plain-model' })));
    try {
      void other.frontend.drain(60_000);
      for (const c of CONTRACTS) {
        const res = await other.frontend.handle({ path: c.path, body: c.body('plain-model', false, false) });
        expect(res.status).toBe(503);
        expect(res.headers['retry-after']).toBe('1');
        c.error(res.json(), 503);
      }
    } finally {
      await other.close();
    }
  });

  it('auth: every route takes `Authorization: Bearer` or `x-api-key`, and refuses neither with 401 in its shape', async () => {
    const keyed = await startTestFrontend({ apiKeys: ['sekret'] }, async (cluster) => void (await cluster.addWorker({ text: 'x' }, { name: 'plain-model' })));
    try {
      for (const c of CONTRACTS) {
        const none = await keyed.frontend.handle({ path: c.path, body: c.body('plain-model', false, false) });
        expect(none.status).toBe(401);
        c.error(none.json(), 401);
        for (const headers of [{ authorization: 'Bearer sekret' }, { 'x-api-key': 'sekret' }]) {
          expect((await keyed.frontend.handle({ path: c.path, body: c.body('plain-model', false, false), headers })).status).toBe(200);
        }
      }
    } finally {
      await keyed.close();
    }
  });
});
