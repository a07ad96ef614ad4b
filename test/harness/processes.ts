/**
 * Child processes for end-to-end tests: run a TypeScript entry (through tsx) or the built CLI,
 * collect output, wait for a line, and make sure nothing outlives the test run.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const CLI = join(REPO_ROOT, 'bin', 'runtime.js');

const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

export interface Spawned {
  child: ChildProcess;
  output(): string;
  waitForLine(pattern: RegExp, timeoutMs?: number): Promise<string>;
  exited(): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  kill(signal?: NodeJS.Signals): void;
}

export function spawnNode(args: string[], env: NodeJS.ProcessEnv = {}): Spawned {
  const child = spawn(process.execPath, args, {
    cwd: REPO_ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, TANDEM_LOG_FORMAT: 'json', ...env },
  });
  live.add(child);
  let text = '';
  const watchers = new Set<() => void>();
  const onData = (chunk: Buffer) => {
    text += chunk.toString();
    for (const w of [...watchers]) w();
  };
  child.stdout!.on('data', onData);
  child.stderr!.on('data', onData);
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('exit', (code, signal) => {
      live.delete(child);
      for (const w of [...watchers]) w();
      resolve({ code, signal });
    });
  });
  return {
    child,
    output: () => text,
    exited: () => exit,
    kill: (signal = 'SIGTERM') => {
      child.kill(signal);
    },
    waitForLine: (pattern, timeoutMs = 30_000) =>
      new Promise<string>((resolve, reject) => {
        const check = () => {
          const line = text.split('\n').find((l) => pattern.test(l));
          if (line !== undefined) {
            watchers.delete(check);
            clearTimeout(timer);
            resolve(line);
          } else if (child.exitCode !== null || child.signalCode !== null) {
            watchers.delete(check);
            clearTimeout(timer);
            reject(new Error(`process exited before printing ${pattern}; output:\n${text.slice(-4000)}`));
          }
        };
        const timer = setTimeout(() => {
          watchers.delete(check);
          reject(new Error(`timed out waiting for ${pattern}; output:\n${text.slice(-4000)}`));
        }, timeoutMs);
        watchers.add(check);
        check();
      }),
  };
}

/** Run a TypeScript file with tsx. */
export function spawnTs(file: string, args: string[] = [], env: NodeJS.ProcessEnv = {}): Spawned {
  return spawnNode(['--import', 'tsx', join(REPO_ROOT, file), ...args], env);
}

/** Run the built `runtime` CLI (requires `npm run build`). */
export function spawnCli(args: string[], env: NodeJS.ProcessEnv = {}): Spawned {
  return spawnNode([CLI, ...args], env);
}
