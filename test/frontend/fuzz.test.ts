/**
 * Fuzz: hostile OpenAI, Responses, Anthropic Messages, tokenize and embeddings requests against a real `runtime up` (built CLI: run `npm run build`
 * first) with one mocker worker, one embedding worker (so /v1/embeddings is served) and an API key. fast-check generates methods, paths, headers,
 * content types and bodies: wrong types in every field, deep nesting, huge and odd strings,
 * invalid UTF-8 and lone surrogate escapes (never a 200), truncated JSON, bodies over 1 MiB (the
 * sliced parse) with a byte replaced. Every answer must be < 500 (a 200 stream must not carry an
 * internal error frame), the frontend must never crash or restart, and a normal request must
 * still be served afterwards.
 *
 * Bounded to about 40 s of generation (FUZZ_TIME_MS). The seed is printed and is in every
 * failure message; reproduce with TANDEM_FUZZ_SEED=<seed> (and TANDEM_FUZZ_PATH=<path> to
 * replay one counterexample).
 */
import { isUtf8 } from 'node:buffer';
import { mkdtemp, rm } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findJsonFault } from '../../frontend/http/body.js';
import { isAlive } from '../harness/processes.js';
import { reportedPids, startUp, stopAll, type Up } from '../e2e/up.js';

const KEY = 'fuzz-key';
const FUZZ_TIME_MS = 40_000;
/** A request that gets no answer in this long counts as a hang. */
const REQUEST_TIMEOUT_MS = 30_000;

interface Exchange {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: Buffer | undefined;
}

/** `send` could not even put the request on the wire. */
const NOT_SENT = -2;

interface Answer {
  status: number;
  text: string;
}

/** One raw HTTP exchange; a socket error is reported as status -1 (the server may hang up on junk). */
function send(base: string, ex: Exchange): Promise<Answer> {
  return new Promise((resolve) => {
    const url = new URL(base);
    let req: ReturnType<typeof httpRequest>;
    try {
      req = httpRequest(
        { host: url.hostname, port: url.port, method: ex.method, path: ex.path, headers: ex.headers, timeout: REQUEST_TIMEOUT_MS, agent: false },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }));
          res.on('error', (err) => resolve({ status: -1, text: String(err) }));
        },
      );
    } catch (err) {
      // Node's client refused to send it (a path or header it cannot encode): not the server's doing.
      resolve({ status: NOT_SENT, text: String(err) });
      return;
    }
    req.on('timeout', () => {
      req.destroy(new Error(`no answer in ${REQUEST_TIMEOUT_MS} ms`));
    });
    req.on('error', (err) => resolve({ status: -1, text: String(err) }));
    // The server may answer and hang up while a large body is still being written: the write
    // then fails on the socket after the exchange is over. That is expected, not a test error.
    req.on('socket', (socket) => socket.on('error', () => undefined));
    if (ex.body) req.end(ex.body);
    else req.end();
  });
}

// ---- generators -------------------------------------------------------------------------

const FIELDS = [
  'model', 'messages', 'prompt', 'max_tokens', 'max_completion_tokens', 'min_tokens', 'temperature', 'top_p', 'top_k', 'min_p', 'seed', 'n', 'best_of',
  'stream', 'stream_options', 'stop', 'stop_token_ids', 'ignore_eos', 'logprobs', 'top_logprobs', 'echo', 'presence_penalty', 'frequency_penalty',
  'repetition_penalty', 'logit_bias', 'suffix', 'user', 'tools', 'tool_choice', 'response_format', 'chat_template_kwargs', 'add_generation_prompt',
  'return_tokens_as_token_ids', '__proto__', 'constructor',
  'structured_outputs', 'guided_json', 'guided_regex', 'guided_choice', 'guided_grammar', 'parallel_tool_calls',
  'input', 'dimensions', 'encoding_format',
  // Responses, Messages, tokenize/detokenize.
  'instructions', 'max_output_tokens', 'previous_response_id', 'store', 'text', 'background', 'metadata', 'system', 'stop_sequences',
  'thinking', 'tokens', 'add_special_tokens', 'return_token_strs',
];
const ROLES = ['system', 'developer', 'user', 'assistant', 'tool', '', 'wizard', 'USER', 'function'];
const ODD_STRINGS = ['', ' ', '\u0000', '\u202e', '🦊'.repeat(100), '\\', '"', '{{ raise_exception("x") }}', '{% for x in y %}', '%ZZ', 'a'.repeat(10_000), 'token_id:1'];

