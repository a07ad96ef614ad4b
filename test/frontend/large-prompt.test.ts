/**
 * Issue 12, fault 3, and issue 23: a large prompt or body must not block the event loop.
 *  - A 10 MB chat message to a real `runtime frontend` process (built CLI, mocker worker, tiny
 *    model with a 2048-token context) is refused with context_length_exceeded by the byte bound,
 *    without being tokenized ("at least N tokens"), and the frontend's RSS does not stay hundreds
 *    of MB up. (Before: 13-14 s of tokenizing on the event loop, /live stalled 12.6 s, +600 MB.)
 *  - While a 16 MB body is parsed (sliced, issue 23), and while a 1.5 MB prompt that fits is
 *    tokenized (on the preprocessing pool), /live is answered: in-process frontends, where the
 *    server's own order of events is read from node:http's diagnostics channels. The test
 *    counts /live answers between the body's last byte and the response (the parse), or
 *    between the tokenize call and its result, by order of events, not by milliseconds: a
 *    loop blocked for the whole work answers at most one (in the one yield before the parse),
 *    none during an inline tokenize. How long /live waits is a timing, measured by
 *    bench/live-during-large-bodies.ts.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { mkdtemp, rm } from 'node:fs/promises';
import { request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CodecLoader, ModelCodec } from '../../frontend/codec.js';
import { startFrontend, type FrontendHandle } from '../../frontend/frontend.js';
import { createHfCodecLoader } from '../../frontend/hf-codec.js';
import { loadPromptModel, PreprocessPool, tokenizePrompt } from '../../frontend/preprocess/index.js';
import { makeTinyModel, type TinyModelInfo } from '../../workers/models/index.js';
import { CliStack } from '../harness/cli-stack.js';
import { metricValue, scrape } from '../harness/http.js';
import { FakeCluster } from './fakes.js';
import { startTestFrontend, waitFor, type TestFrontend } from './harness.js';

const MB = 1024 * 1024;

/** A chat body of about `bytes` bytes of ordinary prose. */
function chatBody(model: string, bytes: number, extra: Record<string, unknown> = {}): string {
  const sentence = 'The quick brown fox jumps over the lazy dog, and Grüße to the 🦊. ';
  const content = sentence.repeat(Math.ceil(bytes / Buffer.byteLength(sentence)));
  return JSON.stringify({ model, messages: [{ role: 'user', content }], max_tokens: 8, ...extra });
}

/**
 * The in-process server's own order of events, recorded on its event loop as they happen
 * (node:http publishes `http.server.request.start` and `http.server.response.finish`
 * synchronously): `live` for each /live answered, `body-end` when a POST to `watchPath` has
 * been read to its last byte, `respond` when its response begins, and any mark the test adds.
 */
class ServerTimeline {
  readonly events: string[] = [];
  private readonly onStart = (message: unknown): void => {
    const { request, response } = message as { request: IncomingMessage; response: ServerResponse };
    if (request.method !== 'POST' || request.url !== this.watchPath) return;
    request.once('end', () => this.events.push('body-end'));
    // The response's first byte: every bit of the request's work is done by then.
    const writeHead = response.writeHead;
    response.writeHead = ((...args: Parameters<ServerResponse['writeHead']>) => {
      this.events.push('respond');
      return writeHead.apply(response, args);
    }) as ServerResponse['writeHead'];
  };
  private readonly onFinish = (message: unknown): void => {
    if ((message as { request: IncomingMessage }).request.url === '/live') this.events.push('live');
  };

  constructor(private readonly watchPath = '/v1/chat/completions') {
    subscribe('http.server.request.start', this.onStart);
    subscribe('http.server.response.finish', this.onFinish);
  }

  /** /live answers after the first `from` and before the first `to` that follows it. */
  livesBetween(from: string, to: string): number {
    const start = this.events.indexOf(from);
    const end = this.events.indexOf(to, start + 1);
    if (start < 0 || end < 0) throw new Error(`timeline lacks ${from} → ${to}: ${this.events.join(' ')}`);
    return this.events.slice(start + 1, end).filter((e) => e === 'live').length;
  }

  close(): void {
    unsubscribe('http.server.request.start', this.onStart);
    unsubscribe('http.server.response.finish', this.onFinish);
  }
}

/**
 * Poll /live while `work` runs, `pauseMs` between polls (0: back to back, for a window of a few
 * loop turns; the counts are by order, so the pause only thins them).
 */
