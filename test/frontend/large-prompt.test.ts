/**
 * Issue 12, fault 3: a large prompt must not block the event loop.
 *  - A 10 MB chat message to a real `runtime frontend` process (built CLI, mocker worker, tiny
 *    model with a 2048-token context) is refused with context_length_exceeded by the byte
 *    bound, quickly, while /live keeps answering, and the frontend's RSS does not stay hundreds
 *    of MB up. (Before: 13-14 s of tokenizing on the event loop, /live stalled 12.6 s, +600 MB.)
 *  - A 1.5 MB prompt that fits (a model card with a huge context) is really tokenized, on the
 *    preprocessing pool: /live stays responsive and the worker gets the exact ids.
 * Latency bounds are relative to an idle /live poll measured in the same test, so a loaded
 * 2-core box does not make them flake: max < max(250 ms, 5x idle p99). Tokenizing 10 MB (or
 * 1.5 MB) on the event loop takes seconds, far past either bound.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFrontend, type FrontendHandle } from '../../frontend/frontend.js';
import { loadPromptModel, tokenizePrompt } from '../../frontend/preprocess/index.js';
import { makeTinyModel, type TinyModelInfo } from '../../workers/models/index.js';
import { CliStack } from '../harness/cli-stack.js';
import { metricValue, scrape } from '../harness/http.js';
import { FakeCluster } from './fakes.js';
import { waitFor } from './harness.js';

const MB = 1024 * 1024;

/** One /live round trip in ms. */
async function liveLatency(url: string): Promise<number> {
  const t0 = performance.now();
  const res = await fetch(`${url}/live`);
  await res.arrayBuffer();
  if (res.status !== 200) throw new Error(`/live answered ${res.status}`);
  return performance.now() - t0;
}

function p99(samples: number[]): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * 0.99))]!;
}

async function idleLiveP99(url: string): Promise<number> {
  const samples: number[] = [];
  for (let i = 0; i < 60; i++) {
    samples.push(await liveLatency(url));
    await new Promise((r) => setTimeout(r, 5));
  }
  return p99(samples);
}

/**
 * Poll /live every 10 ms while `work` runs (and for `tailMs` after it), returning the work's
 * result and every poll's latency. A poll's latency runs from when it was due (10 ms after the
 * previous answer), so an event loop blocked while the poller sleeps counts too: with an
 * in-process frontend the block would otherwise only delay the timer and go unseen.
 */
async function whilePolling<T>(url: string, work: () => Promise<T>, tailMs = 200): Promise<{ result: T; latencies: number[]; elapsedMs: number }> {
  const latencies: number[] = [];
  let done = false;
  const poller = (async () => {
    let due = performance.now();
    while (!done) {
      await liveLatency(url);
      const end = performance.now();
      latencies.push(end - due);
      due = end + 10;
      await new Promise((r) => setTimeout(r, 10));
    }
  })();
  const t0 = performance.now();
  const result = await work();
  const elapsedMs = performance.now() - t0;
  await new Promise((r) => setTimeout(r, tailMs));
  done = true;
  await poller;
  return { result, latencies, elapsedMs };
}

/** A chat body of about `bytes` bytes of ordinary prose. */
function chatBody(model: string, bytes: number, extra: Record<string, unknown> = {}): string {
  const sentence = 'The quick brown fox jumps over the lazy dog, and Grüße to the 🦊. ';
  const content = sentence.repeat(Math.ceil(bytes / Buffer.byteLength(sentence)));
  return JSON.stringify({ model, messages: [{ role: 'user', content }], max_tokens: 8, ...extra });
}

