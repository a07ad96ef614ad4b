/**
 * `runtime up` keeps serving when a child crashes (issue 12, fault 1), and stops in order.
 *
 * - kill -9 of one worker under 20 concurrent streams: every stream still completes with its
 *   full length and [DONE] (the frontend migrates them, never to a dead or draining worker),
 *   `up` keeps running, restarts the worker with backoff, and the new worker serves.
 * - kill -9 of the frontend: `up` restarts it on the same port and it serves again.
 * - SIGTERM to `up`: the frontend is stopped (and has exited) before any worker is signalled,
 *   and `up` exits 0.
 *
 * - kill -9 of the only decode worker of `up --prefill 1 --decode 1`, and of the only worker of
 *   `up --workers 1`, under 20 streams (issue 23, item 3): every stream pauses, then finishes in
 *   full (on the prefill worker, or on the restarted worker); requests sent during the outage
 *   succeed; no answer carries an internal address or a socket error.
 *
 * `up` logs `runtime up: NAME started (pid N)` for every child run; that is how the test finds
 * the worker to kill.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricValue, pollUntil, readSse, scrape } from '../harness/http.js';
import { freePort } from '../harness/ports.js';
import { UP_MOCKER_2, reportedPids, startUp, stopAll, type Up } from './up.js';

const MODEL = 'tiny-llama';
const STREAMS = 20;
// Speedup 1: ~6 ms per decode step, so 400 tokens take a few seconds and the kill lands mid-stream.
const MAX_TOKENS = 400;
const UP_ARGS = [...UP_MOCKER_2, '--http-port', '0', '--speedup-ratio', '1', '--num-gpu-blocks', '2048'];
/** A pool of one worker: `up` with these plus its pool flags. */
const LONE_ARGS = ['--engine', 'mocker', '--model', 'tiny', '--http-port', '0', '--speedup-ratio', '1', '--num-gpu-blocks', '2048'];
/** What no client may ever read: an internal address or a socket error. */
const LEAKS = /127\.0\.0\.1|ECONNREFUSED|\d+\.\d+\.\d+\.\d+:\d+|No connection established|Connection dropped/;

/**
 * Issue 23, item 3: kill -9 of the only worker of a pool (`victim`) under 20 chat streams sent
 * with the openai SDK. Every stream ends with finish_reason length and all its tokens; four
 * requests sent during the outage get their whole answer; no body or frame names an address
 * or a socket error; each stream moved at least once; `up` restarts the worker.
 */
