/**
 * Child processes for end-to-end tests: run a TypeScript entry (through tsx) or the built CLI,
 * keep its output in memory, wait for a line. Thin wrappers over the shipped supervisor
 * (runtime/supervisor), which also SIGKILLs every child still running when the test process
 * exits, even after a crash.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT, RUNTIME_BIN, SupervisedProcess, runtimeCommand } from '../../runtime/supervisor/index.js';

export { REPO_ROOT };
export const CLI = RUNTIME_BIN;

/**
 * A child of a test: `output()`, `waitForLine(pattern, timeoutMs)` (lines already printed
 * count), `exited()`, `kill(signal)`, `stop(graceMs)`, `running`, `pid`.
 */
export type Spawned = SupervisedProcess;

/** Tests read whole outputs back: keep far more than a service would. */
const TEST_MEMORY_LINES = 100_000;
let counter = 0;

function nameOf(args: string[]): string {
  const script = args.find((a) => a.endsWith('.ts') || a.endsWith('.js'));
  const base = script ? script.split('/').pop()! : 'node';
  const sub = script ? args[args.indexOf(script) + 1] : undefined;
  return `${base}${sub && !sub.startsWith('-') ? ` ${sub}` : ''}#${++counter}`;
}

export function spawnNode(args: string[], env: NodeJS.ProcessEnv = {}): Spawned {
  return new SupervisedProcess({ name: nameOf(args), args, cwd: REPO_ROOT, env: { TANDEM_LOG_FORMAT: 'json', ...env }, log: { memoryLines: TEST_MEMORY_LINES } });
}

/** Run a TypeScript file with tsx. */
export function spawnTs(file: string, args: string[] = [], env: NodeJS.ProcessEnv = {}): Spawned {
  return spawnNode(['--import', 'tsx', join(REPO_ROOT, file), ...args], env);
}

/** Run the built `runtime` CLI (requires `npm run build`). */
export function spawnCli(args: string[], env: NodeJS.ProcessEnv = {}): Spawned {
  const command = runtimeCommand(args);
  return spawnNode(command.args, { ...command.env, ...env });
}

/**
 * `runtime ...args` run to its exit: its code and everything it printed. One still running
 * after `timeoutMs` is stopped and the call throws with its output (a start that should have
 * failed did not).
 */
export async function runCliToExit(args: string[], env: NodeJS.ProcessEnv = {}, timeoutMs = 60_000): Promise<{ code: number | null; output: string }> {
  const p = spawnCli(args, env);
  const exit = await Promise.race([p.exited(), new Promise<undefined>((r) => setTimeout(() => r(undefined), timeoutMs))]);
  if (!exit) {
    await p.stop(20_000);
    throw new Error(`runtime ${args.join(' ')} was still running after ${timeoutMs / 1000} s:\n${p.output()}`);
  }
  return { code: exit.code, output: p.output() };
}

/**
 * Whether a process with this pid runs (signal 0 probes without sending anything). A zombie
 * counts as gone: an orphan that exited stays one here, where pid 1 does not reap.
 */
export function isAlive(pid: number | undefined): boolean {
  if (pid === undefined) return false;
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    // /proc/<pid>/stat: "pid (comm) state ..."; comm may hold spaces or parentheses.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch (err) {
    // Gone between the probe and the read; or no procfs, where the signal probe is all we have.
    return (err as NodeJS.ErrnoException).code !== 'ENOENT' || existsSync('/proc/self/stat') === false;
  }
}