describe('a 10 MB prompt to a real frontend process', () => {
  let stack: CliStack;

  beforeAll(async () => {
    stack = await CliStack.create({ tmpPrefix: 'tandem-large-prompt-', tiny: { arch: 'qwen3' } });
    await stack.startWorker('agg', ['--engine', 'mocker', '--speedup-ratio', '100']);
    await stack.startFrontend(['--preprocess-threads', '2']);
    await stack.waitForRoutable(1);
  }, 120_000);
  afterAll(async () => stack?.close());

  it('is refused by the byte bound in well under a second while /live keeps answering, and memory comes back', async () => {
    const url = stack.url;
    // Warm up: a normal request, and two pool-sized ones at once so both threads exist.
    const ok = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: chatBody(stack.model, 200) });
    expect(ok.status).toBe(200);
    await ok.text();
    const warm = await Promise.all([0, 1].map(() => fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: chatBody(stack.model, 8000) })));
    for (const res of warm) {
      expect([200, 400]).toContain(res.status);
      await res.text();
    }

    const rssBefore = metricValue(await scrape(url), 'tandem_process_process_resident_memory_bytes');
    expect(rssBefore).toBeGreaterThan(0);
    const idle = await idleLiveP99(url);
    const body = chatBody(stack.model, 10 * MB);
    expect(Buffer.byteLength(body)).toBeGreaterThan(10 * MB);
    expect(Buffer.byteLength(body)).toBeLessThan(16 * MB);

    const { result, latencies, elapsedMs } = await whilePolling(url, async () => {
      const res = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      return { status: res.status, json: (await res.json()) as { error: { code: string; message: string; param: string } } };
    });
    expect(result.status).toBe(400);
    expect(result.json.error.code).toBe('context_length_exceeded');
    expect(result.json.error.param).toBe('max_tokens');
    // "at least": refused by the bound, never tokenized.
    expect(result.json.error.message).toMatch(/maximum context length is 2048 tokens\. However, you requested at least \d+ tokens/);
    expect(elapsedMs).toBeLessThan(5000);
    const bound = Math.max(250, 5 * idle);
    expect(latencies.length).toBeGreaterThan(5);
    expect(Math.max(...latencies), `idle p99 ${idle.toFixed(1)} ms, polls ${latencies.map((l) => l.toFixed(0)).join(',')}`).toBeLessThan(bound);

    // The frontend still serves, and its RSS does not stay hundreds of MB up (before: +600 MB).
    const after = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: chatBody(stack.model, 200) });
    expect(after.status).toBe(200);
    await after.text();
    await new Promise((r) => setTimeout(r, 1000));
    const rssAfter = metricValue(await scrape(url), 'tandem_process_process_resident_memory_bytes')!;
    expect(rssAfter - rssBefore!, `RSS ${(rssBefore! / MB).toFixed(0)} MB -> ${(rssAfter / MB).toFixed(0)} MB`).toBeLessThan(200 * MB);
  }, 60_000);
});

/** POST `body` as JSON with node:http: status and parsed answer. */
function postBuffer(url: string, body: Uint8Array): Promise<{ status: number; json: { error: { code: string } } }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method: 'POST', headers: { 'content-type': 'application/json', 'content-length': body.byteLength } }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (d: Buffer) => parts.push(d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, json: JSON.parse(Buffer.concat(parts).toString()) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

describe('a 16 MB body to a real frontend process: parsed without holding /live (issue 23)', () => {
  let stack: CliStack;

  beforeAll(async () => {
    stack = await CliStack.create({ tmpPrefix: 'tandem-large-body-', tiny: { arch: 'qwen3' } });
    await stack.startWorker('agg', ['--engine', 'mocker', '--speedup-ratio', '100']);
    await stack.startFrontend([]);
    await stack.waitForRoutable(1);
  }, 120_000);
  afterAll(async () => stack?.close());

  it('while a 16 MB chat body is read and parsed, /live answers within 50 ms (plus slack for a loaded box)', async () => {
    // The body names no served model, so it is refused (404) right after it is parsed: the parse
    // is all the work measured. (What a served model does next, copying the prompt to the
    // preprocessing thread, is the large-prompt case above.)
    const url = stack.url;
    const ok = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: chatBody(stack.model, 200) });
    expect(ok.status).toBe(200);
    await ok.text();
    // Encoded once here: encoding 16 MB inside fetch would hold this process's loop, and the poller with it.
    const body = new Uint8Array(Buffer.from(chatBody('no-such-model', 15.5 * MB)));
    expect(body.byteLength).toBeGreaterThan(15 * MB);
    expect(body.byteLength).toBeLessThan(16 * MB);
    const maxes: number[] = [];
    const idleMaxes: number[] = [];
    for (let round = 0; round < 5; round++) {
      // node:http hands the buffer to the socket as it is (fetch streams it through JS).
      const { result, latencies, elapsedMs } = await whilePolling(url, () => postBuffer(`${url}/v1/chat/completions`, body));
      // Parsed and validated as a whole (a malformed body would be a 400), then refused by model name.
      expect(result.status).toBe(404);
      expect(result.json.error.code).toBe('model_not_found');
      expect(latencies.length).toBeGreaterThan(3);
      maxes.push(Math.max(...latencies));
      // The same polling for as long with nothing posted: what this box's scheduler alone costs.
      const idle = await whilePolling(url, () => new Promise((r) => setTimeout(r, elapsedMs)));
      idleMaxes.push(Math.max(...idle.latencies));
    }
    // Scanning, decoding and JSON.parse of this body in one go hold the loop for 60 ms on an idle
    // box and several hundred on a loaded one; sliced, no poll waits much past one 4 ms slice.
    // On a loaded box the scheduler alone stalls a busy process for tens of ms, so: the best of five
    // rounds against twice the median idle round.
    const idleMax = [...idleMaxes].sort((a, b) => a - b)[2]!;
    const bound = 50 + 2 * idleMax;
    expect(Math.min(...maxes), `max per round ${maxes.map((m) => m.toFixed(0)).join(', ')} ms; idle rounds ${idleMaxes.map((m) => m.toFixed(0)).join(', ')} ms`).toBeLessThan(bound);
  }, 120_000);
});