async function expectOutageCostsAPause(up: Up, victim: string): Promise<void> {
  const out = () => up.proc.output();
  const [victimPid] = reportedPids(out(), victim);
  expect(victimPid).toBeGreaterThan(0);
  const client = new OpenAI({ baseURL: `${up.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
  let killed = false;
  let chunksSeen = 0;
  let longestPauseMs = 0;
  let onKilled: () => void = () => undefined;
  const killedNow = new Promise<void>((resolve) => (onKilled = resolve));
  const streams = Array.from({ length: STREAMS }, async (_, i) => {
    const { data: stream, response } = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: `stream ${i}: tell me a story` }],
      max_tokens: MAX_TOKENS,
      seed: i,
      stream: true,
      stream_options: { include_usage: true },
      ...({ ignore_eos: true } as object), // vLLM's extension, not in the SDK's types
    }).withResponse();
    const requestId = response.headers.get('x-request-id');
    let finish: string | null | undefined;
    let completionTokens: number | undefined;
    let last = performance.now();
    for await (const chunk of stream) {
      const now = performance.now();
      longestPauseMs = Math.max(longestPauseMs, now - last);
      last = now;
      for (const choice of chunk.choices) if (choice.finish_reason) finish = choice.finish_reason;
      if (chunk.usage) completionTokens = chunk.usage.completion_tokens;
      // Kill once every stream is well under way (about 30 chunks each on average).
      if (!killed && ++chunksSeen >= STREAMS * 30) {
        killed = true;
        process.kill(victimPid!, 'SIGKILL');
        onKilled();
      }
    }
    return { finish, completionTokens, requestId };
  });
  // New requests while the pool is empty: each must get its whole answer, not an error.
  const during = (async () => {
    await killedNow;
    const answers: Array<{ status: number; text: string }> = [];
    for (let i = 0; i < 4; i++) {
      const res = await fetch(`${up.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, prompt: `outage ${i}`, max_tokens: 8, ignore_eos: true, stream: i % 2 === 0 }),
      });
      answers.push({ status: res.status, text: await res.text() });
      await new Promise((r) => setTimeout(r, 300));
    }
    return answers;
  })();
  const results = await Promise.allSettled(streams);
  expect(killed).toBe(true);
  for (const r of results) {
    if (r.status === 'rejected') expect(String(r.reason)).not.toMatch(LEAKS);
    expect(r.status).toBe('fulfilled');
    if (r.status === 'fulfilled') expect({ finish: r.value.finish, completionTokens: r.value.completionTokens }).toEqual({ finish: 'length', completionTokens: MAX_TOKENS });
  }
  // The dashboard's request inspector counts each stream's own moves.
  let inspectedMoves = 0;
  for (const r of results) {
    if (r.status !== 'fulfilled') continue;
    const record = (await (await fetch(`${up.url}/dashboard/api/requests/${r.value.requestId}`)).json()) as { migrations: number };
    inspectedMoves += record.migrations;
  }
  expect(inspectedMoves).toBeGreaterThanOrEqual(STREAMS);
  for (const answer of await during) {
    expect(answer.text).not.toMatch(LEAKS);
    expect(answer.status).toBe(200);
    expect(answer.text).not.toContain('"error"');
    if (answer.text.startsWith('data: ')) expect(answer.text).toContain('"finish_reason":"length"');
    else expect((JSON.parse(answer.text) as { usage: { completion_tokens: number } }).usage.completion_tokens).toBe(8);
  }
  const migrations = metricValue(await scrape(up.url), 'tandem_frontend_migrations_total', { model: MODEL }) ?? 0;
  expect(migrations).toBeGreaterThanOrEqual(STREAMS);
  console.log(`kill -9 of ${victim}: longest pause in a stream ${(longestPauseMs / 1000).toFixed(2)} s, ${migrations} migrations`);
  await pollUntil(`${victim} restarted`, () => reportedPids(out(), victim).length === 2, 30_000);
  expect(up.proc.running).toBe(true);
}

