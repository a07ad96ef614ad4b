/**
 * kill -9 of `runtime up` leaves no orphans: its children run in their own sessions, so no
 * signal reaches them, but each holds the supervisor's parent link (runtime/supervisor/
 * parent-link.ts), reads end-of-file the moment `up` dies, drains and exits. Every kind of child
 * is there: the frontend, an aggregated, a prefill and a decode worker, with the planner running.
 * A stream in flight at the kill finishes in full: the children drained, they did not just die;
 * also when `up` was already stopping them (the dead parent is not a second signal).
 * The port is free afterwards: a second `up` on it starts and serves.
 *
 * Needs `npm run build` (spawns bin/runtime.js).
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pollUntil, readSse } from '../harness/http.js';
import { freePort } from '../harness/ports.js';
import { isAlive } from '../harness/processes.js';
import { reportedPids, startUp, stopAll, type Up } from './up.js';

/** The bound for noticing a dead parent, plus a drain with nothing in flight on a loaded 2-core machine. */
const GONE_WITHIN_MS = 2_000 + 8_000;
/** Long enough (at --speedup-ratio 1) to still be streaming when `up` is killed. */
const STREAM_TOKENS = 200;

/** Direct children of `pid` that are not yet gone. */
function liveChildren(pid: number): number[] {
  try {
    return execFileSync('ps', ['-o', 'pid=', '--ppid', String(pid)], { encoding: 'utf8' })
      .split('\n')
      .map((s) => Number(s.trim()))
      .filter((n) => n > 0 && isAlive(n));
  } catch {
    return []; // ps exits 1 when nothing matches
  }
}

describe('runtime up killed with SIGKILL', () => {
  let cacheDir: string;
  const started: Up[] = [];
  beforeAll(async () => {
    cacheDir = await mkdtemp(join(tmpdir(), 'tandem-up-orphans-'));
  });
  afterAll(async () => {
    await stopAll(started);
    await rm(cacheDir, { recursive: true, force: true });
  });

  it('every child notices, drains and exits, and the port is free for the next up', async () => {
    const port = await freePort();
    const args = ['--engine', 'mocker', '--model', 'tiny', '--workers', '1', '--prefill', '1', '--decode', '1', '--kv-bytes-per-token', '4096', '--http-port', String(port)];
    const up = await startUp(cacheDir, [...args, '--planner', 'load', '--max-workers', '6', '--planner-interval', '1']);
    started.push(up);
    await up.proc.waitForLine(/runtime up: planner: load mode/, 30_000);
    const children = reportedPids(up.proc.output());
    // What `up` says it started is all it runs: frontend, agg-0, prefill-0, decode-0.
    expect(children).toHaveLength(4);
    expect(liveChildren(up.proc.pid!).sort()).toEqual([...children].sort());

    // A stream in flight when `up` dies: the children drain, so it finishes in full.
    const res = await fetch(`${up.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny-llama', prompt: 'a stream that outlives runtime up', max_tokens: STREAM_TOKENS, ignore_eos: true, stream: true, stream_options: { include_usage: true } }),
    });
    expect(res.status).toBe(200);
    let killedAt = 0;
    const stream = await readSse(res, async (_chunk, index) => {
      if (index !== 0) return;
      killedAt = Date.now();
      up.proc.kill('SIGKILL');
      await up.proc.exited();
    });
    const streamEndedAt = Date.now();
    expect(killedAt).toBeGreaterThan(0);
    expect(stream.done).toBe(true);
    expect(stream.chunks.map((c) => (c.usage as { completion_tokens?: number } | undefined)?.completion_tokens).find((n) => n !== undefined)).toBe(STREAM_TOKENS);
    await pollUntil(`children ${children.join(', ')} gone`, () => children.every((pid) => !isAlive(pid)), GONE_WITHIN_MS + (streamEndedAt - killedAt));
    console.log(`kill -9 of up: the stream finished after ${streamEndedAt - killedAt} ms, all ${children.length} children gone after ${Date.now() - killedAt} ms`);

    // Nothing holds the port: a second `up` on it starts and serves.
    const again = await startUp(cacheDir, [...args]);
    started.push(again);
    expect(again.url).toBe(`http://127.0.0.1:${port}`);
    const answer = await fetch(`${again.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny-llama', prompt: 'hi', max_tokens: 3 }),
    });
    expect(answer.status).toBe(200);
    expect((await again.proc.stop(20_000)).code).toBe(0);
  });

  it('while it was stopping: the drain under way is not cut short, its stream still ends in full', async () => {
    const up = await startUp(cacheDir, ['--engine', 'mocker', '--model', 'tiny', '--workers', '1', '--http-port', '0']);
    started.push(up);
    const children = reportedPids(up.proc.output());
    expect(children).toHaveLength(2);
    const res = await fetch(`${up.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny-llama', prompt: 'a stream that outlives runtime up', max_tokens: STREAM_TOKENS, ignore_eos: true, stream: true, stream_options: { include_usage: true } }),
    });
    expect(res.status).toBe(200);
    const stream = await readSse(res, async (_chunk, index) => {
      if (index !== 0) return;
      // Ctrl-C: `up` has the frontend drain first; it dies while the frontend drains.
      up.proc.kill('SIGTERM');
      await up.proc.waitForLine(/^\[frontend\] .*shutting down: deregistering/, 10_000);
      up.proc.kill('SIGKILL');
      await up.proc.exited();
    });
    // The parent's death was not a second signal (which exits at once and cuts the stream).
    expect(stream.done).toBe(true);
    expect(stream.chunks.map((c) => (c.usage as { completion_tokens?: number } | undefined)?.completion_tokens).find((n) => n !== undefined)).toBe(STREAM_TOKENS);
    await pollUntil(`children ${children.join(', ')} gone`, () => children.every((pid) => !isAlive(pid)), GONE_WITHIN_MS);
  });
});
