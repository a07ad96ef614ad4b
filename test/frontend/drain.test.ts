/**
 * Graceful shutdown of a real `runtime frontend` process (built CLI) in front of a real mocker
 * worker: SIGTERM stops admission (503 + Retry-After, /health 503 "draining") while in-flight
 * streams run to their end within --drain-timeout; past it, every stream still running ends with
 * an OpenAI-shaped SSE error frame (and a unary request gets an error response), never silently.
 * Needs `npm run build`.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CliStack } from '../harness/cli-stack.js';
import { pollUntil, readSse, type SseResult } from '../harness/http.js';
import type { Spawned } from '../harness/processes.js';

const STREAMS = 20;
const MAX_TOKENS = 1000;
/** Mocker time divisor: 20 streams of 1000 tokens take several seconds (more on a loaded box). */
const SPEEDUP = 2;

interface Frontend {
  proc: Spawned;
  url: string;
}

async function startFrontend(stack: CliStack, drainTimeoutSeconds: number): Promise<Frontend> {
  const proc = await stack.startFrontend(['--drain-timeout', String(drainTimeoutSeconds)]);
  const line = await proc.waitForLine(/^frontend listening on http:\/\//);
  const url = line.slice('frontend listening on '.length).trim();
  await stack.waitForRoutable(1, { url });
  return { proc, url };
}

function chat(url: string, model: string, stream: boolean): Promise<Response> {
  return fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model,
      messages: [{ role: 'user', content: 'Tell me a long story.' }],
      max_tokens: MAX_TOKENS,
      ignore_eos: true,
      stream,
      ...(stream ? { stream_options: { include_usage: true } } : {}),
    }),
  });
}

/** Start `count` streams; resolves once every one has received a content chunk. */
async function startStreams(url: string, model: string, count: number): Promise<{ results: Array<Promise<SseResult>>; finished: () => number }> {
  let started = 0;
  let finished = 0;
  const results = Array.from({ length: count }, async () => {
    const res = await chat(url, model, true);
    expect(res.status).toBe(200);
    let counted = false;
    const result = await readSse(res, (chunk) => {
      const delta = (chunk.choices as Array<{ delta?: { content?: string } }> | undefined)?.[0]?.delta;
      if (!counted && delta?.content) {
        counted = true;
        started += 1;
      }
    });
    finished += 1;
    return result;
  });
  await pollUntil(`${count} streams producing tokens`, () => started === count, 60_000);
  return { results, finished: () => finished };
}

async function healthOf(url: string): Promise<{ status: number; body: { status?: string } }> {
  const res = await fetch(`${url}/health`);
  return { status: res.status, body: (await res.json()) as { status?: string } };
}

describe('SIGTERM to a frontend process with streams in flight', () => {
  let stack: CliStack;

  beforeAll(async () => {
    stack = await CliStack.create({ tmpPrefix: 'tandem-drain-' });
    await stack.startWorker('agg', ['--engine', 'mocker', '--speedup-ratio', String(SPEEDUP), '--num-gpu-blocks', '4096']);
  }, 120_000);
  afterAll(async () => stack?.close());

  it('refuses new work with 503 and lets all 20 streams finish with [DONE], then exits 0', async () => {
    const { proc, url } = await startFrontend(stack, 120);
    const { results, finished } = await startStreams(url, stack.model, STREAMS);
    // They must still be running when the signal comes, or this proves nothing.
    expect(finished()).toBe(0);
    proc.kill('SIGTERM');

    // Readiness goes false at once, while the streams keep going.
    await pollUntil('/health to report draining', async () => (await healthOf(url)).status === 503, 10_000);
    const health = await healthOf(url);
    expect(health.body.status).toBe('draining');
    // A new request during the drain: 503, Retry-After, OpenAI's error shape.
    const refused = await chat(url, stack.model, true);
    expect(refused.status).toBe(503);
    expect(refused.headers.get('retry-after')).toBe('1');
    const body = (await refused.json()) as { error: { type: string; code: string; message: string } };
    expect(body.error).toMatchObject({ type: 'service_unavailable_error', code: 'unavailable' });
    expect(body.error.message).toMatch(/shutting down/);
    expect(finished(), 'the check above ran during the drain').toBeLessThan(STREAMS);
    expect(proc.running).toBe(true);

    for (const result of await Promise.all(results)) {
      expect(result.done).toBe(true);
      expect(result.chunks.some((c) => 'error' in c)).toBe(false);
      const finish = result.chunks.flatMap((c) => (c.choices as Array<{ finish_reason: string | null }> | undefined) ?? []).find((c) => c.finish_reason !== null);
      expect(finish?.finish_reason).toBe('length');
      const usage = result.chunks.find((c) => c.usage)?.usage as { completion_tokens: number } | undefined;
      expect(usage?.completion_tokens).toBe(MAX_TOKENS);
    }
    const exit = await Promise.race([proc.exited(), new Promise<'hung'>((r) => setTimeout(() => r('hung'), 30_000))]);
    expect(exit).toEqual({ code: 0, signal: null });
    expect(proc.output()).toMatch(/"msg":"shutdown complete"/);
  }, 180_000);

  it('past --drain-timeout ends every stream with an error frame and a unary request with an error response', async () => {
    const { proc, url } = await startFrontend(stack, 1);
    const { results } = await startStreams(url, stack.model, 5);
    const unary = chat(url, stack.model, false);
    // The unary request is admitted before the signal (it shows in /health's inflight count).
    await pollUntil('6 requests in flight', async () => ((await (await fetch(`${url}/health`)).json()) as { inflight: number }).inflight === 6, 30_000);
    proc.kill('SIGTERM');

    for (const result of await Promise.all(results)) {
      expect(result.done).toBe(true);
      const last = result.chunks.at(-1) as { error?: { type: string; code: string; message: string } };
      expect(last.error).toMatchObject({ type: 'service_unavailable_error', code: 'unavailable' });
      expect(last.error!.message).toMatch(/drain timeout/);
      // Cut, not finished: no finish reason came.
      expect(result.chunks.flatMap((c) => (c.choices as Array<{ finish_reason: string | null }> | undefined) ?? []).some((c) => c.finish_reason !== null)).toBe(false);
    }
    const res = await unary;
    expect(res.status).toBe(503);
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe('unavailable');
    expect(body.error.message).toMatch(/drain timeout/);
    const exit = await Promise.race([proc.exited(), new Promise<'hung'>((r) => setTimeout(() => r('hung'), 30_000))]);
    expect(exit).toEqual({ code: 0, signal: null });
  }, 180_000);
});