const deepArray = (n: number): unknown => {
  let v: unknown = 1;
  for (let i = 0; i < n; i++) v = [v];
  return v;
};

/** Any JSON-ish value, weighted toward what validators trip on. */
const hostileValue: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 3, arbitrary: fc.jsonValue({ maxDepth: 3 }) },
  { weight: 2, arbitrary: fc.constantFrom(...ODD_STRINGS) },
  { weight: 2, arbitrary: fc.oneof(fc.integer(), fc.double(), fc.constantFrom(-1, 0, 1, 2 ** 31, 2 ** 53, -(2 ** 63), 1e308, 0.5)) },
  { weight: 1, arbitrary: fc.integer({ min: 2, max: 60 }).map(deepArray) },
  { weight: 1, arbitrary: fc.string({ unit: 'grapheme', maxLength: 200 }) },
  { weight: 1, arbitrary: fc.dictionary(fc.string({ maxLength: 12 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 5 }) },
);

/** Content blocks and input items of the Anthropic and Responses shapes, nearly right. */
const block: fc.Arbitrary<unknown> = fc.record(
  {
    type: fc.oneof(fc.constantFrom('text', 'image', 'tool_use', 'tool_result', 'thinking', 'input_text', 'input_image', 'function_call', 'function_call_output', 'reasoning', 'message'), hostileValue),
    text: hostileValue,
    id: hostileValue,
    name: hostileValue,
    input: hostileValue,
    tool_use_id: hostileValue,
    content: hostileValue,
    call_id: hostileValue,
    arguments: hostileValue,
    output: hostileValue,
    role: fc.oneof(fc.constantFrom(...ROLES), hostileValue),
  },
  { requiredKeys: [] },
);

const message: fc.Arbitrary<unknown> = fc.oneof(
  fc.record({ role: fc.constantFrom('user', 'assistant'), content: fc.array(block, { maxLength: 3 }) }),
  block,
  fc.record(
    {
      role: fc.oneof(fc.constantFrom(...ROLES), hostileValue),
      content: fc.oneof(fc.string({ maxLength: 100 }), hostileValue, fc.array(fc.record({ type: fc.constantFrom('text', 'image_url', 'x'), text: hostileValue }), { maxLength: 3 })),
      name: hostileValue,
      tool_calls: hostileValue,
      tool_call_id: hostileValue,
    },
    { requiredKeys: [] },
  ),
  hostileValue,
);

/**
 * Constraints shaped nearly right (structured output and tools): schemas of random JSON, random
 * regexes and grammars, tools with odd names and parameters, any tool_choice. Each must be a
 * 400 or a served request, never a 500 or a stuck worker.
 */
const constraint: fc.Arbitrary<Record<string, unknown>> = fc.oneof(
  fc.record({
    response_format: fc.record(
      {
        type: fc.constantFrom('json_schema', 'json_object', 'text', 'xml'),
        json_schema: fc.record({ name: fc.oneof(fc.string({ maxLength: 10 }), hostileValue), schema: fc.oneof(hostileValue, fc.jsonValue({ maxDepth: 4 })), strict: hostileValue }, { requiredKeys: [] }),
      },
      { requiredKeys: [] },
    ),
  }),
  fc.record({
    structured_outputs: fc.record(
      { regex: fc.oneof(fc.string({ maxLength: 40 }), hostileValue), choice: fc.oneof(fc.array(fc.string({ maxLength: 8 }), { maxLength: 4 }), hostileValue), grammar: fc.oneof(fc.string({ maxLength: 80 }), hostileValue), json: fc.oneof(hostileValue, fc.jsonValue({ maxDepth: 4 })) },
      { requiredKeys: [] },
    ),
  }),
  fc.record({
    tools: fc.array(
      fc.record({ type: fc.constantFrom('function', 'x'), function: fc.record({ name: fc.oneof(fc.string({ maxLength: 10 }), hostileValue), parameters: fc.oneof(hostileValue, fc.jsonValue({ maxDepth: 4 })) }, { requiredKeys: [] }) }, { requiredKeys: [] }),
      { maxLength: 3 },
    ),
    tool_choice: fc.oneof(fc.constantFrom('auto', 'none', 'required'), fc.record({ type: fc.constant('function'), function: fc.record({ name: fc.string({ maxLength: 10 }) }) }), hostileValue),
    parallel_tool_calls: hostileValue,
  }),
);

