/**
 * Request pipeline behaviour end to end over HTTP with fault-injecting in-process workers:
 * stop strings and stop ids, logprobs as token ids, routing modes, cancellation on disconnect,
 * migration after a worker dies mid-stream, and admission (503 + Retry-After).
 */
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { EOS } from './fakes.js';
import { parseSse, postRaw, startTestFrontend, waitFor, type TestFrontend } from './harness.js';

let t: TestFrontend | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

function chatBody(extra: Record<string, unknown> = {}): string {
  return JSON.stringify({ model: 'fake-model', messages: [{ role: 'user', content: 'go' }], ...extra });
}

async function streamedText(url: string, body: string, headers: Record<string, string> = {}): Promise<{ text: string; finish: string; chunks: any[] }> {
  const res = await postRaw(`${url}/v1/chat/completions`, body, headers);
  expect(res.status).toBe(200);
  const chunks = parseSse(res.text).slice(0, -1).map((f) => JSON.parse(f));
  const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
  const finish = chunks.map((c) => c.choices[0]?.finish_reason).filter(Boolean).at(-1);
  return { text, finish, chunks };
}

describe('frontend pipeline: stop conditions', () => {
  it('a stop string spanning tokens ends the stream before it, with finish stop, and cancels the worker', async () => {
    t = await startTestFrontend({}, async (c) => {
      await c.addWorker({ text: 'alpha beta STOP gamma delta', tokenDelayMs: 1 });
    });
    const { text, finish } = await streamedText(t.url, chatBody({ stream: true, stop: ['STOP'] }));
    expect(text).toBe('alpha beta ');
    expect(finish).toBe('stop');
    await waitFor(() => t!.cluster.allCalls()[0]!.aborted);
  });

  it('text held back for a partial stop match is flushed when the stream ends', async () => {
    t = await startTestFrontend({}, async (c) => {
      await c.addWorker({ text: 'ends with ST' });
    });
    const res = await postRaw(`${t.url}/v1/completions`, JSON.stringify({ model: 'fake-model', prompt: 'x', stop: 'STOP' }));
    expect(JSON.parse(res.text).choices[0]).toMatchObject({ text: 'ends with ST', finish_reason: 'stop' });
  });

  it('multi-byte characters split across tokens arrive whole', async () => {
    t = await startTestFrontend({}, async (c) => {
      await c.addWorker({ text: 'héllo 🦊 世界' });
    });
    const { text, chunks } = await streamedText(t.url, chatBody({ stream: true }));
    expect(text).toBe('héllo 🦊 世界');
    for (const c of chunks) expect(c.choices[0]?.delta?.content ?? '').not.toContain('\uFFFD');
  });

  it('a request stop_token_id ends generation and is not printed; ignore_eos runs to max_tokens', async () => {
    t = await startTestFrontend({}, async (c) => {
      await c.addWorker({ text: 'abcdef' });
    });
    const stopped = await postRaw(`${t.url}/v1/completions`, JSON.stringify({ model: 'fake-model', prompt: 'x', stop_token_ids: ['d'.charCodeAt(0)] }));
    expect(JSON.parse(stopped.text).choices[0]).toMatchObject({ text: 'abc', finish_reason: 'stop' });
    const long = await postRaw(`${t.url}/v1/completions`, JSON.stringify({ model: 'fake-model', prompt: 'x', ignore_eos: true, max_tokens: 8 }));
    const body = JSON.parse(long.text);
    expect(body.choices[0].finish_reason).toBe('length');
    expect(body.usage.completion_tokens).toBe(8);
    const call = t.cluster.allCalls().at(-1)!;
    expect(call.request.stop).toMatchObject({ ignoreEos: true, maxTokens: 8 });
    expect(t.cluster.allCalls()[0]!.request.stop.stopTokenIds).toEqual([EOS, 'd'.charCodeAt(0)]);
  });
});

