/**
 * How to run a `runtime` subcommand as a child: `node bin/runtime.js <subcommand> ...` (the
 * compiled CLI; `npm run build` makes it), or another launcher, e.g. another checkout's build
 * to compare two builds. Children log JSON lines, which start-up predicates read.
 */
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository root: the nearest ancestor with bin/runtime.js (source runs from runtime/supervisor, the build from dist/runtime/supervisor). */
function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 4; i++) {
    if (existsSync(join(dir, 'bin', 'runtime.js'))) return dir;
    dir = resolve(dir, '..');
  }
  return resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
}

export const REPO_ROOT = repoRoot();
export const RUNTIME_BIN = join(REPO_ROOT, 'bin', 'runtime.js');

/** `command`, `args` and `env` of a ProcessSpec for `runtime <args...>`. */
export function runtimeCommand(args: string[], bin: string = RUNTIME_BIN): { command: string; args: string[]; env: NodeJS.ProcessEnv } {
  return { command: process.execPath, args: [bin, ...args], env: { TANDEM_LOG_FORMAT: 'json' } };
}

/** A pino JSON line as a record; undefined for anything else (pretty output, stack traces). */
export function jsonRecord(line: string): Record<string, unknown> | undefined {
  if (!line.startsWith('{')) return undefined;
  try {
    return JSON.parse(line) as Record<string, unknown>;
  } catch {
    return undefined;
  }
}

/** A start-up predicate: the JSON record whose `msg` is `msg`. */
export function recordWithMsg(msg: string): (line: string) => Record<string, unknown> | undefined {
  return (line) => {
    if (!line.includes(msg)) return undefined;
    const record = jsonRecord(line);
    return record?.msg === msg ? record : undefined;
  };
}