/** A request object: the real model most of the time, then any subset of fields with hostile values. */
const requestObject: fc.Arbitrary<Record<string, unknown>> = fc
  .tuple(
    fc.oneof({ weight: 4, arbitrary: fc.constant('MODEL') }, { weight: 1, arbitrary: hostileValue }),
    fc.oneof({ weight: 3, arbitrary: fc.array(message, { maxLength: 4 }) }, { weight: 1, arbitrary: hostileValue }),
    fc.dictionary(fc.constantFrom(...FIELDS), hostileValue, { maxKeys: 6 }),
    fc.record({ max_tokens: fc.integer({ min: 1, max: 8 }), stream: fc.boolean() }),
    fc.option(constraint, { freq: 3 }),
    // /v1/embeddings: strings, token ids (some outside the vocabulary), nested arrays, or anything.
    fc.oneof(
      fc.string({ maxLength: 50 }),
      fc.array(fc.string({ maxLength: 20 }), { maxLength: 4 }),
      fc.array(fc.integer({ min: -2, max: 1000 }), { maxLength: 8 }),
      fc.array(fc.array(fc.integer({ min: 0, max: 600 }), { maxLength: 6 }), { maxLength: 4 }),
      hostileValue,
      fc.constant(undefined), // Responses: the messages become its input items
    ),
  )
  .map(([model, messages, fields, sane, constrained, input]) => ({ ...sane, model, messages, prompt: 'hello', input: input ?? messages, ...fields, ...(constrained ?? {}) }));

/** The body bytes: JSON of a hostile request, or raw junk that is not JSON at all. */
const body: fc.Arbitrary<Buffer | undefined> = fc.oneof(
  { weight: 8, arbitrary: requestObject.map((o) => Buffer.from(JSON.stringify(o))) },
  // Nesting far past any limit, in the prompt (issue 12 fault 5) and elsewhere.
  { weight: 1, arbitrary: fc.integer({ min: 100, max: 120_000 }).map((n) => Buffer.from(`{"model":"MODEL","prompt":${'['.repeat(n)}1${']'.repeat(n)}}`)) },
  { weight: 1, arbitrary: fc.integer({ min: 100, max: 50_000 }).map((n) => Buffer.from(`{"model":"MODEL","messages":[{"role":"user","content":"x"}],"tools":${'{"a":'.repeat(n)}1${'}'.repeat(n)}}`)) },
  // Invalid UTF-8 inside a string and outside one.
  { weight: 1, arbitrary: fc.uint8Array({ minLength: 1, maxLength: 64 }).map((bytes) => Buffer.concat([Buffer.from('{"model":"MODEL","prompt":"'), Buffer.from(bytes), Buffer.from('","max_tokens":2}')])) },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 256 }).map((b) => Buffer.from(b)) },
  // Lone UTF-16 surrogate escapes (and valid pairs beside them) in a message.
  { weight: 1, arbitrary: fc.array(fc.constantFrom('\\ud800', '\\udfff', '\\ud83d\\ude00', '\\udbff', 'a', '\\u0041'), { minLength: 1, maxLength: 6 }).map((parts) => Buffer.from(`{"model":"MODEL","messages":[{"role":"user","content":"${parts.join('')}"}],"max_tokens":2}`)) },
  // Bodies over 1 MiB take the sliced parse: many messages, one byte of it replaced at random.
  {
    weight: 1,
    arbitrary: fc.tuple(fc.integer({ min: 7_000, max: 20_000 }), fc.nat(), fc.constantFrom(-1, 0x2c, 0x5d, 0x7d, 0x22, 0x5c, 0x3a, 0xff)).map(([n, at, byte]) => {
      const bytes = Buffer.from(JSON.stringify({ model: 'MODEL', messages: Array.from({ length: n }, (_, i) => ({ role: 'user', content: `message ${i} with some words in it, é and 🦊` })), max_tokens: 2 }));
      if (byte >= 0) bytes[at % bytes.length] = byte;
      return bytes;
    }),
  },
  // Huge strings (under the 16 MiB cap): a long prompt and a long model name.
  { weight: 1, arbitrary: fc.integer({ min: 100_000, max: 3_000_000 }).map((n) => Buffer.from(JSON.stringify({ model: 'MODEL', prompt: 'é'.repeat(n), max_tokens: 2 }))) },
  { weight: 1, arbitrary: fc.integer({ min: 10_000, max: 1_000_000 }).map((n) => Buffer.from(JSON.stringify({ model: 'm'.repeat(n), prompt: 'x' }))) },
  // Truncated JSON and empty bodies.
  { weight: 1, arbitrary: requestObject.chain((o) => { const s = JSON.stringify(o); return fc.integer({ min: 0, max: s.length }).map((k) => Buffer.from(s.slice(0, k))); }) },
  { weight: 1, arbitrary: fc.constant(undefined) },
);