describe('frontend pipeline: logprobs', () => {
  it('chat logprobs with return_tokens_as_token_ids name tokens token_id:N', async () => {
    t = await startTestFrontend({}, async (c) => {
      await c.addWorker({ text: 'AB' });
    });
    const res = await postRaw(`${t.url}/v1/chat/completions`, chatBody({ logprobs: true, top_logprobs: 2, return_tokens_as_token_ids: true }));
    const body = JSON.parse(res.text);
    const content = body.choices[0].logprobs.content;
    expect(content.map((e: any) => e.token)).toEqual(['token_id:65', 'token_id:66', `token_id:${EOS}`]);
    expect(content[0]).toEqual({
      token: 'token_id:65',
      logprob: -0.25,
      bytes: [...Buffer.from('token_id:65')],
      top_logprobs: [
        { token: 'token_id:65', logprob: -0.1, bytes: [...Buffer.from('token_id:65')] },
        { token: 'token_id:66', logprob: -0.6, bytes: [...Buffer.from('token_id:66')] },
      ],
    });
    expect(t.cluster.allCalls()[0]!.request.logprobs).toBe(2);
  });

  it('completion logprobs (streamed) use the legacy layout with token text', async () => {
    t = await startTestFrontend({}, async (c) => {
      await c.addWorker({ text: 'AB' });
    });
    const res = await postRaw(`${t.url}/v1/completions`, JSON.stringify({ model: 'fake-model', prompt: 'x', logprobs: 1, max_tokens: 2, stream: true }));
    const chunks = parseSse(res.text).slice(0, -1).map((f) => JSON.parse(f));
    const lps = chunks.map((c) => c.choices[0].logprobs).filter(Boolean);
    expect(lps.flatMap((l: any) => l.tokens)).toEqual(['A', 'B']);
    expect(lps[0]).toEqual({ tokens: ['A'], token_logprobs: [-0.25], top_logprobs: [{ A: -0.1 }], text_offset: [0] });
    expect(lps[1].text_offset).toEqual([1]);
  });
});

describe('frontend pipeline: routing', () => {
  it('round-robin spreads requests over workers; direct pins one via x-worker-instance-id', async () => {
    t = await startTestFrontend({}, async (c) => {
      await c.addWorker({ text: 'a' });
      await c.addWorker({ text: 'a' });
    });
    await waitFor(() => t!.frontend.models.model('fake-model')!.candidates().length === 2);
    for (let i = 0; i < 4; i++) await postRaw(`${t.url}/v1/completions`, JSON.stringify({ model: 'fake-model', prompt: 'x' }));
    const counts = [...t.cluster.workers.values()].map((w) => w.worker.calls.length);
    expect(counts).toEqual([2, 2]);

    const target = [...t.cluster.workers.keys()][1]!;
    for (let i = 0; i < 3; i++) {
      await postRaw(`${t.url}/v1/completions`, JSON.stringify({ model: 'fake-model', prompt: 'x' }), { 'x-worker-instance-id': target.replace(/^0+/, '') });
    }
    expect(t.cluster.workers.get(target)!.worker.calls.length).toBe(5);
    const unknown = await postRaw(`${t.url}/v1/completions`, JSON.stringify({ model: 'fake-model', prompt: 'x' }), { 'x-worker-instance-id': 'abc' });
    expect(unknown.status).toBe(404);
    expect(JSON.parse(unknown.text).error.code).toBe('instance_not_found');
  });

  it("router mode 'direct' refuses a request without the header", async () => {
    t = await startTestFrontend({ routerMode: 'direct' });
    const res = await postRaw(`${t.url}/v1/completions`, JSON.stringify({ model: 'fake-model', prompt: 'x' }));
    expect(res.status).toBe(400);
    expect(JSON.parse(res.text).error.param).toBe('x-worker-instance-id');
  });

  it('a worker is routable only while its card exists; with no grace period the model goes with its last card', async () => {
    t = await startTestFrontend({ modelGraceMs: 0 }, async (c) => {
      await c.addWorker({ text: 'a' });
      await c.addWorker({ text: 'a' });
    });
    const [first, second] = [...t.cluster.workers.keys()];
    await waitFor(() => t!.frontend.models.model('fake-model')!.candidates().length === 2);
    await t.cluster.removeCard(first!);
    await waitFor(() => t!.frontend.models.model('fake-model')!.candidates().length === 1);
    for (let i = 0; i < 3; i++) await postRaw(`${t.url}/v1/completions`, JSON.stringify({ model: 'fake-model', prompt: 'x' }));
    expect(t.cluster.workers.get(first!)!.worker.calls.length).toBe(0);
    await t.cluster.removeCard(second!);
    await waitFor(() => t!.frontend.models.names().length === 0);
    const gone = await postRaw(`${t.url}/v1/completions`, JSON.stringify({ model: 'fake-model', prompt: 'x' }));
    expect(gone.status).toBe(404);
    const models = await (await fetch(`${t.url}/v1/models`)).json();
    expect(models.data).toEqual([]);
  });

  it('within the grace period a model without cards is still listed and answers 503 no_instances with Retry-After; a card back serves it', async () => {
    t = await startTestFrontend({ migrationWaitMs: 50, retryAfterSeconds: 2 }, async (c) => {
      await c.addWorker({ text: 'a' });
    });
    const [only] = [...t.cluster.workers.keys()];
    await t.cluster.removeCard(only!);
    await waitFor(() => t!.frontend.models.isIdle('fake-model'));
    const down = await postRaw(`${t.url}/v1/completions`, JSON.stringify({ model: 'fake-model', prompt: 'x' }));
    expect(down.status).toBe(503);
    expect(down.headers.get('retry-after')).toBe('2');
    expect(JSON.parse(down.text).error.code).toBe('no_instances');
    const models = await (await fetch(`${t.url}/v1/models`)).json();
    expect(models.data.map((m: { id: string }) => m.id)).toEqual(['fake-model']);
    await t.cluster.addWorker({ text: 'b' });
    await waitFor(() => t!.frontend.models.model('fake-model')!.candidates().length === 1);
    expect((await postRaw(`${t.url}/v1/completions`, JSON.stringify({ model: 'fake-model', prompt: 'x' }))).status).toBe(200);
  });
});

