/**
 * `runtime frontend` as a process: it starts with file discovery, prints its URL, serves /live
 * and a not-ready /health with no workers, and exits 0 on SIGTERM.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

describe('runtime frontend (process)', () => {
  it('starts, serves /live and /health, and exits cleanly on SIGTERM', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tandem-frontend-cli-'));
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', join(import.meta.dirname, 'fixtures', 'frontend-cli.ts'), 'frontend', '--http-port', '0', '--host', '127.0.0.1', '--discovery', 'file', '--discovery-dir', dir],
      { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, TANDEM_LOG_LEVEL: 'warn', TANDEM_MIGRATION_LIMIT: '2' } },
    );
    try {
      const url = await new Promise<string>((resolve, reject) => {
        let out = '';
        child.stdout.on('data', (chunk: Buffer) => {
          out += chunk.toString();
          const match = /listening on (http:\/\/\S+)/.exec(out);
          if (match) resolve(match[1]!);
        });
        child.once('exit', (code) => reject(new Error(`frontend exited early with ${code}`)));
      });
      expect((await fetch(`${url}/live`)).status).toBe(200);
      const health = await fetch(`${url}/health`);
      expect(health.status).toBe(503);
      expect(await health.json()).toMatchObject({ status: 'not_ready', models: [] });
      const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
      await rm(dir, { recursive: true, force: true });
    }
  });
});
