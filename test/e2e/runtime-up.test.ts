/**
 * `runtime up` smoke test, as a new user runs it: it generates the tiny model, starts a frontend
 * and two mocker workers, prints the URL and a curl line, answers a chat completion, and Ctrl-C
 * stops every child cleanly (each drains once and exits 0) — no orphan processes are left.
 *
 * `up` runs as the leader of its own process group, as in a terminal, so a test can send
 * SIGINT to the whole group the way a terminal's Ctrl-C does.
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../harness/ports.js';
import { isAlive } from '../harness/processes.js';
import { pollUntil } from '../harness/http.js';
import { UP_MOCKER_2, startUp as startUpProcess, stopAll, type Up } from './up.js';

const MODEL = 'tiny-llama';

/** Direct children of `pid` (ps is procps, present wherever the suite runs). */
function childPids(pid: number): number[] {
  try {
    return execFileSync('ps', ['-o', 'pid=', '--ppid', String(pid)], { encoding: 'utf8' })
      .split('\n')
      .map((s) => Number(s.trim()))
      .filter((n) => n > 0);
  } catch {
    return []; // ps exits 1 when nothing matches
  }
}

/** On a fixed free port, so the test can check that the printed URL is the configured one. */
async function startUp(cacheDir: string, extra: string[] = []): Promise<Up & { expectedUrl: string }> {
  const port = await freePort();
  const up = await startUpProcess(cacheDir, [...UP_MOCKER_2, '--http-port', String(port), ...extra]);
  return { ...up, expectedUrl: `http://127.0.0.1:${port}` };
}

/** Stop with `signal` sent to `target`, then check the exit and that every child drained and is gone. */
async function stopAndCheck(up: Up, signal: NodeJS.Signals, target: 'process' | 'group'): Promise<void> {
  const children = childPids(up.proc.pid!);
  expect(children).toHaveLength(3); // frontend + 2 workers
  for (const pid of children) expect(isAlive(pid)).toBe(true);
  const stoppedAt = Date.now();
  process.kill(target === 'group' ? -up.proc.pid! : up.proc.pid!, signal);
  expect(await up.proc.exited(), up.proc.output().slice(-3000)).toEqual({ code: 0, signal: null });
  await pollUntil('children gone', () => children.every((pid) => !isAlive(pid)), 2000);
  expect(Date.now() - stoppedAt).toBeLessThan(15_000);
  const out = up.proc.output();
  expect(out).toContain('runtime up: stopping');
  expect(out).not.toMatch(/exited unexpectedly/);
  // Each child got exactly one signal and finished its own graceful shutdown.
  expect(out).not.toMatch(/second signal: exiting now/);
  expect(out.match(/"msg":"shutdown complete"/g) ?? []).toHaveLength(3);
}

describe('runtime up (all-in-one)', () => {
  let cacheDir: string;
  const started: Up[] = [];
  beforeAll(async () => {
    cacheDir = await mkdtemp(join(tmpdir(), 'tandem-up-cache-'));
  });
  afterAll(async () => {
    await stopAll(started);
    await rm(cacheDir, { recursive: true, force: true });
  });

  it('starts, prints the URL and a working curl line, serves chat, and Ctrl-C stops all children', async () => {
    const up = await startUp(cacheDir, ['--speedup-ratio', '100']);
    started.push(up);
    const out = up.proc.output();
    expect(up.url).toBe(up.expectedUrl);
    expect(out).toContain(`runtime up: generating the tiny model in ${join(cacheDir, 'tiny-llama')}`);
    expect(out).toContain(`Tandem is serving ${MODEL} at ${up.url}`);
    expect(out).toContain(`curl -N ${up.url}/v1/chat/completions`);

    // The printed curl line works: same URL, same body.
    const data = /-d '([^']+)'/.exec(out)?.[1];
    expect(data).toBeDefined();
    expect(JSON.parse(data!)).toMatchObject({ model: MODEL, stream: true });
    const curlRes = await fetch(`${up.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: data! });
    expect(curlRes.status).toBe(200);
    expect(curlRes.headers.get('content-type')).toContain('text/event-stream');
    expect((await curlRes.text()).trimEnd().endsWith('data: [DONE]')).toBe(true);

    const client = new OpenAI({ baseURL: `${up.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    expect((await client.models.list()).data.map((m) => m.id)).toEqual([MODEL]);
    const chat = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'Hello!' }],
      max_tokens: 12,
      ignore_eos: true,
    } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    expect(chat.choices[0]!.finish_reason).toBe('length');
    expect(chat.choices[0]!.message.role).toBe('assistant');
    expect(chat.choices[0]!.message.content!.length).toBeGreaterThan(0);
    expect(chat.usage!.completion_tokens).toBe(12);

    // A terminal's Ctrl-C: SIGINT to the whole foreground process group.
    await stopAndCheck(up, 'SIGINT', 'group');
  });

  it('SIGINT to the up process alone (kill -INT) also stops every child; the cached tiny model is reused', async () => {
    const up = await startUp(cacheDir);
    started.push(up);
    expect(up.proc.output()).not.toContain('generating the tiny model');
    await stopAndCheck(up, 'SIGINT', 'process');
  });

  it('--log-level warn still becomes ready, and shows no info lines of the children', async () => {
    const up = await startUp(cacheDir, ['--log-level', 'warn']);
    started.push(up);
    const out = up.proc.output();
    expect(out).not.toMatch(/^\[(frontend|agg-\d+)\] \{.*"level":30/m);
    const res = await fetch(`${up.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, prompt: 'hi', max_tokens: 3 }),
    });
    expect(res.status).toBe(200);
    const children = childPids(up.proc.pid!);
    expect(children.length).toBe(3);
    const exit = await up.proc.stop(20_000);
    expect(exit.code).toBe(0);
    for (const pid of children) expect(isAlive(pid)).toBe(false);
  });

  it('SIGHUP (the terminal closed) stops every child', async () => {
    const up = await startUp(cacheDir);
    started.push(up);
    await stopAndCheck(up, 'SIGHUP', 'process');
  });
});
