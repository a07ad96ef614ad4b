/**
 * The raw HTTP surface: SSE framing byte for byte, OpenAI error shapes and status codes, hostile
 * inputs (bad JSON, wrong types, huge bodies), /health, /live and /metrics.
 */
import { request as httpRequest } from 'node:http';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseSse, postRaw, startTestFrontend, type TestFrontend } from './harness.js';

describe('frontend: HTTP surface', () => {
  let t: TestFrontend;

  beforeAll(async () => {
    t = await startTestFrontend({ maxBodyBytes: 64 * 1024 }, async (cluster) => {
      await cluster.addWorker({ text: 'abc' });
    });
  });
  afterAll(() => t.close());

  it('streams chat as data: frames, a finish chunk, and data: [DONE]', async () => {
    const res = await postRaw(`${t.url}/v1/chat/completions`, JSON.stringify({ model: 'fake-model', messages: [{ role: 'user', content: 'q' }], stream: true }));
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const frames = parseSse(res.text);
    expect(frames.at(-1)).toBe('[DONE]');
    const chunks = frames.slice(0, -1).map((f) => JSON.parse(f));
    const id = chunks[0].id as string;
    expect(id).toMatch(/^chatcmpl-/);
    expect(chunks.every((c) => c.id === id && c.object === 'chat.completion.chunk' && c.model === 'fake-model')).toBe(true);
    expect(chunks[0].choices[0].delta).toEqual({ role: 'assistant', content: '' });
    expect(chunks.slice(1, -1).map((c) => c.choices[0].delta.content).join('')).toBe('abc');
    expect(chunks.at(-1).choices[0]).toEqual({ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' });
    expect(chunks.some((c) => 'usage' in c)).toBe(false);
  });

  it('with include_usage every chunk carries usage null and a last chunk has empty choices and usage', async () => {
    const res = await postRaw(`${t.url}/v1/completions`, JSON.stringify({ model: 'fake-model', prompt: 'q', stream: true, stream_options: { include_usage: true } }));
    const chunks = parseSse(res.text).slice(0, -1).map((f) => JSON.parse(f));
    const last = chunks.at(-1);
    expect(last.choices).toEqual([]);
    expect(last.usage).toEqual({ prompt_tokens: 1, completion_tokens: 4, total_tokens: 5, prompt_tokens_details: { cached_tokens: 0 } });
    expect(chunks.slice(0, -1).every((c) => c.usage === null)).toBe(true);
    expect(chunks.at(-2).choices[0].finish_reason).toBe('stop');
  });

  const errorCases: Array<[string, string, number, string | null, string]> = [
    ['malformed JSON', '{"model": "fake-model", ', 400, null, 'invalid_json'],
    ['an empty body', '', 400, null, 'invalid_json'],
    ['a JSON array body', '[1,2]', 400, null, 'invalid_argument'],
    ['messages of the wrong type', '{"model":"fake-model","messages":"hi"}', 400, 'messages', 'invalid_argument'],
    ['max_tokens as a string', '{"model":"fake-model","messages":[{"role":"user","content":"x"}],"max_tokens":"5"}', 400, 'max_tokens', 'invalid_argument'],
    ['n = 2', '{"model":"fake-model","messages":[{"role":"user","content":"x"}],"n":2}', 400, 'n', 'invalid_argument'],
    ['stop of the wrong type', '{"model":"fake-model","messages":[{"role":"user","content":"x"}],"stop":[1]}', 400, 'stop', 'invalid_argument'],
    ['top_logprobs without logprobs', '{"model":"fake-model","messages":[{"role":"user","content":"x"}],"top_logprobs":2}', 400, 'top_logprobs', 'invalid_argument'],
    ['an unknown model', '{"model":"other","messages":[{"role":"user","content":"x"}]}', 404, 'model', 'model_not_found'],
    ['max_tokens over the context', '{"model":"fake-model","prompt":"x","max_tokens":1000}', 400, 'max_tokens', 'context_length_exceeded'],
    ['negative token ids', '{"model":"fake-model","prompt":[1,-2]}', 400, 'prompt', 'invalid_argument'],
    ['token ids outside the vocabulary', '{"model":"fake-model","prompt":[1,257]}', 400, 'prompt', 'invalid_argument'],
    ['a batch of prompts', '{"model":"fake-model","prompt":["a","b"]}', 400, 'prompt', 'invalid_argument'],
    ['stream_options without stream', '{"model":"fake-model","prompt":"a","stream_options":{"include_usage":true}}', 400, 'stream_options', 'invalid_argument'],
  ];
  for (const [what, body, status, param, code] of errorCases) {
    it(`answers ${status} ${code} for ${what}`, async () => {
      const path = body.includes('"prompt"') ? '/v1/completions' : '/v1/chat/completions';
      const res = await postRaw(`${t.url}${path}`, body);
      expect(res.status).toBe(status);
      const parsed = JSON.parse(res.text);
      expect(Object.keys(parsed)).toEqual(['error']);
      expect(parsed.error).toMatchObject({ param, code });
      expect(typeof parsed.error.message).toBe('string');
      expect(typeof parsed.error.type).toBe('string');
    });
  }

  /** One HTTP/1.1 exchange written byte for byte on a socket: status and body of the answer. */
  async function postBytes(path: string, body: Buffer): Promise<{ status: number; body: string }> {
    const port = new URL(t.url).port;
    const head = `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`;
    const raw = await new Promise<string>((resolve, reject) => {
      const socket = connect(Number(port), '127.0.0.1', () => socket.write(Buffer.concat([Buffer.from(head, 'latin1'), body])));
      const parts: Buffer[] = [];
      socket.on('data', (d) => parts.push(d));
      socket.on('end', () => resolve(Buffer.concat(parts).toString('utf8')));
      socket.on('error', reject);
    });
    const [status] = raw.match(/^HTTP\/1\.1 (\d{3})/)!.slice(1);
    return { status: Number(status), body: raw.slice(raw.indexOf('\r\n\r\n') + 4) };
  }

  const utf8Cases: Array<[string, Buffer]> = [
    ['a lone continuation byte in a string', Buffer.concat([Buffer.from('{"model":"fake-model","messages":[{"role":"user","content":"a'), Buffer.from([0x80]), Buffer.from('b"}]}')])],
    ['a truncated 3-byte sequence', Buffer.concat([Buffer.from('{"model":"fake-model","messages":[{"role":"user","content":"'), Buffer.from([0xe2, 0x82]), Buffer.from('"}]}')])],
    ['an encoded surrogate (CESU-8)', Buffer.concat([Buffer.from('{"model":"fake-model","messages":[{"role":"user","content":"'), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from('"}]}')])],
    ['an overlong encoding of "/"', Buffer.concat([Buffer.from('{"model":"fake-model","messages":[{"role":"user","content":"'), Buffer.from([0xc0, 0xaf]), Buffer.from('"}]}')])],
    ['a lone \\ud800 escape', Buffer.from('{"model":"fake-model","messages":[{"role":"user","content":"x\\ud800y"}]}')],
    ['a lone \\udfff escape in a key', Buffer.from('{"model":"fake-model","\\udfff":1,"messages":[{"role":"user","content":"x"}]}')],
  ];
  for (const [what, body] of utf8Cases) {
    it(`answers 400 invalid_json, as for malformed JSON, for ${what} (raw bytes on a socket)`, async () => {
      const res = await postBytes('/v1/chat/completions', body);
      expect(res.status).toBe(400);
      const parsed = JSON.parse(res.body);
      expect(Object.keys(parsed)).toEqual(['error']);
      expect(parsed.error).toMatchObject({ type: 'invalid_request_error', param: null, code: 'invalid_json' });
      expect(parsed.error.message).toMatch(/UTF-8|surrogate/);
    });
  }

  it('accepts multi-byte UTF-8 and a surrogate-pair escape (raw bytes on a socket)', async () => {
    const body = Buffer.from('{"model":"fake-model","messages":[{"role":"user","content":"é€😀 \\ud83d\\ude00"}]}', 'utf8');
    const res = await postBytes('/v1/chat/completions', body);
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body).choices[0].message.content).toBe('abc');
  });

  it('refuses a body over the limit with 413 and keeps serving', async () => {
    const huge = JSON.stringify({ model: 'fake-model', prompt: 'x'.repeat(200 * 1024) });
    const res = await postRaw(`${t.url}/v1/completions`, huge);
    expect(res.status).toBe(413);
    expect(JSON.parse(res.text).error.code).toBe('body_too_large');
    // Chunked upload without Content-Length: cut off by the running total.
    const status = await new Promise<number>((resolve, reject) => {
      const req = httpRequest(`${t.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked' } }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
      for (let i = 0; i < 100; i++) req.write('x'.repeat(1024));
      req.end();
    });
    expect(status).toBe(413);
    const ok = await postRaw(`${t.url}/v1/completions`, JSON.stringify({ model: 'fake-model', prompt: 'q' }));
    expect(ok.status).toBe(200);
  });

  it('answers 404 for unknown routes and 405 for wrong methods', async () => {
    expect((await fetch(`${t.url}/v2/nothing`)).status).toBe(404);
    const res = await fetch(`${t.url}/v1/chat/completions`);
    expect(res.status).toBe(405);
    expect(res.headers.get('allow')).toBe('POST');
  });

  it('serves /live, /health with the routable model, and /metrics with tandem_frontend_*', async () => {
    expect((await fetch(`${t.url}/live`)).status).toBe(200);
    const health = await fetch(`${t.url}/health`);
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({ status: 'ready', models: [{ name: 'fake-model', instances: 1 }] });
    const metrics = await (await fetch(`${t.url}/metrics`)).text();
    expect(metrics).toMatch(/tandem_frontend_requests_total\{model="fake-model",endpoint="chat_completions",status="200"\} \d+/);
    expect(metrics).toMatch(/tandem_frontend_requests_total\{model="_unknown",endpoint="chat_completions",status="400"\} \d+/);
    expect(metrics).toMatch(/tandem_frontend_time_to_first_token_seconds_count\{model="fake-model"\} [1-9]/);
    expect(metrics).toMatch(/tandem_frontend_inter_token_latency_seconds_count\{model="fake-model"\} [1-9]/);
    expect(metrics).toMatch(/tandem_frontend_output_sequence_tokens_sum\{model="fake-model"\} [1-9]/);
    expect(metrics).toMatch(/tandem_frontend_input_sequence_tokens_count\{model="fake-model"\} [1-9]/);
    expect(metrics).toMatch(/tandem_frontend_kv_hit_rate_count\{model="fake-model"\} [1-9]/);
    expect(metrics).toMatch(/tandem_frontend_inflight_requests\{model="fake-model"\} 0/);
  });

  it('reports not ready on /health when no model has a worker', async () => {
    const empty = await startTestFrontend({}, async () => {});
    try {
      const res = await fetch(`${empty.url}/health`);
      expect(res.status).toBe(503);
      expect((await res.json()).status).toBe('not_ready');
    } finally {
      await empty.close();
    }
  });
});