const CONTENT_TYPES = [
  'application/json', 'application/json', 'application/json', 'application/json; charset=utf-8', 'APPLICATION/JSON', 'application/json; charset=latin1',
  'text/plain', 'text/plain;charset=UTF-8', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=xyz', '', 'json', '*/*',
];
const PATHS = [
  '/v1/chat/completions', '/v1/chat/completions', '/v1/completions', '/v1/completions', '/v1/models', '/v1/models/MODEL', '/v1/models/%ZZ', '/v1/models/%',
  '/v1/models/%C0%AF', '/health', '/live', '/metrics', '/', '/v1', '/v1/chat/completions/', '/v1//completions', '/v1/completions?x=%ZZ', '/dashboard', '/../etc/passwd',
  '/v1/embeddings', '/v1/embeddings',
  '/v1/responses', '/v1/responses', '/v1/messages', '/v1/messages', '/v1/messages/count_tokens', '/tokenize', '/detokenize', '/v1/responses/resp_x',
  '/v1/responses/resp_x/cancel', '/v1/responses//cancel', '/v1/responses/%ZZ', '/v1/responses/a/b/c',
];
const tokenChars = fc.constantFrom(...'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.!#$%&\'*+^`|~'.split(''));
const headerToken = fc.string({ unit: tokenChars, minLength: 1, maxLength: 20 });
const headerValue = fc.string({ unit: fc.constantFrom(...' abcdefghijklmnopqrstuvwxyz0123456789-_.;=,/:"()[]{}<>?@\\'.split('')), maxLength: 200 });

const exchange: fc.Arbitrary<Exchange> = fc
  .record({
    method: fc.oneof({ weight: 6, arbitrary: fc.constant('POST') }, { weight: 3, arbitrary: fc.constantFrom('GET', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'HEAD') }, { weight: 1, arbitrary: headerToken.map((t) => t.toUpperCase()) }),
    path: fc.oneof({ weight: 5, arbitrary: fc.constantFrom(...PATHS) }, { weight: 1, arbitrary: fc.webPath() }, { weight: 1, arbitrary: fc.string({ unit: fc.constantFrom(...'/%abcZ09.?&=#'.split('')), maxLength: 60 }).map((p) => `/${p}`) }),
    contentType: fc.option(fc.constantFrom(...CONTENT_TYPES), { nil: undefined, freq: 8 }),
    auth: fc.constantFrom<'bearer' | 'x-api-key' | 'wrong' | 'none' | 'basic'>('bearer', 'bearer', 'bearer', 'bearer', 'x-api-key', 'wrong', 'none', 'basic'),
    extra: fc.dictionary(headerToken, headerValue, { maxKeys: 4 }),
    body,
  })
  .map(({ method, path, contentType, auth, extra, body }) => {
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(extra)) {
      // Headers that change the framing are the HTTP parser's business, not this suite's.
      if (!/^(content-length|transfer-encoding|host|connection|expect|upgrade|te|trailer)$/i.test(k)) headers[k] = v;
    }
    if (contentType !== undefined) headers['content-type'] = contentType;
    if (auth === 'bearer') headers.authorization = `Bearer ${KEY}`;
    else if (auth === 'x-api-key') headers['x-api-key'] = KEY;
    else if (auth === 'wrong') headers.authorization = 'Bearer nope';
    else if (auth === 'basic') headers.authorization = 'Basic Zm9vOmJhcg==';
    const canHaveBody = method !== 'GET' && method !== 'HEAD';
    return printable({ method, path, headers, body: canHaveBody ? body : undefined });
  });

/** A counterexample fast-check can print in a few lines: the body's head, not every byte. */
function printable(ex: Exchange): Exchange {
  return Object.assign(ex, {
    [fc.toStringMethod]: () => {
      const head = ex.body ? JSON.stringify(ex.body.subarray(0, 160).toString('latin1')) : 'none';
      return `${ex.method} ${ex.path} headers=${JSON.stringify(ex.headers)} body(${ex.body?.length ?? 0} bytes)=${head}${(ex.body?.length ?? 0) > 160 ? '…' : ''}`;
    },
  });
}

// ---- the suite --------------------------------------------------------------------------

describe('fuzz: hostile OpenAI requests against runtime up', () => {
  let up: Up | undefined;
  let cacheDir: string;
  let model = 'tiny';

  beforeAll(async () => {
    cacheDir = await mkdtemp(join(tmpdir(), 'tandem-fuzz-'));
    up = await startUp(cacheDir, ['--engine', 'mocker', '--model', 'tiny', '--workers', '1', '--embedding-workers', '1', '--http-port', '0', '--speedup-ratio', '1000', '--api-key', KEY]);
    model = /Tandem is serving (\S+) at/.exec(up.proc.output())![1]!;
  }, 120_000);
  afterAll(async () => {
    if (up) await stopAll([up]);
    await rm(cacheDir, { recursive: true, force: true });
  });

  const frontendPids = () => reportedPids(up!.proc.output(), 'frontend');

  it('no input yields a 5xx or crashes the frontend; a normal request is served afterwards', async () => {
    const url = up!.url;
    // runtime up passed --api-key through to the frontend.
    expect((await send(url, { method: 'GET', path: '/v1/models', headers: {}, body: undefined })).status).toBe(401);
    const pidsBefore = frontendPids();
    expect(pidsBefore).toHaveLength(1);

    const seed = process.env.TANDEM_FUZZ_SEED !== undefined ? Number(process.env.TANDEM_FUZZ_SEED) : Date.now() % 2 ** 31;
    console.log(`fuzz seed ${seed} (reproduce with TANDEM_FUZZ_SEED=${seed})`);
    let runs = 0;
    const statuses = new Map<number, number>();
    const property = fc.asyncProperty(exchange, async (ex) => {
      runs++;
      const real: Exchange = { ...ex, path: ex.path.replace('MODEL', model), body: ex.body ? Buffer.from(ex.body.toString('latin1').replaceAll('"MODEL"', JSON.stringify(model)), 'latin1') : undefined };
      const answer = await send(url, real);
      if (answer.status === NOT_SENT) return;
      statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1);
      const what = `${real.method} ${real.path} (${real.body?.length ?? 0} body bytes)`;
      if (answer.status === -1) {
        // The server may hang up on junk; then it must still be alive, and the same process.
        const live = await send(url, { method: 'GET', path: '/live', headers: {}, body: undefined });
        if (live.status !== 200) throw new Error(`${what}: socket error ${answer.text} and /live is ${live.status}`);
        return;
      }
      if (answer.status >= 500) throw new Error(`${what} → ${answer.status}: ${answer.text.slice(0, 300)}`);
      // Internal error frames in each API's shape: OpenAI's type, Anthropic's api_error, Responses' failed event.
      if (answer.status === 200 && /"type":"(?:internal_error|api_error)"|"code":"internal"/.test(answer.text)) throw new Error(`${what} → 200 with an internal error frame: ${answer.text.slice(-300)}`);
      // Invalid UTF-8 and lone surrogate escapes are refused, never silently replaced (issue 23).
      if (answer.status === 200 && real.body && /^\/v1\/((chat\/)?completions|responses|messages)$/.test(real.path) && (!isUtf8(real.body) || findJsonFault(real.body, 1e9) !== undefined)) {
        throw new Error(`${what} → 200 for a body that is not valid UTF-8 or has a lone surrogate escape`);
      }
    });
    const path = process.env.TANDEM_FUZZ_PATH;
    try {
      await fc.assert(property, {
        seed,
        ...(path ? { path } : {}),
        numRuns: 100_000,
        interruptAfterTimeLimit: FUZZ_TIME_MS,
        markInterruptAsFailure: false,
        // Shrinking replays requests against a live server; the first counterexample is enough.
        endOnFailure: true,
      });
    } catch (err) {
      throw new Error(`fuzz failed with seed ${seed} (TANDEM_FUZZ_SEED=${seed}): ${(err as Error).message}`);
    }
    console.log(`fuzz: ${runs} requests, statuses ${JSON.stringify(Object.fromEntries(statuses))}`);
    expect(runs).toBeGreaterThan(50);

    // No crash: the same frontend process, alive, never restarted.
    expect(frontendPids(), `frontend restarted during the fuzz (seed ${seed})`).toEqual(pidsBefore);
    expect(isAlive(pidsBefore[0])).toBe(true);
    expect(up!.proc.running).toBe(true);

    // And still serving, through the official client.
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: KEY, maxRetries: 0 });
    const res = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'still there?' }], max_tokens: 5, ignore_eos: true } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    expect(res.choices[0]!.finish_reason).toBe('length');
    expect(res.usage!.completion_tokens).toBe(5);
    const emb = await client.embeddings.create({ model, input: ['still', 'there?'] });
    expect(emb.data.map((d) => d.embedding.length)).toEqual([64, 64]);
  }, 180_000);
});