describe('runtime up: supervision', () => {
  let cacheDir: string;
  const started: Up[] = [];
  beforeAll(async () => {
    cacheDir = await mkdtemp(join(tmpdir(), 'tandem-up-restart-'));
  });
  afterAll(async () => {
    await stopAll(started);
    await rm(cacheDir, { recursive: true, force: true });
  });

  it('kill -9 of a worker mid-stream: all 20 streams complete, up keeps running and restarts the worker, which serves', async () => {
    const up = await startUp(cacheDir, UP_ARGS);
    started.push(up);
    const [victimPid] = reportedPids(up.proc.output(), 'agg-0');
    expect(victimPid).toBeGreaterThan(0);

    let killed = false;
    let chunksSeen = 0;
    const streams = Array.from({ length: STREAMS }, async (_, i) => {
      const res = await fetch(`${up.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, prompt: `stream ${i}: once upon a time`, max_tokens: MAX_TOKENS, ignore_eos: true, seed: i, stream: true, stream_options: { include_usage: true } }),
      });
      expect(res.status).toBe(200);
      return readSse(res, () => {
        // Kill once every stream is well under way (about 30 tokens each on average).
        if (!killed && ++chunksSeen >= STREAMS * 30) {
          killed = true;
          process.kill(victimPid!, 'SIGKILL');
        }
      });
    });
    const results = await Promise.all(streams);
    expect(killed).toBe(true);
    for (const r of results) {
      expect(r.done).toBe(true);
      const usage = r.chunks.at(-1)!.usage as { completion_tokens: number } | undefined;
      expect(usage?.completion_tokens).toBe(MAX_TOKENS);
      const text = r.chunks.flatMap((c) => (c.choices as Array<{ text?: string; finish_reason?: string | null }>) ?? []);
      expect(text.filter((c) => c.finish_reason === 'length')).toHaveLength(1);
      expect(r.chunks.some((c) => 'error' in c)).toBe(false);
    }

    // up is still running, logged the crash, and restarted the worker as a new process.
    expect(up.proc.running).toBe(true);
    const out = () => up.proc.output();
    expect(out()).toMatch(/runtime up: agg-0 exited unexpectedly \(code null, signal SIGKILL\)/);
    expect(out()).toMatch(/runtime up: restarting agg-0 in \d+ ms \(attempt 1\)/);
    expect(out()).not.toContain('runtime up: stopping');
    await pollUntil('agg-0 restarted', () => reportedPids(out(), 'agg-0').length === 2, 30_000);
    const newPid = reportedPids(out(), 'agg-0')[1]!;
    expect(newPid).not.toBe(victimPid);
    expect(out()).toMatch(new RegExp(`runtime up: agg-0 started \\(pid ${newPid}\\), restart 1`));
    const readyLines = () => out().split('\n').filter((l) => l.startsWith('[agg-0] ') && l.includes('"msg":"worker ready"'));
    await pollUntil('the restarted agg-0 registered', () => readyLines().length === 2, 60_000);
    const newInstance = (JSON.parse(readyLines()[1]!.slice('[agg-0] '.length)) as { instanceId: string }).instanceId;

    // The new worker serves: some request lands on it and completes in full.
    await pollUntil('a request served by the restarted worker', async () => {
      const res = await fetch(`${up.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: MODEL, prompt: 'hi', max_tokens: 8, ignore_eos: true }) });
      expect(res.status).toBe(200);
      const body = (await res.json()) as { usage: { completion_tokens: number } };
      expect(body.usage.completion_tokens).toBe(8);
      return res.headers.get('x-worker-instance-id') === newInstance;
    }, 30_000, 100);
    expect(up.proc.running).toBe(true);
  });

  it('kill -9 of the only decode worker (up --prefill 1 --decode 1): all 20 streams pause and finish in full, requests during the outage succeed, nothing leaks an address', async () => {
    const up = await startUp(cacheDir, [...LONE_ARGS, '--prefill', '1', '--decode', '1', '--kv-bytes-per-token', '4096'], { UCX_TLS: 'tcp' });
    started.push(up);
    await expectOutageCostsAPause(up, 'decode-0');
  });

  it('kill -9 of the only worker (up --workers 1, no other pool): every request waits for the restarted worker (--migration-wait) and finishes in full', async () => {
    const up = await startUp(cacheDir, [...LONE_ARGS, '--workers', '1']);
    started.push(up);
    await expectOutageCostsAPause(up, 'agg-0');
  });

  it('kill -9 of the frontend: up restarts it on the same port, and it serves again', async () => {
    const port = await freePort();
    const up = await startUp(cacheDir, [...UP_MOCKER_2, '--http-port', String(port)]);
    started.push(up);
    const out = () => up.proc.output();
    const [frontendPid] = reportedPids(out(), 'frontend');
    process.kill(frontendPid!, 'SIGKILL');
    await pollUntil('frontend restarted', () => reportedPids(out(), 'frontend').length === 2, 30_000);
    expect(out()).toMatch(/runtime up: frontend exited unexpectedly \(code null, signal SIGKILL\)/);
    await pollUntil('frontend listening again', () => out().includes(`runtime up: frontend listening again at ${up.url}`), 60_000);
    await pollUntil('the restarted frontend serves', async () => {
      const res = await fetch(`${up.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: MODEL, prompt: 'hi', max_tokens: 8, ignore_eos: true }) });
      return res.status === 200 && ((await res.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens === 8;
    }, 30_000, 200);
    expect(up.proc.running).toBe(true);
  });

  it('SIGTERM: up stops the frontend first (it has exited before any worker is signalled), then the workers, and exits 0', async () => {
    const up = await startUp(cacheDir, UP_ARGS);
    started.push(up);
    up.proc.kill('SIGTERM');
    expect(await up.proc.exited()).toEqual({ code: 0, signal: null });
    const lines = up.proc.output().split('\n');
    const at = (pred: (l: string) => boolean) => lines.findIndex(pred);
    const frontendStopped = at((l) => l.startsWith('runtime up: frontend stopped (code 0'));
    expect(frontendStopped).toBeGreaterThan(0);
    for (const w of ['agg-0', 'agg-1']) {
      const firstWorkerShutdownLine = at((l) => l.startsWith(`[${w}] `) && /"msg":"(draining|shutting down|shutdown complete)|SIGTERM/.test(l));
      const workerStopped = at((l) => l.startsWith(`runtime up: ${w} stopped (code 0`));
      expect(workerStopped).toBeGreaterThan(frontendStopped);
      expect(firstWorkerShutdownLine).toBeGreaterThan(frontendStopped);
    }
    expect(up.proc.output()).not.toContain('exited unexpectedly');
  });
});
