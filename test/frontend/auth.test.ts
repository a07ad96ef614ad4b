/**
 * API keys, content type and CORS (frontend/http/auth.ts, body.ts): the pure pieces, then a
 * frontend on a real socket driven by the official `openai` client and raw fetch, then the
 * CLI's refusal of a bad key file (built CLI: run `npm run build` first).
 */
import { mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiKeySet, checkAccess, corsHeaders, parseKeyFile, parseKeyList, presentedKey } from '../../frontend/http/auth.js';
import { isJsonContentType, findJsonFault } from '../../frontend/http/body.js';
import { spawnCli } from '../harness/processes.js';
import { pollUntil } from '../harness/http.js';
import { startTestFrontend, type TestFrontend } from './harness.js';

const CHAT = JSON.stringify({ model: 'fake-model', messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 });

describe('auth: pure pieces', () => {
  it('ApiKeySet matches only exact keys, of any length', () => {
    const keys = new ApiKeySet(['sk-one', 'a-much-longer-second-key-0123456789']);
    expect(keys.matches('sk-one')).toBe(true);
    expect(keys.matches('a-much-longer-second-key-0123456789')).toBe(true);
    expect(keys.matches('sk-on')).toBe(false);
    expect(keys.matches('sk-one ')).toBe(false);
    expect(keys.matches('')).toBe(false);
    expect(new ApiKeySet([]).matches('sk-one')).toBe(false);
  });

  it('presentedKey reads Bearer (any case) and x-api-key; Basic is not a key', () => {
    expect(presentedKey({ authorization: 'Bearer k1' })).toBe('k1');
    expect(presentedKey({ authorization: 'bearer   k2 ' })).toBe('k2');
    expect(presentedKey({ 'x-api-key': 'k3' })).toBe('k3');
    expect(presentedKey({ authorization: 'Basic Zm9vOmJhcg==' })).toBeUndefined();
    expect(presentedKey({})).toBeUndefined();
  });

  it('checkAccess: probes open, /metrics per policy, everything else (unknown routes too) needs a key', () => {
    const keys = new ApiKeySet(['k']);
    const required = { keys: () => keys, metricsAuth: 'required' as const };
    const open = { keys: () => keys, metricsAuth: 'none' as const };
    expect(checkAccess(required, '/health', {})).toBeUndefined();
    expect(checkAccess(required, '/live', {})).toBeUndefined();
    expect(checkAccess(required, '/metrics', {})?.code).toBe('invalid_api_key');
    expect(checkAccess(open, '/metrics', {})).toBeUndefined();
    expect(checkAccess(required, '/nope', {})?.status).toBe(401);
    expect(checkAccess(required, '/v1/models', { 'x-api-key': 'k' })).toBeUndefined();
    expect(checkAccess({ keys: () => undefined, metricsAuth: 'required' }, '/v1/models', {})).toBeUndefined();
  });

  it('key lists: files skip blanks and # comments; flag values split on commas', () => {
    expect(parseKeyFile('# ops keys\nk1\n\n  k2  \r\n#k3\n')).toEqual(['k1', 'k2']);
    expect(parseKeyList('a, b,,c', ['z'])).toEqual(['z', 'a', 'b', 'c']);
  });

  it('content type: application/json with an optional utf-8 charset only', () => {
    expect(isJsonContentType('application/json')).toBe(true);
    expect(isJsonContentType('Application/JSON; charset=UTF-8')).toBe(true);
    expect(isJsonContentType('application/json; charset="utf-8"')).toBe(true);
    expect(isJsonContentType('application/json; charset=latin1')).toBe(false);
    expect(isJsonContentType('text/plain;charset=UTF-8')).toBe(false);
    expect(isJsonContentType('application/x-www-form-urlencoded')).toBe(false);
    expect(isJsonContentType('application/jsonx')).toBe(false);
    expect(isJsonContentType(undefined)).toBe(false);
  });

  it('JSON depth: brackets inside strings and escaped quotes do not count', () => {
    expect(findJsonFault(Buffer.from('[[[1]]]'), 3)).toBeUndefined();
    expect(findJsonFault(Buffer.from('[[[[1]]]]'), 3)).toEqual({ kind: 'too_deep' });
    expect(findJsonFault(Buffer.from('{"a":"[[[[[\\"[[[["}'), 1)).toBeUndefined();
    expect(findJsonFault(Buffer.from('{"a":{"b":[]}}'), 2)).toEqual({ kind: 'too_deep' });
  });

  it('JSON surrogate escapes: a high-then-low pair passes, either half alone is a fault at its backslash', () => {
    expect(findJsonFault(Buffer.from('["\\ud83d\\uDE00", "\\u00e9\\\\ud800"]'), 8)).toBeUndefined();
    expect(findJsonFault(Buffer.from('["ab\\ud800"]'), 8)).toEqual({ kind: 'lone_surrogate', offset: 4 });
    expect(findJsonFault(Buffer.from('["\\ud800\\u0041"]'), 8)).toEqual({ kind: 'lone_surrogate', offset: 2 });
    expect(findJsonFault(Buffer.from('["\\udc00\\ud800"]'), 8)).toEqual({ kind: 'lone_surrogate', offset: 2 });
    expect(findJsonFault(Buffer.from('{"\\ud800": 1}'), 8)).toEqual({ kind: 'lone_surrogate', offset: 2 });
    // Outside a string it is not an escape at all (JSON.parse rejects the text).
    expect(findJsonFault(Buffer.from('[1] \\ud800'), 8)).toBeUndefined();
  });

  it('CORS: off without origins; listed origins echoed, others get nothing', () => {
    expect(corsHeaders(new Set(), 'https://a.example')).toBeUndefined();
    const allowed = new Set(['https://a.example']);
    expect(corsHeaders(allowed, 'https://a.example')).toEqual({ 'access-control-allow-origin': 'https://a.example', vary: 'Origin' });
    expect(corsHeaders(allowed, 'https://evil.example')).toBeUndefined();
    expect(corsHeaders(allowed, undefined)).toBeUndefined();
  });
});

