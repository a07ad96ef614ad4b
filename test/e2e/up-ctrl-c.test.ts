/**
 * Ctrl-C on `runtime up` as the README promises it (issue 34 §3.7), as a terminal delivers it:
 * SIGINT to the whole foreground process group.
 *
 * - Started the README's way, `npx runtime up`: npm sits in the group and forwards the SIGINT it
 *   got to its command, so `up` hears the one Ctrl-C twice, and the shell npm runs the command
 *   with hears it too. One Ctrl-C still drains every child once and `npx` exits 0 (the shell is
 *   bash, from the repository's .npmrc, and `up` takes the forwarded copy for the same Ctrl-C).
 * - A second Ctrl-C, pressed while the first is still draining a stream, stops everything at
 *   once: exit 130.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT, SupervisedProcess } from '../../runtime/supervisor/index.js';
import { freePort } from '../harness/ports.js';
import { isAlive } from '../harness/processes.js';
import { reportedPids, startUp, stopAll, type Up } from './up.js';

describe('Ctrl-C on runtime up', () => {
  let cacheDir: string;
  const ups: Up[] = [];
  const procs: SupervisedProcess[] = [];
  beforeAll(async () => {
    cacheDir = await mkdtemp(join(tmpdir(), 'tandem-ctrl-c-'));
  });
  afterAll(async () => {
    for (const p of procs) await p.stop(20_000);
    await stopAll(ups);
    await rm(cacheDir, { recursive: true, force: true });
  }, 60_000);

  it('npx runtime up: one Ctrl-C drains every child once and npx exits 0', async () => {
    const port = await freePort();
    // Its own process group, as a terminal's foreground job: npx, its shell and node all in it.
    const npx = new SupervisedProcess({
      name: 'npx runtime up',
      command: 'npx',
      args: ['runtime', 'up', '--engine', 'mocker', '--model', 'tiny', '--workers', '1', '--http-port', String(port)],
      cwd: REPO_ROOT,
      detached: true,
      env: { TANDEM_CACHE_DIR: cacheDir, TANDEM_LOG_FORMAT: 'json' },
      log: { memoryLines: 100_000 },
    });
    procs.push(npx);
    await npx.waitForLine(/^Press Ctrl-C to stop/, 90_000);
    const children = reportedPids(npx.output());
    expect(children).toHaveLength(2); // frontend + agg-0

    process.kill(-npx.pid!, 'SIGINT');
    expect(await npx.exited(), npx.output().slice(-3000)).toEqual({ code: 0, signal: null });
    const out = npx.output();
    // npx returned only once up had stopped everything, each child by its own drain.
    for (const pid of children) expect(isAlive(pid)).toBe(false);
    expect(out.match(/"msg":"shutdown complete"/g) ?? []).toHaveLength(2);
    expect(out).not.toMatch(/second signal: exiting now/);
  }, 120_000);

  it('a second Ctrl-C during the drain stops everything at once: exit 130', async () => {
    const up = await startUp(cacheDir, ['--engine', 'mocker', '--model', 'tiny', '--workers', '1', '--speedup-ratio', '0.05', '--http-port', String(await freePort())]);
    ups.push(up);
    // A stream the drain waits for (a slow mocker: long enough for two presses of Ctrl-C).
    const stream = await fetch(`${up.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny-llama', prompt: 'a long answer', max_tokens: 2000, ignore_eos: true, stream: true }),
    });
    expect(stream.status).toBe(200);
    const reader = stream.body!.getReader();
    await reader.read();
    process.kill(-up.proc.pid!, 'SIGINT');
    await up.proc.waitForLine(/^runtime up: stopping$/, 10_000);
    // A person's second press comes well after the first (the forwarded copy of one press comes at once).
    await new Promise((r) => setTimeout(r, 1_500));
    process.kill(-up.proc.pid!, 'SIGINT');
    expect(await up.proc.exited()).toEqual({ code: 130, signal: null });
    await reader.cancel().catch(() => undefined);
  }, 120_000);
});
