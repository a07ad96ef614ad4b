/**
 * `runtime up` as a test's child: started in its own process group (as in a terminal, so a
 * test can send SIGINT to the whole group the way Ctrl-C does), through the shipped supervisor
 * (test/harness/processes.ts), ready once it prints "Press Ctrl-C to stop".
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import { REPO_ROOT, SupervisedProcess, runtimeCommand } from '../../runtime/supervisor/index.js';
import { freePort } from '../harness/ports.js';
import { isAlive } from '../harness/processes.js';

export interface Up {
  proc: SupervisedProcess;
  /** The URL `up` printed ("Tandem is serving MODEL at URL"). */
  url: string;
}

/** The usual fleet of these tests: two mocker workers over the tiny model. */
export const UP_MOCKER_2 = ['--engine', 'mocker', '--model', 'tiny', '--workers', '2'];

/** `runtime up ...args`, the tiny model cached in `cacheDir`; resolves once it says it serves. */
export async function startUp(cacheDir: string, args: string[], env: NodeJS.ProcessEnv = {}): Promise<Up> {
  const command = runtimeCommand(['up', ...args]);
  const proc = new SupervisedProcess({ name: 'runtime up', ...command, cwd: REPO_ROOT, detached: true, env: { ...command.env, TANDEM_CACHE_DIR: cacheDir, ...env }, log: { memoryLines: 100_000 } });
  const line = await proc.waitForLine(/^Tandem is serving \S+ at http:\/\/\S+$/, 90_000);
  await proc.waitForLine(/^Press Ctrl-C to stop/, 10_000);
  return { proc, url: line.split(' at ')[1]!.trim() };
}

/** Pids of every run of child `name` (default: any child) that `up` reported, in order. */
export function reportedPids(out: string, name = '[\\w-]+'): number[] {
  return [...out.matchAll(new RegExp(`runtime up: ${name} started \\(pid (\\d+)\\)`, 'g'))].map((m) => Number(m[1]));
}

/** Teardown: stop each `up` still running; SIGKILL any child it reported that is still alive. */
export async function stopAll(ups: Up[]): Promise<void> {
  for (const up of ups) {
    await up.proc.stop(20_000);
    for (const pid of reportedPids(up.proc.output())) if (isAlive(pid)) process.kill(pid, 'SIGKILL');
  }
}

/**
 * A fleet under `runtime up` for one describe block: started in its beforeAll on a free port with
 * `args(cacheDir)`, stopped and its cache dir (prefix `prefix`) removed in its afterAll.
 */
export function upForBlock(prefix: string, args: (cacheDir: string) => Promise<string[]>): { url: () => string; output: () => string } {
  let cacheDir: string | undefined;
  let up: Up | undefined;
  beforeAll(async () => {
    cacheDir = await mkdtemp(join(tmpdir(), prefix));
    up = await startUp(cacheDir, [...(await args(cacheDir)), '--http-port', String(await freePort())]);
  }, 120_000);
  afterAll(async () => {
    if (up !== undefined) await stopAll([up]);
    if (cacheDir !== undefined) await rm(cacheDir, { recursive: true, force: true });
  }, 60_000);
  return { url: () => up!.url, output: () => up!.proc.output() };
}