describe('auth: a frontend with API keys, over a real socket', () => {
  let t: TestFrontend;
  let dir: string;
  let keyFile: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tandem-auth-'));
    keyFile = join(dir, 'keys');
    await writeFile(keyFile, '# rotated daily\nfile-key-1\n');
    t = await startTestFrontend({ apiKeys: ['flag-key'], apiKeyFile: keyFile, corsOrigins: ['https://app.example'] }, async (cluster) => {
      await cluster.addWorker({ text: 'ok' });
    });
  });
  afterAll(async () => {
    await t.close();
    await rm(dir, { recursive: true, force: true });
  });

  const post = (headers: Record<string, string>, body = CHAT, path = '/v1/chat/completions') =>
    fetch(`${t.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });

  it('the openai client with a right key is served; with a wrong one it gets AuthenticationError (401, invalid_api_key)', async () => {
    const good = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: 'flag-key', maxRetries: 0 });
    const res = await good.chat.completions.create({ model: 'fake-model', messages: [{ role: 'user', content: 'hi' }] });
    expect(res.choices[0]!.message.content).toBe('ok');
    expect((await good.models.list()).data.map((m) => m.id)).toEqual(['fake-model']);
    const bad = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: 'wrong', maxRetries: 0 });
    const err = await bad.chat.completions.create({ model: 'fake-model', messages: [{ role: 'user', content: 'hi' }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.AuthenticationError);
    expect((err as InstanceType<typeof OpenAI.AuthenticationError>).status).toBe(401);
    expect((err as InstanceType<typeof OpenAI.AuthenticationError>).code).toBe('invalid_api_key');
  });

  it('401 is OpenAI-shaped, carries WWW-Authenticate: Bearer, and never echoes the key', async () => {
    const res = await post({ authorization: 'Bearer not-a-key-SECRET' });
    expect(res.status).toBe(401);
    expect(res.headers.get('www-authenticate')).toBe('Bearer');
    const text = await res.text();
    expect(JSON.parse(text)).toEqual({ error: { message: 'Incorrect API key provided.', type: 'invalid_request_error', param: null, code: 'invalid_api_key' } });
    expect(text).not.toContain('SECRET');
    const missing = await post({});
    expect(missing.status).toBe(401);
    expect(((await missing.json()) as { error: { message: string } }).error.message).toMatch(/didn't provide an API key/);
  });

  it('x-api-key works as well as Bearer, for flag keys and file keys', async () => {
    expect((await post({ 'x-api-key': 'flag-key' })).status).toBe(200);
    expect((await post({ 'x-api-key': 'file-key-1' })).status).toBe(200);
    expect((await post({ authorization: 'Bearer file-key-1' })).status).toBe(200);
  });

  it('/health and /live stay open; /metrics, /v1/models and unknown routes need a key', async () => {
    expect((await fetch(`${t.url}/health`)).status).toBe(200);
    expect((await fetch(`${t.url}/live`)).status).toBe(200);
    expect((await fetch(`${t.url}/metrics`)).status).toBe(401);
    expect((await fetch(`${t.url}/metrics`, { headers: { 'x-api-key': 'flag-key' } })).status).toBe(200);
    expect((await fetch(`${t.url}/v1/models`)).status).toBe(401);
    expect((await fetch(`${t.url}/v2/anything`)).status).toBe(401);
    expect((await fetch(`${t.url}/v2/anything`, { headers: { 'x-api-key': 'flag-key' } })).status).toBe(404);
  });

  it('a body that is not application/json is 415 (a cross-site form post never reaches a handler)', async () => {
    for (const type of ['application/x-www-form-urlencoded', 'text/plain;charset=UTF-8', 'multipart/form-data; boundary=x']) {
      const res = await post({ 'x-api-key': 'flag-key', 'content-type': type });
      expect(res.status, type).toBe(415);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe('unsupported_media_type');
    }
    // fetch with a string body and no header sends text/plain: refused too.
    const plain = await fetch(`${t.url}/v1/chat/completions`, { method: 'POST', headers: { 'x-api-key': 'flag-key' }, body: CHAT });
    expect(plain.status).toBe(415);
  });

  it('CORS: a listed origin gets its preflight answered and Allow-Origin; another gets neither', async () => {
    const preflight = await fetch(`${t.url}/v1/chat/completions`, {
      method: 'OPTIONS',
      headers: { origin: 'https://app.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type' },
    });
    expect(preflight.status).toBe(204);
    expect(preflight.headers.get('access-control-allow-origin')).toBe('https://app.example');
    expect(preflight.headers.get('access-control-allow-headers')).toMatch(/authorization/);
    const served = await post({ origin: 'https://app.example', 'x-api-key': 'flag-key' });
    expect(served.headers.get('access-control-allow-origin')).toBe('https://app.example');
    const evil = await fetch(`${t.url}/v1/chat/completions`, { method: 'OPTIONS', headers: { origin: 'https://evil.example', 'access-control-request-method': 'POST' } });
    expect(evil.status).toBe(403);
    expect(evil.headers.get('access-control-allow-origin')).toBeNull();
    expect((await post({ origin: 'https://evil.example', 'x-api-key': 'flag-key' })).headers.get('access-control-allow-origin')).toBeNull();
  });

  it('the key file is re-read on change: a new key works, a removed one stops working, also when the file is replaced', async () => {
    await writeFile(keyFile, 'file-key-2\n');
    await pollUntil('file-key-2 accepted', async () => (await post({ 'x-api-key': 'file-key-2' })).status === 200, 10_000, 100);
    expect((await post({ 'x-api-key': 'file-key-1' })).status).toBe(401);
    expect((await post({ 'x-api-key': 'flag-key' })).status).toBe(200); // flag keys stay
    // Editors write a new file and rename it over the old one.
    const tmp = join(dir, 'keys.tmp');
    await writeFile(tmp, 'file-key-3\n');
    await rename(tmp, keyFile);
    await pollUntil('file-key-3 accepted', async () => (await post({ 'x-api-key': 'file-key-3' })).status === 200, 10_000, 100);
    expect((await post({ 'x-api-key': 'file-key-2' })).status).toBe(401);
  });
});

describe('auth: CORS is off by default', () => {
  it('no Allow-Origin and no preflight answer without --cors-origins; no keys means open', async () => {
    const t = await startTestFrontend();
    try {
      const pre = await fetch(`${t.url}/v1/chat/completions`, { method: 'OPTIONS', headers: { origin: 'https://app.example', 'access-control-request-method': 'POST' } });
      expect(pre.headers.get('access-control-allow-origin')).toBeNull();
      expect(pre.status).toBe(405);
      expect((await fetch(`${t.url}/v1/models`)).status).toBe(200);
      expect((await fetch(`${t.url}/metrics`)).status).toBe(200);
    } finally {
      await t.close();
    }
  });
});

describe('auth: the CLI refuses a bad key file at start', () => {
  it('runtime frontend --api-key-file MISSING prints one line and exits 2', async () => {
    const p = spawnCli(['frontend', '--http-port', '0', '--discovery', 'memory', '--api-key-file', '/nonexistent/tandem-keys']);
    const { code } = await p.exited();
    expect(code).toBe(2);
    expect(p.output()).toMatch(/--api-key-file \/nonexistent\/tandem-keys: ENOENT/);
    expect(p.output()).not.toMatch(/\n\s+at /);
  });
});