describe('frontend pipeline: cancellation, migration, admission', () => {
  it('a client that disconnects mid-stream aborts the worker stream', async () => {
    t = await startTestFrontend({}, async (c) => {
      await c.addWorker({ text: 'x'.repeat(200), tokenDelayMs: 5 });
    });
    const controller = new AbortController();
    const res = await fetch(`${t.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: chatBody({ stream: true }), signal: controller.signal });
    const reader = res.body!.getReader();
    await reader.read();
    await reader.read();
    controller.abort();
    await waitFor(() => t!.cluster.allCalls()[0]?.aborted === true);
    expect(t.cluster.allCalls()[0]!.finished).toBe(false);
    await waitFor(() => t!.frontend.admission.inflight === 0);
    const metrics = await (await fetch(`${t.url}/metrics`)).text();
    expect(metrics).toMatch(/tandem_frontend_requests_total\{model="fake-model",endpoint="chat_completions",status="499"\} 1/);
  });

  it('a worker that dies mid-stream is replaced: the client gets the full text and never sees it', async () => {
    const TEXT = 'one two three four five six seven';
    t = await startTestFrontend({}, async (c) => {
      await c.addWorker({ text: TEXT });
      await c.addWorker({ text: TEXT });
    });
    await waitFor(() => t!.frontend.models.model('fake-model')!.candidates().length === 2);
    // Round-robin starts at the first candidate: make that the one that dies.
    const dying = t.frontend.models.model('fake-model')!.candidates()[0]!;
    t.cluster.workers.get(dying)!.worker.options.dieAfterTokens = 10;
    const client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const stream = await client.chat.completions.create(
      { model: 'fake-model', messages: [{ role: 'user', content: 'go' }], stream: true, max_tokens: 20, stream_options: { include_usage: true } },
      { headers: {} },
    );
    let text = '';
    let usage: any;
    let finish: string | null = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
      usage = chunk.usage ?? usage;
    }
    expect(text).toBe(TEXT.slice(0, 20));
    expect(finish).toBe('length');
    expect(usage.completion_tokens).toBe(20);
    const calls = t.cluster.allCalls();
    expect(calls).toHaveLength(2);
    const original = calls.find((c) => c.instanceId === dying)!;
    const resumed = calls.find((c) => c.instanceId !== dying)!;
    expect(original.finished).toBe(false);
    expect(resumed.finished).toBe(true);
    // The retry carries prompt + the 10 tokens so far and asks for the remaining 10.
    expect(resumed.request.tokenIds).toEqual([...original.request.tokenIds, ...Buffer.from(TEXT.slice(0, 10))]);
    expect(resumed.request.stop.maxTokens).toBe(10);
    expect(resumed.request.numPriorOutputTokens).toBe(10);
    const metrics = await (await fetch(`${t.url}/metrics`)).text();
    expect(metrics).toMatch(/tandem_frontend_migrations_total\{model="fake-model"\} 1/);
  });

  it('migration stops at --migration-limit and then reports the failure in the stream', async () => {
    t = await startTestFrontend({ migrationLimit: 1 }, async (c) => {
      for (let i = 0; i < 3; i++) await c.addWorker({ text: 'abcdefghij', dieAfterTokens: 2 });
    });
    await waitFor(() => t!.frontend.models.model('fake-model')!.candidates().length === 3);
    const res = await postRaw(`${t.url}/v1/chat/completions`, chatBody({ stream: true }));
    const frames = parseSse(res.text);
    expect(frames.at(-1)).toBe('[DONE]');
    const error = JSON.parse(frames.at(-2)!);
    expect(error.error.code).toBe('unavailable');
    expect(t.cluster.allCalls()).toHaveLength(2);
    // Every token streamed before the failure (2 per worker) reached the client, before the error.
    expect(frames.slice(1, -2).map((f) => JSON.parse(f).choices[0].delta.content).join('')).toBe('abcd');
  });

  it('a request whose only worker is dead waits --migration-wait for another, then fails with 503 and Retry-After', async () => {
    t = await startTestFrontend({ migrationWaitMs: 500 }, async (c) => {
      await c.addWorker({ dieAfterTokens: 0 });
    });
    const startedAt = performance.now();
    const res = await postRaw(`${t.url}/v1/completions`, JSON.stringify({ model: 'fake-model', prompt: 'x' }));
    expect(performance.now() - startedAt).toBeGreaterThanOrEqual(450);
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBe('1');
    expect(JSON.parse(res.text).error.code).toBe('unavailable');
  });

  it('past --max-inflight-requests the frontend answers 503 with Retry-After, and recovers', async () => {
    t = await startTestFrontend({ maxInflightRequests: 2, retryAfterSeconds: 3 }, async (c) => {
      await c.addWorker({ text: 'slow', tokenDelayMs: 40 });
    });
    const slow = [0, 1].map(() => postRaw(`${t!.url}/v1/completions`, JSON.stringify({ model: 'fake-model', prompt: 'x' })));
    await waitFor(() => t!.frontend.admission.inflight === 2);
    const refused = await postRaw(`${t.url}/v1/completions`, JSON.stringify({ model: 'fake-model', prompt: 'x' }));
    expect(refused.status).toBe(503);
    expect(refused.headers.get('retry-after')).toBe('3');
    expect(JSON.parse(refused.text).error.code).toBe('overloaded');
    expect((await Promise.all(slow)).map((r) => r.status)).toEqual([200, 200]);
    expect(t.frontend.admission.inflight).toBe(0);
    const ok = await postRaw(`${t.url}/v1/completions`, JSON.stringify({ model: 'fake-model', prompt: 'x' }));
    expect(ok.status).toBe(200);
  });
});

describe('frontend pipeline: many concurrent streams', () => {
  it('300 concurrent streams all complete and the in-flight gauge returns to 0', async () => {
    t = await startTestFrontend({}, async (c) => {
      await c.addWorker({ text: 'concurrent streams ok', tokenDelayMs: 1 });
      await c.addWorker({ text: 'concurrent streams ok', tokenDelayMs: 1 });
    });
    await waitFor(() => t!.frontend.models.model('fake-model')!.candidates().length === 2);
    const results = await Promise.all(
      Array.from({ length: 300 }, () => streamedText(t!.url, chatBody({ stream: true }))),
    );
    expect(results.every((r) => r.text === 'concurrent streams ok' && r.finish === 'stop')).toBe(true);
    expect(t.frontend.admission.inflight).toBe(0);
    const metrics = await (await fetch(`${t.url}/metrics`)).text();
    expect(metrics).toMatch(/tandem_frontend_inflight_requests\{model="fake-model"\} 0/);
    expect(metrics).toMatch(/tandem_frontend_requests_total\{model="fake-model",endpoint="chat_completions",status="200"\} 300/);
  });
});