async function whilePolling<T>(url: string, work: () => Promise<T>, pauseMs = 0): Promise<T> {
  let done = false;
  const poller = (async () => {
    while (!done) {
      const res = await fetch(`${url}/live`);
      await res.arrayBuffer();
      if (res.status !== 200) throw new Error(`/live answered ${res.status}`);
      if (pauseMs > 0) await new Promise((r) => setTimeout(r, pauseMs));
    }
  })();
  try {
    return await work();
  } finally {
    done = true;
    await poller;
  }
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

  it('is refused by the byte bound, without tokenizing, and memory comes back', async () => {
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
    const body = chatBody(stack.model, 10 * MB);
    expect(Buffer.byteLength(body)).toBeGreaterThan(10 * MB);
    expect(Buffer.byteLength(body)).toBeLessThan(16 * MB);

    const res = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    const json = (await res.json()) as { error: { code: string; message: string; param: string } };
    expect(res.status).toBe(400);
    expect(json.error.code).toBe('context_length_exceeded');
    expect(json.error.param).toBe('max_tokens');
    // "at least": refused by the bound, never tokenized (tokenizing 10 MB is what held the loop for 13 s).
    expect(json.error.message).toMatch(/maximum context length is 2048 tokens\. However, you requested at least \d+ tokens/);

    // The frontend still serves, and its RSS does not stay hundreds of MB up (before: +600 MB).
    const after = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: chatBody(stack.model, 200) });
    expect(after.status).toBe(200);
    await after.text();
    await new Promise((r) => setTimeout(r, 1000));
    const rssAfter = metricValue(await scrape(url), 'tandem_process_process_resident_memory_bytes')!;
    expect(rssAfter - rssBefore!, `RSS ${(rssBefore! / MB).toFixed(0)} MB -> ${(rssAfter / MB).toFixed(0)} MB`).toBeLessThan(200 * MB);
  }, 60_000);
});

/** A codec loader whose codecs mark each tokenize call's start and result on the timeline. */
function markTokenize(inner: CodecLoader, timeline: ServerTimeline): CodecLoader {
  return async (card) => {
    const codec = await inner(card);
    const marked: ModelCodec = Object.create(codec) as ModelCodec;
    marked.tokenize = async (prompt, options) => {
      timeline.events.push('tokenize-start');
      try {
        return await codec.tokenize(prompt, options);
      } finally {
        timeline.events.push('tokenize-end');
      }
    };
    return marked;
  };
}

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

describe('a 16 MB body: /live is answered while it is parsed (issue 23, in-process frontend)', () => {
  let t: TestFrontend;
  let timeline: ServerTimeline;

  beforeAll(async () => {
    t = await startTestFrontend();
    timeline = new ServerTimeline();
  });
  afterAll(async () => {
    timeline?.close();
    await t?.close();
  });

  it('some /live answers come between the body’s last byte and the response: the parse yields to the loop', async () => {
    // The body names no served model, so it is refused (404) right after it is parsed: the
    // parse is all the work between the two marks.
    const body = new Uint8Array(Buffer.from(chatBody('no-such-model', 15.5 * MB)));
    expect(body.byteLength).toBeGreaterThan(15 * MB);
    expect(body.byteLength).toBeLessThan(16 * MB);
    // node:http hands the buffer to the socket as it is (fetch would stream it through JS).
    const result = await whilePolling(t.url, () => postBuffer(`${t.url}/v1/chat/completions`, body));
    // Parsed and validated as a whole (a malformed body would be a 400), then refused by model name.
    expect(result.status).toBe(404);
    expect(result.json.error.code).toBe('model_not_found');
    // One JSON.parse of the whole would let at most one /live in (the yield before the parse);
    // the sliced parse yields every few ms, and the back-to-back poller gets answered in between.
    const during = timeline.livesBetween('body-end', 'respond');
    expect(during, timeline.events.join(' ').replace(/(live )+/g, (m) => `live×${m.length / 5} `)).toBeGreaterThanOrEqual(2);
  }, 60_000);
});

describe('a 1.5 MB prompt that fits (in-process frontend, default codec, huge context)', () => {
  let dir: string;
  let info: TinyModelInfo;
  let cluster: FakeCluster;
  let frontend: FrontendHandle;
  let pool: PreprocessPool;
  let timeline: ServerTimeline;

  beforeAll(async () => {
    timeline = new ServerTimeline();
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
    // The default codec over its pool, as startFrontend builds it, with the tokenize call marked on the timeline.
    pool = new PreprocessPool({ threads: 2 });
    frontend = await startFrontend({ discovery: cluster.frontendDiscovery, connector: cluster, host: '127.0.0.1', httpPort: 0, codecLoader: markTokenize(createHfCodecLoader({ pool }), timeline) });
    await waitFor(() => frontend.models.names().length === 2);
    await frontend.models.settled();
  });
  afterAll(async () => {
    timeline?.close();
    await frontend?.close();
    await pool?.close();
    await cluster?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('is tokenized in full on the pool while /live is answered, and the worker gets the exact ids', async () => {
    const url = frontend.url;
    const body = chatBody('big', 1.5 * MB);
    const result = await whilePolling(url, async () => {
      const res = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      return { status: res.status, json: (await res.json()) as { usage: { prompt_tokens: number } } };
    }, 10);
    expect(result.status, JSON.stringify(result.json).slice(0, 300)).toBe(200);
    // Tokenized on the loop, the call would return before any /live; on the pool, /live keeps being answered.
    const during = timeline.livesBetween('tokenize-start', 'tokenize-end');
    expect(during, timeline.events.join(' ').replace(/(live )+/g, (m) => `live×${m.length / 5} `)).toBeGreaterThanOrEqual(2);

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
