/**
 * `runtime up` checks every flag it passes on before it starts anything: an unknown flag (which
 * `up` forwards to the frontend), a bad value of a forwarded frontend or worker flag, a stray
 * argument, or a bad TANDEM_* variable the children would inherit is exit 2 with one line naming
 * it, and no child was started: `up` announced none, nothing listens on its port, and not even
 * the tiny model was generated. Spawns the built CLI (`npm run build` first).
 */
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXIT_CODES } from '../../runtime/exit-codes.js';
import { freePort } from '../harness/ports.js';
import { spawnCli } from '../harness/processes.js';

/** `runtime up ...args` with its model cache in `cacheDir`; its exit code and everything it printed. */
async function up(cacheDir: string, args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number | null; output: string }> {
  const p = spawnCli(['up', '--engine', 'mocker', '--model', 'tiny', ...args], { TANDEM_CACHE_DIR: cacheDir, ...env });
  const exit = await Promise.race([p.exited(), new Promise<undefined>((r) => setTimeout(() => r(undefined), 60_000))]);
  if (!exit) {
    await p.stop(20_000);
    throw new Error(`runtime up ${args.join(' ')} was still running after 60 s:\n${p.output()}`);
  }
  return { code: exit.code, output: p.output() };
}

/** Whether something listens on 127.0.0.1:port (a bind there fails). */
async function portTaken(port: number): Promise<boolean> {
  const server = createServer();
  return new Promise((resolve) => {
    server.once('error', () => resolve(true));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(false)));
  });
}

describe('runtime up refuses a bad forwarded flag before starting anything', () => {
  let cacheDir: string;
  beforeAll(async () => {
    cacheDir = await mkdtemp(join(tmpdir(), 'tandem-up-flags-'));
  });
  afterAll(async () => {
    await rm(cacheDir, { recursive: true, force: true });
  });

  const cases: Array<{ what: string; args: string[]; env?: NodeJS.ProcessEnv; line: RegExp }> = [
    { what: 'an unknown flag (forwarded to the frontend)', args: ['--bogus-flag'], line: /^runtime: unknown option '--bogus-flag' \(runtime up passes flags it does not know to the frontend; `runtime frontend --help` lists its options\)$/ },
    { what: 'an unknown flag with a value, after known forwarded ones', args: ['--router-mode', 'kv', '--bogus-flag', '7'], line: /^runtime: unknown option '--bogus-flag' / },
    { what: 'a bad value of a forwarded frontend flag', args: ['--router-mode', 'fastest'], line: /^runtime: option '--router-mode <mode>' argument 'fastest' is invalid\..* \(runtime up passes flags it does not know to the frontend\)$/ },
    { what: 'a bad value of a worker flag', args: ['--num-gpu-blocks', 'many'], line: /^runtime: option '--num-gpu-blocks <n>' argument 'many' is invalid\..* \(runtime up passes it to every worker\)$/ },
    { what: 'a bad grammar compile budget (passed to the frontend and every worker)', args: ['--grammar-compile-timeout-ms', '0'], line: /^runtime: option '--grammar-compile-timeout-ms <ms>' argument '0' is invalid\./ },
    { what: 'a bad --context-length (passed to every worker)', args: ['--context-length', '-4'], line: /^runtime: option '--context-length <n>' argument '-4' is invalid\..* \(runtime up passes it to every worker\)$/ },
    { what: 'a bad --kv-disk-min-reuse (passed to every worker)', args: ['--kv-host-cache-gb', '1', '--kv-disk-min-reuse', '-1'], line: /^runtime: option '--kv-disk-min-reuse <n>' argument '-1' is invalid\..* \(runtime up passes it to every worker\)$/ },
    { what: 'a bad --kv-host-cache-gb (passed to every worker)', args: ['--kv-host-cache-gb', 'lots'], line: /^runtime: option '--kv-host-cache-gb <gib>' argument 'lots' is invalid\..* \(runtime up passes it to every worker\)$/ },
    { what: 'a bad --kv-cache-dtype (passed to every worker)', args: ['--kv-cache-dtype', 'fp4'], line: /^runtime: option '--kv-cache-dtype <dtype>' argument 'fp4' is invalid\..* \(runtime up passes it to every worker\)$/ },
    { what: 'a bad --quantization (passed to every worker)', args: ['--quantization', 'int4'], line: /^runtime: option '--quantization <method>' argument 'int4' is invalid\..* \(runtime up passes it to every worker\)$/ },
    { what: 'a bad --log-level (passed to every child)', args: ['--log-level', 'loud'], line: /^runtime: option '--log-level <level>' argument 'loud' is invalid\./ },
    { what: 'a forwarded flag missing its value', args: ['--migration-limit'], line: /^runtime: option '--migration-limit <n>' argument missing / },
    { what: 'a stray argument', args: ['serve'], line: /^runtime: unexpected argument 'serve' / },
    // Combinations of worker flags: the worker's own rules (workers/process/worker-flag-rules.ts), checked by up first.
    { what: 'a disk tier without a host tier (every worker would refuse it)', args: ['--kv-disk-cache-gb', '1'], line: /^runtime: --kv-disk-cache-dir \/ --kv-disk-cache-gb need --kv-host-cache-gb: .* \(runtime up passes it to every worker\)$/ },
    { what: 'a native disk tier without its directory', args: ['--engine', 'native', '--kv-host-cache-gb', '0.01', '--kv-disk-cache-gb', '1'], line: /^runtime: --kv-disk-cache-gb needs --kv-disk-cache-dir \(runtime up passes it to every worker\)$/ },
    { what: 'a disk tier without a host tier, from the environment the workers inherit', args: [], env: { TANDEM_KV_DISK_CACHE_DIR: '/tmp/nowhere' }, line: /^runtime: --kv-disk-cache-dir \/ --kv-disk-cache-gb need --kv-host-cache-gb/ },
    { what: 'a bad TANDEM_* variable the frontend would inherit', args: [], env: { TANDEM_ROUTER_MODE: 'fastest' }, line: /^runtime: environment variable TANDEM_ROUTER_MODE \(option '--router-mode <mode>'\): .*'fastest'/ },
  ];

  for (const c of cases) {
    it(`${c.what}: exit 2, one line naming it, no child started`, async () => {
      const port = await freePort();
      const { code, output } = await up(cacheDir, [...c.args, '--http-port', String(port)], c.env);
      expect(code, output).toBe(EXIT_CODES.config);
      const lines = output.trimEnd().split('\n');
      expect(lines, output).toHaveLength(1);
      expect(lines[0]).toMatch(c.line);
      // `up` announces every child it starts ("runtime up: frontend started (pid N)").
      expect(output).not.toContain('started (pid');
      expect(await portTaken(port)).toBe(false);
      expect(await readdir(cacheDir)).toEqual([]);
    }, 90_000);
  }
});