describe('a 1.5 MB prompt that fits (in-process frontend, default codec, huge context)', () => {
  let dir: string;
  let info: TinyModelInfo;
  let cluster: FakeCluster;
  let frontend: FrontendHandle;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tandem-large-fit-'));
    info = await makeTinyModel({ arch: 'qwen3', outDir: dir, dtype: 'f32' });
    cluster = new FakeCluster();
    await cluster.addWorker(
      { text: 'ok', eos: info.eosTokenIds[0]! },
      { name: 'big', modelPath: dir, tokenizerSource: dir, chatTemplateSource: dir, eosTokenIds: info.eosTokenIds, contextLength: 4_000_000 },
    );
    await cluster.addWorker(
      { text: 'ok', eos: info.eosTokenIds[0]! },
      { name: 'no-template', modelPath: dir, tokenizerSource: dir, chatTemplateSource: join(dir, 'missing'), eosTokenIds: info.eosTokenIds, contextLength: 4_000_000 },
    );
    frontend = await startFrontend({ discovery: cluster.frontendDiscovery, connector: cluster, host: '127.0.0.1', httpPort: 0, preprocessThreads: 2 });
    await waitFor(() => frontend.models.names().length === 2);
    await frontend.models.settled();
  });
  afterAll(async () => {
    await frontend?.close();
    await cluster?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('is tokenized in full on the pool while /live stays responsive, and the worker gets the exact ids', async () => {
    const url = frontend.url;
    const idle = await idleLiveP99(url);
    const body = chatBody('big', 1.5 * MB);
    const { result, latencies, elapsedMs } = await whilePolling(url, async () => {
      const res = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      return { status: res.status, json: (await res.json()) as { usage: { prompt_tokens: number } } };
    });
    expect(result.status, JSON.stringify(result.json).slice(0, 300)).toBe(200);
    const bound = Math.max(250, 5 * idle);
    expect(latencies.length).toBeGreaterThan(5);
    expect(Math.max(...latencies), `idle p99 ${idle.toFixed(1)} ms, request ${elapsedMs.toFixed(0)} ms, polls ${latencies.map((l) => l.toFixed(0)).join(',')}`).toBeLessThan(bound);

    // Only now, off the clock: the same prompt tokenized inline must give the worker's ids.
    const model = await loadPromptModel({ tokenizerDir: dir, templateDir: dir });
    const messages = (JSON.parse(body) as { messages: Array<{ role: string; content: string }> }).messages;
    const expected = tokenizePrompt(model, { kind: 'chat', messages, addGenerationPrompt: true }, Infinity);
    if (expected.type !== 'tokens') throw new Error('expected tokens');
    expect(expected.ids.length).toBeGreaterThan(100_000);
    const sent = cluster.allCalls().at(-1)!.request.tokenIds;
    expect(sent.length).toBe(expected.ids.length);
    expect(result.json.usage.prompt_tokens).toBe(expected.ids.length);
    expect(sent.every((id, i) => id === expected.ids[i])).toBe(true);
  }, 60_000);

  it('a template error from a pool thread is the same 400 as from the inline path', async () => {
    const answers = [];
    for (const chars of [100, 50_000]) {
      const res = await fetch(`${frontend.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: chatBody('no-template', chars) });
      answers.push({ status: res.status, error: ((await res.json()) as { error: Record<string, unknown> }).error });
    }
    expect(answers[0]!.status).toBe(400);
    expect(answers[0]!.error).toMatchObject({ type: 'invalid_request_error', param: 'messages' });
    expect(answers[0]!.error.message).toMatch(/^could not apply the chat template: .* has no chat template/);
    expect(answers[1]).toEqual(answers[0]);
  });
});
